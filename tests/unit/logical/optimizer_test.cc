#include <cstdlib>
#include <iostream>
#include <random>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

ir::Graph square_matmul(int64_t n) {
    ir::Graph graph;
    const ir::TensorId a = *graph.add_input("a", ir::DType::f32, {{"m", n}, {"k", n}});
    const ir::TensorId b = *graph.add_input("b", ir::DType::f32, {{"k", n}, {"n", n}});
    const ir::TensorId c =
        *graph.add("c", "einsum", {{"equation", std::string("ij,jk->ik")}}, {a, b});
    EXPECT_TRUE(graph.save(c).ok());
    return graph;
}

TEST(Optimizer, SquareMatmulOnCubesIsThe3DAlgorithm) {
    const int64_t n = 72; // divisible by 2, 3 and 4
    const double n2 = static_cast<double>(n * n);
    const ir::Graph graph = square_matmul(n);
    for (int64_t side : {2, 3, 4}) {
        const int64_t devices = side * side * side;
        absl::StatusOr<LogicalPlan> plan = optimize(graph, {devices, Planner::dp, 0});
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_EQ(plan->operators[0].choice.counts, (std::vector<int64_t>{side, side, side}))
            << "p=" << devices;
        // Join: p function specs each reading two (n/side)^2 blocks; aggregation: side^2 output
        // boxes each produced side times. Total n^2·(3·side − 1).
        EXPECT_DOUBLE_EQ(plan->total.elements.total(), n2 * (3.0 * side - 1.0)) << "p=" << devices;
        EXPECT_DOUBLE_EQ(plan->total.elements.join, 2.0 * side * n2);
        EXPECT_DOUBLE_EQ(plan->total.elements.aggregation, (side - 1.0) * n2);
        EXPECT_EQ(plan->strategy, "3D matmul");
        EXPECT_DOUBLE_EQ(plan->total.bytes.total(), 4.0 * plan->total.elements.total());
    }
}

TEST(Optimizer, SmallDeviceCountsGetTheCheapestSplit) {
    const ir::Graph graph = square_matmul(72);
    for (int64_t devices : {2, 4, 6}) {
        absl::StatusOr<GraphCandidates> candidates = enumerate_graph(graph, devices);
        ASSERT_TRUE(candidates.ok());
        double cheapest = INFINITY;
        for (const Candidate& candidate : (*candidates)[0]) {
            cheapest = std::min(cheapest, candidate.local.bytes.total());
            int64_t product = 1;
            for (int64_t count : candidate.counts) {
                product *= count;
            }
            EXPECT_EQ(product, devices);
        }
        absl::StatusOr<LogicalPlan> plan = optimize(graph, {devices, Planner::dp, 0});
        ASSERT_TRUE(plan.ok());
        EXPECT_DOUBLE_EQ(plan->total.bytes.total(), cheapest) << "p=" << devices;
    }
}

TEST(Optimizer, OperatorsTooSmallForTheDevicesUseFewer) {
    ir::Graph graph;
    const ir::TensorId x = *graph.add_input("x", ir::DType::f32, {{"tokens", 3}, {"d", 5}});
    const ir::TensorId y = *graph.add("y", "softmax", {}, {x}); // only tokens (3) shardable
    ASSERT_TRUE(graph.save(y).ok());
    absl::StatusOr<LogicalPlan> plan = optimize(graph, {8, Planner::dp, 0});
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ(plan->operators[0].choice.counts, (std::vector<int64_t>{3}))
        << "7 and 8 are out of reach; 3 parts is the most tokens allow";
}

TEST(Optimizer, PlannerNames) {
    EXPECT_EQ(*parse_planner("greedy"), Planner::greedy);
    const absl::StatusOr<Planner> bad = parse_planner("annealing");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("'annealing'"), absl::string_view::npos);
    EXPECT_FALSE(optimize(square_matmul(8), {0, Planner::dp, 0}).ok());
}

// Random tree-shaped graphs (every tensor read by at most one operator) of rank-2 tensors.
struct RandomTree {
    ir::Graph graph;
    int64_t devices;
};

RandomTree random_tree(std::mt19937_64& rng) {
    auto uniform = [&](int64_t low, int64_t high) {
        return std::uniform_int_distribution<int64_t>(low, high)(rng);
    };
    const std::vector<int64_t> sizes = {4, 6, 8, 12};
    auto size = [&]() { return sizes[uniform(0, 3)]; };
    RandomTree tree{ir::Graph(), uniform(1, 8)};
    ir::Graph& graph = tree.graph;
    std::vector<ir::TensorId> pool; // produced, not yet consumed
    int inputs = 0;
    auto fresh = [&](int64_t rows, int64_t cols) {
        return *graph.add_input(absl::StrCat("in", inputs++), ir::DType::f32,
                                {{"r", rows}, {"c", cols}});
    };
    auto take = [&]() -> ir::TensorId {
        if (pool.empty() || uniform(0, 3) == 0) {
            return fresh(size(), size());
        }
        const size_t pick = static_cast<size_t>(uniform(0, static_cast<int64_t>(pool.size()) - 1));
        const ir::TensorId id = pool[pick];
        pool.erase(pool.begin() + static_cast<std::ptrdiff_t>(pick));
        return id;
    };
    const int num_ops = static_cast<int>(uniform(1, 6));
    for (int op_idx = 0; op_idx < num_ops; ++op_idx) {
        const std::string name = absl::StrCat("op", op_idx);
        const ir::TensorId lhs = take();
        const std::vector<int64_t> shape = graph.tensor(lhs).type.shape();
        absl::StatusOr<ir::TensorId> out;
        switch (uniform(0, 4)) {
        case 0: // matmul with a fresh weight
            out = graph.add(name, "einsum", {{"equation", std::string("ij,jk->ik")}},
                            {lhs, fresh(shape[1], size())});
            break;
        case 1: // element-wise add with a fresh tensor of the same shape
            out = graph.add(name, "einsum",
                            {{"equation", std::string("ij,ij->ij")}, {"join", std::string("add")}},
                            {lhs, fresh(shape[0], shape[1])});
            break;
        case 2:
            out = graph.add(name, "einsum",
                            {{"equation", std::string("ij->ij")}, {"join", std::string("relu")}},
                            {lhs});
            break;
        case 3:
            out = graph.add(name, "softmax", {}, {lhs});
            break;
        default:
            out = graph.add(name, "einsum", {{"equation", std::string("ij->ji")}}, {lhs});
            break;
        }
        EXPECT_TRUE(out.ok()) << out.status();
        pool.push_back(*out);
    }
    for (ir::TensorId id : pool) {
        EXPECT_TRUE(graph.save(id).ok());
    }
    return tree;
}

double exhaustive_minimum(const ir::Graph& graph, const GraphCandidates& candidates) {
    std::vector<int> choice(candidates.size(), 0);
    double best = INFINITY;
    while (true) {
        best = std::min(best, evaluate_choice(graph, candidates, choice).bytes.total());
        size_t idx = 0;
        while (idx < choice.size() && ++choice[idx] == static_cast<int>(candidates[idx].size())) {
            choice[idx] = 0;
            ++idx;
        }
        if (idx == choice.size()) {
            return best;
        }
    }
}

TEST(Optimizer, DynamicProgrammeEqualsExhaustiveSearchOnTrees) {
    const uint64_t seed = std::getenv("EINSUMMABLE_TEST_SEED")
                              ? std::strtoull(std::getenv("EINSUMMABLE_TEST_SEED"), nullptr, 10)
                              : 20261130;
    std::cout << "DP vs exhaustive: seed " << seed << " (EINSUMMABLE_TEST_SEED replays)\n";
    int checked = 0;
    double combinations = 0;
    for (int case_idx = 0; checked < 300; ++case_idx) {
        std::mt19937_64 rng(seed * 7919 + case_idx);
        RandomTree tree = random_tree(rng);
        absl::StatusOr<GraphCandidates> candidates = enumerate_graph(tree.graph, tree.devices);
        ASSERT_TRUE(candidates.ok()) << candidates.status();
        double size = 1;
        for (const auto& options : *candidates) {
            size *= static_cast<double>(options.size());
        }
        if (size > 200000) {
            continue; // keep exhaustive search affordable under sanitizers
        }
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, " devices ", tree.devices,
                                  "\n", tree.graph.to_string()));
        ++checked;
        combinations += size;
        const double best = exhaustive_minimum(tree.graph, *candidates);
        const std::vector<int> dp = *choose_dp(tree.graph, *candidates, true);
        const double dp_cost = evaluate_choice(tree.graph, *candidates, dp).bytes.total();
        EXPECT_NEAR(dp_cost, best, 1e-9 * std::max(1.0, best));
        const std::vector<int> greedy = *choose_dp(tree.graph, *candidates, false);
        EXPECT_LE(dp_cost, evaluate_choice(tree.graph, *candidates, greedy).bytes.total() + 1e-9);
        for (uint64_t random_seed = 0; random_seed < 5; ++random_seed) {
            const std::vector<int> random = choose_random(*candidates, random_seed);
            EXPECT_LE(dp_cost,
                      evaluate_choice(tree.graph, *candidates, random).bytes.total() + 1e-9);
        }
        if (HasFailure()) {
            return;
        }
    }
    std::cout << "  " << checked << " graphs, " << combinations << " spec combinations searched\n";
}

TEST(Optimizer, RandomPlannerIsDeterministicPerSeed) {
    const ir::Graph graph = square_matmul(24);
    absl::StatusOr<LogicalPlan> a = optimize(graph, {8, Planner::random, 5});
    absl::StatusOr<LogicalPlan> b = optimize(graph, {8, Planner::random, 5});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->operators[0].choice.counts, b->operators[0].choice.counts);
    EXPECT_EQ(explain_text(graph, *a), explain_text(graph, *b));
}

// keep_attention_splits keeps, per attention node, exactly the candidates its mode
// names, and leaves every other node alone.
TEST(Optimizer, AttentionSplitsKeepTheCandidatesTheyName) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(
        "llama-block:tokens=64,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48");
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<GraphCandidates> all = enumerate_graph(*graph, 8);
    ASSERT_TRUE(all.ok()) << all.status();
    ir::NodeId attention_node = -1;
    for (ir::NodeId n = 0; n < static_cast<ir::NodeId>(graph->nodes().size()); ++n) {
        if (graph->node(n).op->kind() == "attention") {
            attention_node = n;
        }
    }
    ASSERT_GE(attention_node, 0);
    const auto& attention = dynamic_cast<const ir::Attention&>(*graph->node(attention_node).op);
    // Partial results over key blocks: some output box written by several functions.
    auto combines_partials = [&](const Candidate& candidate) {
        absl::StatusOr<ir::JoinAggSpec> spec = attention.spec(candidate.request);
        EXPECT_TRUE(spec.ok()) << spec.status();
        std::set<std::string> boxes;
        for (const ir::FunctionSpec& function : spec->functions) {
            if (!boxes.insert(function.outputs[0].to_string()).second) {
                return true;
            }
        }
        return false;
    };
    auto whole_sequences = [&](const Candidate& candidate) {
        absl::StatusOr<ir::JoinAggSpec> spec = attention.spec(candidate.request);
        EXPECT_TRUE(spec.ok()) << spec.status();
        for (const ir::FunctionSpec& function : spec->functions) {
            if (!attention.holds_whole_sequences(function)) {
                return false;
            }
        }
        return true;
    };
    int with_partials = 0;
    for (const Candidate& candidate : (*all)[attention_node]) {
        with_partials += combines_partials(candidate) ? 1 : 0;
    }
    ASSERT_GT(with_partials, 0);
    ASSERT_LT(with_partials, static_cast<int>((*all)[attention_node].size()));
    for (AttentionSplits splits : {AttentionSplits::any, AttentionSplits::no_key_blocks,
                                   AttentionSplits::whole_sequences, AttentionSplits::key_blocks}) {
        SCOPED_TRACE(attention_splits_name(splits));
        GraphCandidates kept = *all;
        keep_attention_splits(*graph, 8, splits, kept);
        for (ir::NodeId n = 0; n < static_cast<ir::NodeId>(kept.size()); ++n) {
            if (n != attention_node) {
                EXPECT_EQ(kept[n].size(), (*all)[n].size()) << "node " << n;
            }
        }
        const std::vector<Candidate>& left = kept[attention_node];
        ASSERT_FALSE(left.empty());
        int partials = 0;
        for (const Candidate& candidate : left) {
            partials += combines_partials(candidate) ? 1 : 0;
            if (splits == AttentionSplits::whole_sequences) {
                EXPECT_TRUE(whole_sequences(candidate)) << split_string(attention, candidate);
            }
        }
        switch (splits) {
        case AttentionSplits::any:
            EXPECT_EQ(left.size(), (*all)[attention_node].size());
            break;
        case AttentionSplits::no_key_blocks:
        case AttentionSplits::whole_sequences:
            EXPECT_EQ(partials, 0);
            break;
        case AttentionSplits::key_blocks:
            EXPECT_EQ(partials, static_cast<int>(left.size()));
            EXPECT_EQ(partials, with_partials);
            break;
        }
    }
}

} // namespace
} // namespace einsummable::logical
