// Context-parallel planner checks: one causal sequence of 128K tokens (the LLaMA block, 8 kv heads)
// on 8 GPUs (dgx-h100) and on simulated DGX-H100-like switches of 16 and 64, and a variant with
// one kv head. The DP's attention splits and whole-plan simulated times (naive exchanges, for
// speed; bench/context_parallel_bench reports the optimized ones) against the kv-heads-only
// plans (Ulysses, and the DP limited to blocks of whole sequences).
#include <iostream>
#include <map>
#include <string>

#include "compiler/exprog/topology.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::physical {
namespace {

using logical::AttentionSplits;
using logical::Planner;

struct Planned {
    logical::LogicalPlan plan;
    logical::OperatorPlan attention;
    double predicted_s = 0.0;
};

Planned plan_and_simulate(const std::string& workload, int devices, Planner planner,
                          AttentionSplits splits = AttentionSplits::any) {
    Planned planned;
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    logical::PlannerOptions options{devices, planner, 0};
    options.attention_splits = splits;
    absl::StatusOr<logical::LogicalPlan> plan = logical::optimize(*graph, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<exprog::Topology> h100 = exprog::builtin_topology("dgx-h100");
    EXPECT_TRUE(h100.ok()) << h100.status();
    absl::StatusOr<exprog::Topology> topology =
        devices == 8 ? *h100 : exprog::resized_switch(*h100, devices);
    EXPECT_TRUE(topology.ok()) << topology.status();
    PhysicalOptions physical;
    physical.synthesis.mode = exprog::SynthesisMode::naive;
    absl::StatusOr<SimulatedPlan> simulated =
        compile_and_simulate(*graph, *plan, *topology, physical);
    EXPECT_TRUE(simulated.ok()) << simulated.status();
    if (!simulated.ok()) {
        return planned;
    }
    planned.plan = *plan;
    planned.predicted_s = simulated->simulation.predicted_s;
    for (const logical::OperatorPlan& op : plan->operators) {
        if (graph->node(op.node).op->kind() == "attention") {
            planned.attention = op;
        }
    }
    return planned;
}

const std::string kLong = "llama-block:tokens=131072";

// At 8 devices the DP's plan stays Ulysses: WorkloadPlans.OneLongSequenceIsUlysses.

TEST(ContextParallel, PastTheKvHeadsTheSequenceIsSplitTooAndScalesFurther) {
    const Planned p8 = plan_and_simulate(kLong, 8, Planner::dp);
    double previous_s = p8.predicted_s;
    for (int devices : {16, 64}) {
        SCOPED_TRACE(devices);
        const Planned dp = plan_and_simulate(kLong, devices, Planner::dp);
        const std::vector<int64_t>& counts = dp.attention.choice.counts;
        EXPECT_EQ(counts[1], 8) << "every kv head split";
        EXPECT_GT(counts[0] * counts[2], 1) << "and the sequence: queries or keys";
        EXPECT_GT(dp.attention.choice.functions, 8) << "on more devices than kv heads";
        // The kv-heads-only plans: Ulysses, and the DP with blocks of whole sequences only.
        const Planned ulysses = plan_and_simulate(kLong, devices, Planner::ulysses);
        const Planned whole =
            plan_and_simulate(kLong, devices, Planner::dp, AttentionSplits::whole_sequences);
        EXPECT_EQ(whole.attention.choice.functions, 8);
        EXPECT_LT(dp.predicted_s, ulysses.predicted_s);
        EXPECT_LT(dp.predicted_s, whole.predicted_s);
        EXPECT_LT(dp.predicted_s, previous_s) << "scales from the previous device count";
        previous_s = dp.predicted_s;
    }
}

// At 64 the cost objective takes the log-sum-exp ⊕: queries in 4 blocks, keys in 2, the pairs
// above the diagonal left out (48 functions). Without key blocks it splits queries 8 ways and
// moves more bytes.
TEST(ContextParallel, AtSixtyFourDevicesTheDpSplitsTheKeys) {
    const Planned dp = plan_and_simulate(kLong, 64, Planner::dp);
    EXPECT_EQ(dp.attention.choice.counts, (std::vector<int64_t>{4, 8, 2}));
    EXPECT_EQ(dp.attention.choice.functions, 48);
    EXPECT_EQ(dp.attention.spec.aggregations[0], ir::AggOp::log_sum_exp);
    EXPECT_EQ(dp.attention.strategy, "context parallel");
    const Planned no_keys =
        plan_and_simulate(kLong, 64, Planner::dp, AttentionSplits::no_key_blocks);
    EXPECT_EQ(no_keys.attention.choice.counts[2], 1);
    EXPECT_LT(dp.plan.total.bytes.total(), no_keys.plan.total.bytes.total());
}

// One kv head: no head split is possible, so without cuts inside the sequence attention would
// run on one device. The DP splits its queries 8 ways inside the sequence (each block reads the
// keys before it, as ring attention moves K and V to the queries) and beats the whole-sequence
// plan. It does not take key blocks, and rightly: their partial outputs, as large as q (32 query
// heads per kv head), must move to be combined, while the query split moves only K and V (1/32 of q
// each). The best plan with the ⊕ forced costs more bytes and is slower in the simulator too.
TEST(ContextParallel, OneKvHeadIsSplitAlongTheSequenceAndKeyBlocksWouldBeSlower) {
    const std::string workload = "llama-block:tokens=131072,heads_kv=1";
    const Planned dp = plan_and_simulate(workload, 8, Planner::dp);
    EXPECT_EQ(dp.attention.choice.counts, (std::vector<int64_t>{8, 1, 1}));
    EXPECT_EQ(dp.attention.choice.functions, 8);
    const Planned whole =
        plan_and_simulate(workload, 8, Planner::dp, AttentionSplits::whole_sequences);
    EXPECT_EQ(whole.attention.choice.functions, 1);
    EXPECT_LT(dp.predicted_s * 2, whole.predicted_s);
    const Planned keys = plan_and_simulate(workload, 8, Planner::dp, AttentionSplits::key_blocks);
    EXPECT_GT(keys.attention.choice.counts[2], 1);
    EXPECT_EQ(keys.attention.spec.aggregations[0], ir::AggOp::log_sum_exp);
    EXPECT_LT(dp.plan.total.bytes.total(), keys.plan.total.bytes.total());
    EXPECT_LT(dp.predicted_s, keys.predicted_s);
}

// node_crossing on two DGX H100 nodes: what the exchange programs send between the nodes is
// never below the least any programs could send, which is positive once blocks must change
// nodes; on one node both are 0. The optimized programs cross no more than the least on the
// FFN's exchanges (each block enters each node once); the naive ones may send more.
TEST(NodeCrossing, ProgramsCrossNodesNoLessThanTheLeastAndOptimizedOnesNoMore) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name("ffn:tokens=1024,d_model=256,d_ff=512");
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<exprog::Topology> cluster = exprog::builtin_topology("dgx-h100-2nodes");
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<exprog::Topology> h100 = exprog::builtin_topology("dgx-h100");
    ASSERT_TRUE(h100.ok()) << h100.status();
    absl::StatusOr<exprog::Topology> one_switch = exprog::resized_switch(*h100, 16);
    ASSERT_TRUE(one_switch.ok()) << one_switch.status();
    for (const Planner planner : {Planner::dp, Planner::random}) {
        logical::PlannerOptions options{16, planner, 7};
        absl::StatusOr<logical::LogicalPlan> plan = logical::optimize(*graph, options);
        ASSERT_TRUE(plan.ok()) << plan.status();
        for (const exprog::SynthesisMode mode :
             {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
            PhysicalOptions physical;
            physical.synthesis.mode = mode;
            absl::StatusOr<PhysicalPlan> compiled =
                compile_physical(*graph, *plan, *cluster, physical);
            ASSERT_TRUE(compiled.ok()) << compiled.status();
            const NodeCrossing crossing = node_crossing(*compiled, *cluster);
            std::cout << logical::planner_name(planner) << " " << exprog::synthesis_mode_name(mode)
                      << ": sent " << crossing.sent_bytes << " least " << crossing.least_bytes
                      << "\n";
            EXPECT_GE(crossing.sent_bytes, crossing.least_bytes);
            if (planner == Planner::random) {
                EXPECT_GT(crossing.least_bytes, 0.0);
            }
            if (mode == exprog::SynthesisMode::optimized) {
                EXPECT_EQ(crossing.sent_bytes, crossing.least_bytes);
            }
            const NodeCrossing none = node_crossing(*compiled, *one_switch);
            EXPECT_EQ(none.sent_bytes, 0.0);
            EXPECT_EQ(none.least_bytes, 0.0);
        }
    }
}

} // namespace
} // namespace einsummable::physical
