// einsummable-plan: prints the logical plan (one join-agg spec per operator) for a built-in
// workload or a graph file. See docs/planner.md.

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/workloads.h"
#include "proto/graph_def.h"

ABSL_FLAG(std::string, workload, "",
          "built-in workload: ffn, matmul:N, matmul:MxKxN, llama-block:tokens=T, "
          "llama-block:seqs=NxL, llama-stack:blocks=B,tokens=T, chain:A..E");
ABSL_FLAG(std::string, graph, "", "graph file: GraphDef in protobuf text format or JSON");
ABSL_FLAG(std::string, bind, "", "symbolic dimensions of --graph, e.g. tokens=4096,batch=8");
ABSL_FLAG(int64_t, devices, 8, "number of devices");
ABSL_FLAG(std::string, planner, "dp", "dp, greedy or random");
ABSL_FLAG(uint64_t, seed, 0, "seed of the random planner");
ABSL_FLAG(std::string, format, "text", "text or json");

namespace einsummable {
namespace {

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

absl::StatusOr<ir::Graph> load_graph() {
    const std::string workload = absl::GetFlag(FLAGS_workload);
    const std::string path = absl::GetFlag(FLAGS_graph);
    if (workload.empty() == path.empty()) {
        return absl::InvalidArgumentError("give exactly one of --workload NAME or --graph FILE");
    }
    if (!workload.empty()) {
        return workloads::by_name(workload);
    }
    std::ifstream file(path);
    if (!file) {
        return absl::NotFoundError(absl::StrCat("--graph: cannot read '", path, "'"));
    }
    std::stringstream contents;
    contents << file.rdbuf();
    absl::StatusOr<std::map<std::string, int64_t>> bindings =
        parse_bindings(absl::GetFlag(FLAGS_bind));
    if (!bindings.ok()) {
        return bindings.status();
    }
    absl::StatusOr<v1::GraphDef> def = graphdef::parse_graph_file(contents.str(), path);
    if (!def.ok()) {
        return absl::Status(def.status().code(), absl::StrCat(path, ": ", def.status().message()));
    }
    absl::StatusOr<ir::Graph> graph = graphdef::build_graph(*def, *bindings);
    if (!graph.ok()) {
        return absl::Status(graph.status().code(),
                            absl::StrCat(path, ": ", graph.status().message()));
    }
    return graph;
}

int run() {
    absl::StatusOr<logical::Planner> planner = logical::parse_planner(absl::GetFlag(FLAGS_planner));
    const std::string format = absl::GetFlag(FLAGS_format);
    absl::Status status = planner.status();
    if (status.ok() && format != "text" && format != "json") {
        status = absl::InvalidArgumentError(
            absl::StrCat("--format: unknown format '", format, "' (expected text or json)"));
    }
    if (status.ok() && absl::GetFlag(FLAGS_devices) < 1) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--devices must be at least 1, got ", absl::GetFlag(FLAGS_devices)));
    }
    absl::StatusOr<ir::Graph> graph = status.ok() ? load_graph() : status;
    absl::StatusOr<logical::LogicalPlan> plan =
        graph.ok() ? logical::optimize(*graph, {absl::GetFlag(FLAGS_devices), *planner,
                                                absl::GetFlag(FLAGS_seed)})
                   : graph.status();
    if (!plan.ok()) {
        std::fprintf(stderr, "einsummable-plan: error: %s\n",
                     std::string(plan.status().message()).c_str());
        return 2;
    }
    const std::string text = format == "json" ? logical::explain_json(*graph, *plan)
                                              : logical::explain_text(*graph, *plan);
    std::fputs(text.c_str(), stdout);
    return 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "prints the logical plan of a graph: einsummable-plan (--workload NAME | --graph FILE) "
        "[--devices P] [--planner dp|greedy|random] [--seed N] [--format text|json]");
    std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
    if (positional.size() > 1) {
        std::fprintf(stderr, "einsummable-plan: error: unexpected argument '%s'\n", positional[1]);
        return 2;
    }
    return einsummable::run();
}
