// Context parallelism: one long causal sequence on more GPUs than it has kv heads. For the LLaMA
// block at 128K tokens (8 kv heads, and a variant with 1) on p = 8 (dgx-h100), 16 and 64
// (simulated DGX-H100-like switches of that size, exprog::resized_switch) and 16 as two DGX H100
// nodes joined by their NICs (dgx-h100-2nodes, docs/topologies.md "Clusters"), the DP's plan when
// attention may take any split, none along the keys (no log-sum-exp ⊕), only blocks of whole
// sequences over their own keys (no cut inside a sequence), only splits along the keys (the ⊕
// forced), and the Ulysses baseline. Prints a markdown table of
// whole-plan simulated times (the compile pipeline, then simulate_plan; nothing here runs on a
// GPU).
//
// On the two nodes, also the bytes the plan's exchange programs send between the nodes, and
// the least any programs for its exchanges could (physical::node_crossing).
// Also prints attention's causal imbalance per plan (busiest function / mean, in FLOPs). The DP
// variants minimise the paper's cost (objective bytes); --objectives adds, per objective named
// (time: the time programme; search: the simulate-and-search), the DP's plan with any split by it.
//
// Run: build/bin/context_parallel_bench [--schedule naive|optimized] [--objectives time,search]
// (bench/README.md).

#include <algorithm>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/by_name.h"

ABSL_FLAG(std::string, schedule, "optimized", "exchange synthesis: naive or optimized");
ABSL_FLAG(std::string, objectives, "",
          "comma-separated objectives (time, search) whose DP plan with any attention split is "
          "added; search takes several minutes more");

namespace einsummable {
namespace {

struct Variant {
    std::string name;
    logical::Planner planner;
    logical::AttentionSplits splits;
    logical::Objective objective = logical::Objective::bytes;
};

// Causal balance: attention's busiest function against the mean of its functions, in FLOPs
// (Attention::flops counts the query/key pairs that interact). 1.00 is balanced; each function
// runs on a device of its own in these plans, so the busiest one bounds the step.
double attention_imbalance(const ir::Operator& op, const ir::JoinAggSpec& spec) {
    double total = 0.0;
    double busiest = 0.0;
    for (const ir::FunctionSpec& function : spec.functions) {
        const double flops = op.flops(function);
        total += flops;
        busiest = std::max(busiest, flops);
    }
    return total > 0.0 ? busiest * static_cast<double>(spec.functions.size()) / total : 1.0;
}

// A plan and its whole-plan simulated time.
struct Timed {
    logical::LogicalPlan plan;
    double predicted_s = 0.0;
    // Bytes the exchange programs send between GPUs of different nodes, and the least any
    // programs for the plan's exchanges could (physical::node_crossing; 0 on one node).
    physical::NodeCrossing crossing;
};

// The variant's plan through the compile pipeline on `topology` — the planner's by the paper's
// cost (the bytes objective), or the search objective's — then simulated. The machine's kernels run
// the attention splits the variant allows.
absl::StatusOr<Timed> plan_and_simulate(const ir::Graph& graph, const Variant& variant, int devices,
                                        const exprog::Topology& topology,
                                        exprog::SynthesisMode mode) {
    // The search objective synthesises the plan it returns already: the pipeline's
    // exchange synthesis then finds it here.
    physical::SynthesisCache cache;
    pipeline::Options options;
    options.devices = devices;
    options.planner = variant.planner;
    options.schedule = mode;
    options.cache = &cache;
    options.objective = variant.objective;
    pipeline::Machine machine;
    machine.devices = devices;
    machine.topology = topology;
    machine.attention_splits = variant.splits;
    EINSUMMABLE_ASSIGN_OR_RETURN(pipeline::CompiledPlan compiled,
                                 pipeline::compile(graph, options, machine));
    EINSUMMABLE_ASSIGN_OR_RETURN(physical::PlanSimulation simulation,
                                 physical::simulate_plan(compiled.exec, topology));
    return Timed{std::move(compiled.logical), simulation.predicted_s,
                 physical::node_crossing(compiled.physical, topology)};
}

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
        {"dp, key blocks only", logical::Planner::dp, logical::AttentionSplits::key_blocks},
        {"ulysses", logical::Planner::ulysses, logical::AttentionSplits::any},
    };
    std::vector<Variant> all = variants;
    for (absl::string_view name :
         absl::StrSplit(absl::GetFlag(FLAGS_objectives), ',', absl::SkipEmpty())) {
        absl::StatusOr<logical::Objective> objective = logical::parse_objective(name);
        if (!objective.ok()) {
            std::fprintf(stderr, "--objectives: %s\n",
                         std::string(objective.status().message()).c_str());
            return 2;
        }
        all.push_back({absl::StrCat("dp, ", logical::objective_name(*objective), " objective"),
                       logical::Planner::dp, logical::AttentionSplits::any, *objective});
    }
    std::printf("| workload | p | plan | attention split | attention imbalance | strategy | "
                "predicted ms | vs p=8 dp | GB between nodes (least) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string workload :
         {"llama-block:tokens=131072", "llama-block:tokens=131072,heads_kv=1"}) {
        absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
        if (!graph.ok()) {
            std::fprintf(stderr, "%s\n", std::string(graph.status().message()).c_str());
            return 1;
        }
        double base_s = 0.0;
        // 16 GPUs twice: one switch of 16, and two DGX H100 nodes joined by their NICs.
        for (const auto& [devices, cluster] :
             std::vector<std::pair<int, bool>>{{8, false}, {16, false}, {16, true}, {64, false}}) {
            absl::StatusOr<exprog::Topology> topology =
                cluster                       ? exprog::builtin_topology("dgx-h100-2nodes")
                : devices == h100->num_gpus() ? *h100
                                              : exprog::resized_switch(*h100, devices);
            if (!topology.ok()) {
                std::fprintf(stderr, "%s\n", std::string(topology.status().message()).c_str());
                return 1;
            }
            for (const Variant& variant : all) {
                absl::StatusOr<Timed> timed =
                    plan_and_simulate(*graph, variant, devices, *topology, *mode);
                if (!timed.ok()) {
                    std::fprintf(stderr, "%s\n", std::string(timed.status().message()).c_str());
                    return 1;
                }
                const logical::LogicalPlan& plan = timed->plan;
                std::string split;
                double imbalance = 1.0;
                for (const logical::OperatorPlan& op : plan.operators) {
                    const ir::GraphNode& node = graph->node(op.node);
                    if (node.op->kind() == ir::Attention::kKind) {
                        split = absl::StrCat(logical::split_string(*node.op, op.choice), " (",
                                             op.choice.functions, " functions, ", op.strategy, ")");
                        imbalance = attention_imbalance(*node.op, op.spec);
                    }
                }
                const double ms = timed->predicted_s * 1e3;
                if (devices == 8 && variant.splits == logical::AttentionSplits::any &&
                    variant.planner == logical::Planner::dp &&
                    variant.objective == logical::Objective::bytes) {
                    base_s = ms;
                }
                std::printf(
                    "| %s | %d%s | %s | %s | %.2f | %s | %.2f | %.2fx | %s |\n", workload.c_str(),
                    devices, cluster ? " (2 nodes)" : "", variant.name.c_str(), split.c_str(),
                    imbalance, plan.strategy.c_str(), ms, base_s / ms,
                    cluster ? absl::StrFormat("%.2f (%.2f)", timed->crossing.sent_bytes / 1e9,
                                              timed->crossing.least_bytes / 1e9)
                                  .c_str()
                            : "-");
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
