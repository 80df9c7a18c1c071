#include "tools/tool_support.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/ir/dtype.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/by_name.h"
#include "proto/graph_def.h"
#include "runtime/command_line.h"

namespace einsummable::tools {

absl::StatusOr<std::map<std::string, int64_t>> parse_bindings(const std::string& text) {
    std::map<std::string, int64_t> bindings;
    if (text.empty()) {
        return bindings;
    }
    for (absl::string_view item : absl::StrSplit(text, ',')) {
        std::pair<std::string, std::string> pair = absl::StrSplit(item, absl::MaxSplits('=', 1));
        int64_t value = 0;
        if (pair.first.empty() || !absl::SimpleAtoi(pair.second, &value) || value <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("--bind: '", item, "' is not NAME=SIZE with a positive integer size"));
        }
        bindings[pair.first] = value;
    }
    return bindings;
}

absl::StatusOr<ir::Graph> load_graph(const std::string& workload, const std::string& path,
                                     const std::string& bind) {
    if (workload.empty() == path.empty()) {
        return absl::InvalidArgumentError("give exactly one of --workload NAME or --graph FILE");
    }
    if (!workload.empty()) {
        return workloads::by_name(workload);
    }
    absl::StatusOr<std::string> contents = runtime::read_file(path);
    if (!contents.ok()) {
        return absl::NotFoundError(absl::StrCat("--graph: ", contents.status().message()));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const auto bindings, parse_bindings(bind));
    absl::StatusOr<v1::GraphDef> def = graphdef::parse_graph_file(*contents, path);
    if (!def.ok()) {
        return absl::Status(def.status().code(), absl::StrCat(path, ": ", def.status().message()));
    }
    absl::StatusOr<ir::Graph> graph = graphdef::build_graph(*def, bindings);
    if (!graph.ok()) {
        return absl::Status(graph.status().code(),
                            absl::StrCat(path, ": ", graph.status().message()));
    }
    // A graph file does not say which inputs are weights (the daemon is told at registration).
    // Where some input has a symbolic dimension (bound per request), the inputs whose
    // dimensions are all fixed are taken for the weights, as the daemon requires of weights.
    std::vector<ir::TensorId> fixed;
    bool symbolic = false;
    for (const v1::TensorDesc& input : def->inputs()) {
        const bool all_fixed =
            std::none_of(input.dims().begin(), input.dims().end(),
                         [](const v1::Dimension& dim) { return dim.has_symbol(); });
        symbolic = symbolic || !all_fixed;
        if (all_fixed) {
            fixed.push_back(*graph->find_tensor(input.name()));
        }
    }
    for (ir::TensorId id : symbolic ? fixed : std::vector<ir::TensorId>{}) {
        EINSUMMABLE_RETURN_IF_ERROR(graph->mark_weight(id));
    }
    return graph;
}

std::vector<float> random_values(const ir::TensorType& type, std::mt19937_64& rng) {
    const double last = type.rank() > 0 ? static_cast<double>(type.dims.back().size) : 1.0;
    const double scale = type.rank() >= 2 ? std::sqrt(3.0 / last) : 1.0;
    std::uniform_real_distribution<double> uniform(-scale, scale);
    std::vector<float> values(type.elements());
    for (float& value : values) {
        value = static_cast<float>(ir::round_to_dtype(uniform(rng), type.dtype));
    }
    return values;
}

} // namespace einsummable::tools
