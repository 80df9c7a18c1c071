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
#include "tools/tool_support.h"

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

absl::StatusOr<ir::Graph> load_graph() {
    return tools::load_graph(absl::GetFlag(FLAGS_workload), absl::GetFlag(FLAGS_graph),
                             absl::GetFlag(FLAGS_bind));
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
