// Issue 18's report: one long causal sequence on more GPUs than it has kv heads. For the LLaMA
// block at 128K tokens (8 kv heads, and a variant with 1) on p = 8 (dgx-h100), 16 and 64
// (simulated DGX-H100-like switches of that size, exprog::resized_switch), the DP's plan when
// attention may take any split, none along the keys (no log-sum-exp ⊕), only blocks of whole
// sequences (the specs before issue 18), and the Ulysses baseline. Prints a markdown table of
// whole-plan simulated times (compile_and_simulate; nothing here runs on a GPU).
//
// Run: build/bin/context_parallel_bench [--schedule naive|optimized] (bench/README.md).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/workloads/by_name.h"

ABSL_FLAG(std::string, schedule, "optimized", "exchange synthesis: naive or optimized");

namespace einsummable {
namespace {

struct Variant {
    std::string name;
    logical::Planner planner;
    logical::AttentionSplits splits;
};

int run() {
    absl::StatusOr<exprog::SynthesisMode> mode =
        exprog::parse_synthesis_mode(absl::GetFlag(FLAGS_schedule));
    if (!mode.ok()) {
        std::fprintf(stderr, "%s\n", std::string(mode.status().message()).c_str());
        return 2;
    }
    absl::StatusOr<exprog::Topology> h100 = exprog::builtin_topology("dgx-h100");
    if (!h100.ok()) {
        std::fprintf(stderr, "%s\n", std::string(h100.status().message()).c_str());
        return 1;
    }
    const std::vector<Variant> variants = {
        {"dp, any split", logical::Planner::dp, logical::AttentionSplits::any},
        {"dp, no key blocks", logical::Planner::dp, logical::AttentionSplits::no_key_blocks},
        {"dp, whole sequences", logical::Planner::dp, logical::AttentionSplits::whole_sequences},
        {"ulysses", logical::Planner::ulysses, logical::AttentionSplits::any},
    };
    std::printf(
        "| workload | p | plan | attention split | strategy | predicted ms | vs p=8 dp |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    for (const std::string workload :
         {"llama-block:tokens=131072", "llama-block:tokens=131072,heads_kv=1"}) {
        absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
        if (!graph.ok()) {
            std::fprintf(stderr, "%s\n", std::string(graph.status().message()).c_str());
            return 1;
        }
        double base_s = 0.0;
        for (int devices : {8, 16, 64}) {
            absl::StatusOr<exprog::Topology> topology =
                devices == h100->num_gpus() ? *h100 : exprog::resized_switch(*h100, devices);
            if (!topology.ok()) {
                std::fprintf(stderr, "%s\n", std::string(topology.status().message()).c_str());
                return 1;
            }
            for (const Variant& variant : variants) {
                logical::PlannerOptions options{devices, variant.planner, 0};
                options.attention_splits = variant.splits;
                absl::StatusOr<logical::LogicalPlan> plan = logical::optimize(*graph, options);
                if (!plan.ok()) {
                    std::fprintf(stderr, "%s\n", std::string(plan.status().message()).c_str());
                    return 1;
                }
                physical::PhysicalOptions physical;
                physical.synthesis.mode = *mode;
                absl::StatusOr<physical::SimulatedPlan> simulated =
                    physical::compile_and_simulate(*graph, *plan, *topology, physical);
                if (!simulated.ok()) {
                    std::fprintf(stderr, "%s\n", std::string(simulated.status().message()).c_str());
                    return 1;
                }
                std::string split;
                for (const logical::OperatorPlan& op : plan->operators) {
                    const ir::GraphNode& node = graph->node(op.node);
                    if (node.op->kind() == "attention") {
                        split = absl::StrCat(logical::split_string(*node.op, op.choice), " (",
                                             op.choice.functions, " functions, ", op.strategy, ")");
                    }
                }
                const double ms = simulated->simulation.predicted_s * 1e3;
                if (devices == 8 && variant.splits == logical::AttentionSplits::any &&
                    variant.planner == logical::Planner::dp) {
                    base_s = ms;
                }
                std::printf("| %s | %d | %s | %s | %s | %.2f | %.2fx |\n", workload.c_str(),
                            devices, variant.name.c_str(), split.c_str(), plan->strategy.c_str(),
                            ms, base_s / ms);
                std::fflush(stdout);
            }
        }
    }
    return 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::ParseCommandLine(argc, argv);
    return einsummable::run();
}
