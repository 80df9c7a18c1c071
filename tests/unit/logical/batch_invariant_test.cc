// Batch-invariant planning (logical::PlannerOptions::batch_invariant, keep_unaggregated): no
// operator's chosen spec writes an output box twice, so nothing is summed in a plan-dependent
// order; an operator that must aggregate on p devices runs on fewer; pinned inputs are charged
// on those fewer-device candidates too; the baselines keep their rule.

#include <iostream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/workloads.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

// x [tokens, hidden] · w [hidden, out], saved.
ir::Graph projection(int64_t tokens, int64_t hidden, int64_t out) {
    ir::Graph graph;
    const ir::TensorId x =
        *graph.add_input("x", ir::DType::f32, {{"tokens", tokens}, {"hidden", hidden}});
    const ir::TensorId w =
        *graph.add_input("w", ir::DType::f32, {{"hidden", hidden}, {"out", out}});
    const ir::TensorId y =
        *graph.add("y", "einsum", {{"equation", std::string("ij,jk->ik")}}, {x, w});
    EXPECT_TRUE(graph.save(y).ok());
    return graph;
}

PlannerOptions options_for(int64_t devices, Planner planner, bool batch_invariant) {
    PlannerOptions options;
    options.devices = devices;
    options.planner = planner;
    options.batch_invariant = batch_invariant;
    return options;
}

// Whether some output box of the operator's chosen spec, rebuilt from its request, repeats.
bool spec_aggregates(const ir::Graph& graph, const OperatorPlan& op) {
    absl::StatusOr<ir::JoinAggSpec> spec = graph.node(op.node).op->spec(op.choice.request);
    EXPECT_TRUE(spec.ok()) << spec.status();
    for (size_t output = 0; output < spec->aggregations.size(); ++output) {
        if (spec->output_tiling(static_cast<int>(output)).size() != spec->functions.size()) {
            return true;
        }
    }
    return false;
}

int aggregating_operators(const ir::Graph& graph, const LogicalPlan& plan) {
    int count = 0;
    for (const OperatorPlan& op : plan.operators) {
        count += spec_aggregates(graph, op) ? 1 : 0;
    }
    return count;
}

TEST(BatchInvariant, AggregatesAgreesWithTheSpec) {
    const ir::Graph graph = projection(4, 64, 8);
    absl::StatusOr<GraphCandidates> candidates = enumerate_graph(graph, 4);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    int aggregating = 0;
    for (const Candidate& candidate : (*candidates)[0]) {
        OperatorPlan op;
        op.choice = candidate;
        EXPECT_EQ(aggregates(candidate), spec_aggregates(graph, op))
            << split_string(*graph.node(0).op, candidate);
        aggregating += aggregates(candidate) ? 1 : 0;
    }
    EXPECT_GT(aggregating, 0);
    EXPECT_LT(aggregating, static_cast<int>((*candidates)[0].size()));
}

TEST(BatchInvariant, AContractionSplitCheapestUnconstrainedIsNotChosen) {
    // 4 tokens through a 4096 x 8 projection: splitting `hidden` reads each input once (join
    // 4·(4·1024 + 1024·8)) and sums 3 copies of the 4 x 8 output; every other split reads the
    // 4096 x 8 weight, or x, several times over.
    const ir::Graph graph = projection(4, 4096, 8);
    absl::StatusOr<LogicalPlan> free_plan = optimize(graph, options_for(4, Planner::dp, false));
    ASSERT_TRUE(free_plan.ok()) << free_plan.status();
    EXPECT_EQ(free_plan->operators[0].choice.counts, (std::vector<int64_t>{1, 4, 1}));
    ASSERT_EQ(aggregating_operators(graph, *free_plan), 1) << "the test would prove nothing";

    for (Planner planner : {Planner::dp, Planner::greedy, Planner::random}) {
        SCOPED_TRACE(planner_name(planner));
        absl::StatusOr<LogicalPlan> plan = optimize(graph, options_for(4, planner, true));
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_EQ(aggregating_operators(graph, *plan), 0);
        EXPECT_EQ(plan->operators[0].choice.functions, 4) << "all 4 devices still in use";
        EXPECT_EQ(plan->total.bytes.aggregation, 0.0);
        EXPECT_TRUE(plan->options.batch_invariant);
        EXPECT_GT(plan->total.bytes.total(), free_plan->total.bytes.total());
    }
}

TEST(BatchInvariant, AnOperatorThatMustAggregateOnAllDevicesRunsOnFewer) {
    // tokens 2, out 1: four function specs need `hidden` split, which sums; three too. Two
    // split tokens.
    const ir::Graph graph = projection(2, 64, 1);
    const ir::Operator& op = *graph.node(0).op;
    for (int64_t devices : {3, 4}) {
        absl::StatusOr<std::vector<Candidate>> all = enumerate_candidates(op, devices);
        ASSERT_TRUE(all.ok());
        for (const Candidate& candidate : *all) {
            EXPECT_TRUE(aggregates(candidate)) << split_string(op, candidate);
        }
    }
    absl::StatusOr<GraphCandidates> candidates = enumerate_graph(graph, 4);
    ASSERT_TRUE(candidates.ok());
    keep_unaggregated(graph, 4, *candidates);
    ASSERT_EQ((*candidates)[0].size(), 1u);
    const Candidate& kept = (*candidates)[0][0];
    EXPECT_EQ(kept.functions, 2);
    EXPECT_EQ(kept.counts, (std::vector<int64_t>{2, 1, 1}));
    EXPECT_FALSE(aggregates(kept));

    absl::StatusOr<LogicalPlan> plan = optimize(graph, options_for(4, Planner::dp, true));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->operators[0].choice.counts, (std::vector<int64_t>{2, 1, 1}));
    EXPECT_EQ(aggregating_operators(graph, *plan), 0);
}

TEST(BatchInvariant, ADotProductRunsWhole) {
    // Only `i` is shardable and the output is a scalar: every split sums.
    ir::Graph graph;
    const ir::TensorId a = *graph.add_input("a", ir::DType::f32, {{"i", 64}});
    const ir::TensorId b = *graph.add_input("b", ir::DType::f32, {{"i", 64}});
    const ir::TensorId dot =
        *graph.add("dot", "einsum", {{"equation", std::string("i,i->")}}, {a, b});
    ASSERT_TRUE(graph.save(dot).ok());
    absl::StatusOr<LogicalPlan> plan = optimize(graph, options_for(8, Planner::dp, true));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->operators[0].choice.functions, 1);
    EXPECT_EQ(aggregating_operators(graph, *plan), 0);
}

TEST(BatchInvariant, FewerDeviceCandidatesPayThePinnedRepartition) {
    // w pinned in two blocks along `hidden`; the one candidate left (tokens/2) reads it whole,
    // so it pays w's repartition: keep_unaggregated ran before add_pinned_repartition.
    const ir::Graph graph = projection(2, 64, 1);
    PlannerOptions options = options_for(4, Planner::dp, true);
    const ir::TensorId w = *graph.find_tensor("w");
    options.pinned[w] = canonical_tiling({ir::Box({{0, 32}, {0, 1}}), ir::Box({{32, 64}, {0, 1}})});
    absl::StatusOr<LogicalPlan> plan = optimize(graph, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->operators[0].choice.counts, (std::vector<int64_t>{2, 1, 1}));
    EXPECT_EQ(plan->operators[0].cost.bytes.repartition,
              static_cast<double>(graph.tensor(w).type.bytes()));
}

TEST(BatchInvariant, UnreplicatedWeightsChooseAmongTheUnaggregated) {
    // With w unreplicated, splitting `out` is the one split that neither replicates w nor sums.
    const ir::Graph graph = projection(4, 4096, 8);
    PlannerOptions options = options_for(4, Planner::dp, true);
    options.unreplicated.insert(*graph.find_tensor("w"));
    absl::StatusOr<LogicalPlan> plan = optimize(graph, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->operators[0].choice.counts, (std::vector<int64_t>{1, 1, 4}));
    EXPECT_EQ(aggregating_operators(graph, *plan), 0);
}

TEST(BatchInvariant, BaselinesKeepTheirRule) {
    const ir::Graph graph = *workloads::ffn(16, 32, 64);
    int aggregating = 0; // megatron's row-parallel second projection sums
    for (Planner planner : all_planners()) {
        if (!is_baseline(planner)) {
            continue;
        }
        SCOPED_TRACE(planner_name(planner));
        absl::StatusOr<LogicalPlan> free_plan = optimize(graph, options_for(4, planner, false));
        absl::StatusOr<LogicalPlan> plan = optimize(graph, options_for(4, planner, true));
        ASSERT_TRUE(free_plan.ok() && plan.ok());
        for (size_t node = 0; node < plan->operators.size(); ++node) {
            EXPECT_EQ(plan->operators[node].choice.request,
                      free_plan->operators[node].choice.request);
        }
        aggregating += aggregating_operators(graph, *plan);
    }
    EXPECT_GT(aggregating, 0) << "no baseline aggregates: the test would prove nothing";
}

TEST(BatchInvariant, SmallLlamaBlockAggregatesNothing) {
    workloads::LlamaConfig config;
    config.d_model = 64;
    config.heads_q = 8;
    config.heads_kv = 2;
    config.d_head = 8;
    config.d_ff = 224;
    config.dtype = ir::DType::f32;
    config.sequence_lengths = {16, 24, 8};
    const ir::Graph graph = *workloads::llama_block(config);
    for (int64_t devices : {2, 4, 8}) {
        SCOPED_TRACE(absl::StrCat("p=", devices));
        absl::StatusOr<LogicalPlan> free_plan =
            optimize(graph, options_for(devices, Planner::dp, false));
        absl::StatusOr<LogicalPlan> plan = optimize(graph, options_for(devices, Planner::dp, true));
        ASSERT_TRUE(free_plan.ok() && plan.ok());
        EXPECT_EQ(aggregating_operators(graph, *plan), 0);
        // What batch invariance costs, by the paper's measure (printed for the record). Not
        // asserted to be more: where tensors have several consumers the programme is not exact,
        // and fewer candidates can lead it to a cheaper plan (llama-block:tokens=8192 at p = 2).
        std::cout << "llama block (48 tokens, f32) p=" << devices << ": "
                  << aggregating_operators(graph, *free_plan)
                  << " operators aggregate unconstrained; cost " << free_plan->total.bytes.total()
                  << " B unconstrained, " << plan->total.bytes.total() << " B batch-invariant\n";
    }
}

// Runs every operator of `graph` with the spec `plan` chose for it (ir::execute_spec with the
// double-precision reference kernels, which compute each row of a block in one fixed order);
// returns the saved output `y`.
ir::HostTensor execute_plan(const ir::Graph& graph, const LogicalPlan& plan,
                            const std::map<std::string, ir::HostTensor>& inputs) {
    std::vector<ir::HostTensor> values(graph.tensors().size());
    for (ir::TensorId id : graph.inputs()) {
        values[id] = inputs.at(graph.tensor(id).name);
    }
    for (const OperatorPlan& op : plan.operators) {
        const ir::GraphNode& node = graph.node(op.node);
        std::vector<ir::HostTensor> node_inputs;
        for (ir::TensorId id : node.inputs) {
            node_inputs.push_back(values[id]);
        }
        absl::StatusOr<std::vector<ir::HostTensor>> outputs =
            ir::execute_spec(*node.op, op.spec, node_inputs);
        EXPECT_TRUE(outputs.ok()) << node.name << ": " << outputs.status();
        for (size_t k = 0; k < node.outputs.size(); ++k) {
            values[node.outputs[k]] = (*outputs)[k];
        }
    }
    return values[*graph.find_tensor("y")];
}

TEST(BatchInvariant, ExecutedSpecsGiveARequestTheSameBitsBatchedAsAlone) {
    // Three requests of 16, 24 and 8 tokens on 4 devices, as one batch and each alone. With
    // the reference kernels the only thing that can change a request's bits is the plan:
    // partial sums aggregated in a plan-dependent order.
    workloads::LlamaConfig config;
    config.d_model = 64;
    config.heads_q = 8;
    config.heads_kv = 2;
    config.d_head = 8;
    config.d_ff = 224;
    config.dtype = ir::DType::f32;
    const std::vector<int64_t> lengths = {16, 24, 8};
    config.sequence_lengths = lengths;
    const ir::Graph batch = *workloads::llama_block(config);
    std::mt19937_64 rng(20261207);
    std::map<std::string, ir::HostTensor> batch_inputs;
    for (ir::TensorId id : batch.inputs()) {
        batch_inputs[batch.tensor(id).name] =
            ir::HostTensor::random(batch.tensor(id).type.box(), rng);
    }
    const int64_t d_model = config.d_model;
    for (bool batch_invariant : {true, false}) {
        SCOPED_TRACE(batch_invariant ? "batch-invariant" : "unconstrained");
        absl::StatusOr<LogicalPlan> batch_plan =
            optimize(batch, options_for(4, Planner::dp, batch_invariant));
        ASSERT_TRUE(batch_plan.ok()) << batch_plan.status();
        const ir::HostTensor batched = execute_plan(batch, *batch_plan, batch_inputs);
        int differing = 0;
        int64_t row = 0;
        for (int64_t length : lengths) {
            config.sequence_lengths = {length};
            const ir::Graph alone = *workloads::llama_block(config);
            std::map<std::string, ir::HostTensor> inputs = batch_inputs;
            const ir::Box rows({{row, row + length}, {0, d_model}});
            inputs["x"] = ir::HostTensor(ir::Box({{0, length}, {0, d_model}}),
                                         batch_inputs.at("x").slice(rows).values());
            absl::StatusOr<LogicalPlan> plan =
                optimize(alone, options_for(4, Planner::dp, batch_invariant));
            ASSERT_TRUE(plan.ok()) << plan.status();
            const ir::HostTensor own = execute_plan(alone, *plan, inputs);
            const bool same = own.values() == batched.slice(rows).values();
            if (batch_invariant) {
                EXPECT_TRUE(same) << "request of " << length << " tokens at row " << row;
            }
            differing += same ? 0 : 1;
            row += length;
        }
        if (!batch_invariant) { // the premise: without the option, bits do change
            EXPECT_GT(differing, 0);
        }
    }
}

} // namespace
} // namespace einsummable::logical
