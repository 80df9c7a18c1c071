#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"

namespace einsummable::tools {

// What the command-line tools share: reading files and flags, loading graphs and topologies.

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

// --bind: "tokens=4096,batch=8".
absl::StatusOr<std::map<std::string, int64_t>> parse_bindings(const std::string& text);

// Exactly one of a built-in workload name (workloads::by_name) or a graph file (GraphDef text
// or JSON, symbolic dimensions bound by `bind`); errors name the file.
absl::StatusOr<ir::Graph> load_graph(const std::string& workload, const std::string& path,
                                     const std::string& bind);

// Seeded input values for a tensor: uniform in [-s, s) with s = sqrt(3 / last dimension), so
// rows have unit variance and long chains of products stay in range even in f16; rounded to the
// tensor's dtype, so a reference sees exactly what a runtime stores.
std::vector<float> random_values(const ir::TensorType& type, std::mt19937_64& rng);

} // namespace einsummable::tools
