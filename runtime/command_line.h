#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/topology.h"

namespace einsummable::runtime {

// What every program — the daemon and the command-line tools — does with its command line:
// check its flags, read the files they name, load the topology --topology names. Here, below
// both, so that the daemon needs nothing from tools/ (docs/design.md "Layers").

// "FILE:line L column C: ..." for located messages, "FILE: ..." otherwise.
std::string in_file(const std::string& path, absl::string_view message);

// The whole file ("-": standard input); NotFound naming the path.
absl::StatusOr<std::string> read_file(const std::string& path);

// Checks argv against the registered absl flags before absl::ParseCommandLine (which exits
// with status 1 on a bad flag): the message for an unknown flag, a missing value or a value
// that does not parse; nullopt when all are fine.
std::optional<std::string> check_flags(int argc, char** argv);

// --topology: a built-in name, else the path of a topology file (docs/topologies.md).
absl::StatusOr<exprog::Topology> load_topology(const std::string& arg);

} // namespace einsummable::runtime
