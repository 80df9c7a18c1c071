#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"

namespace einsummable::tools {

// What the command-line tools share beyond runtime/command_line.h (flags, files, topologies,
// which the daemon needs too): binding symbolic dimensions, loading graphs, input values.

// --bind: "tokens=4096,batch=8".
absl::StatusOr<std::map<std::string, int64_t>> parse_bindings(const std::string& text);

// Exactly one of a built-in workload name (workloads::by_name) or a graph file (GraphDef text
// or JSON, symbolic dimensions bound by `bind`; when it has symbols, the inputs whose dimensions
// are all fixed are marked weights, ir::GraphTensor::weight); errors name the file.
absl::StatusOr<ir::Graph> load_graph(const std::string& workload, const std::string& path,
                                     const std::string& bind);

// Seeded input values for a tensor: uniform in [-s, s) with s = sqrt(3 / last dimension), so
// rows have unit variance and long chains of products stay in range even in f16; rounded to the
// tensor's dtype, so a reference sees exactly what a runtime stores.
std::vector<float> random_values(const ir::TensorType& type, std::mt19937_64& rng);

} // namespace einsummable::tools
