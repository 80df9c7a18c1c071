// The time programme (compiler/logical/time_dp.h): its prediction against closed forms of the
// kernel and α–β models, its branch composition, its plans against exhaustive search on chains,
// and against every plan it weighs (the bytes programme's and the baselines').

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/programme.h"
#include "compiler/logical/time_dp.h"
#include "compiler/workloads/workloads.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

exprog::Topology builtin(const char* name) {
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(name);
    EXPECT_TRUE(topology.ok()) << topology.status();
    return *std::move(topology);
}

TEST(TimeProgramme, BranchesOverlapEachEdgeWithTheWorkAfterIt) {
    // Producer order 1, 2, 3: work 2 then its wait 5 ends at 7; 1 more work (3) and no wait;
    // 4 more work (7) and a wait of 1 ends at 8.
    std::vector<Branch> branches = {{3, 4.0, 1.0}, {1, 2.0, 5.0}, {2, 1.0, 0.0}};
    EXPECT_EQ(compose_branches(branches), 8.0);
    // One branch: its work then its wait, as a plain sum.
    std::vector<Branch> one = {{0, 2.5, 1.5}};
    EXPECT_EQ(compose_branches(one), 4.0);
    std::vector<Branch> none;
    EXPECT_EQ(compose_branches(none), 0.0);
}

TEST(TimeProgramme, ABranchThatFreesBuffersHoldsBackTheEdgesBeforeIt) {
    // Producer 2 frees an exchange's buffers (it received an input by transfers): the memory
    // plan gives their bytes to the consumer's exchange, so producer 1's transfers (5) start once
    // producer 2 is done (work 2 + 1): 8, not 7. Producer 3 frees nothing: its wait (0.5) starts
    // after its own work and ends at 7.5.
    std::vector<Branch> branches = {
        {1, 2.0, 5.0, false}, {2, 1.0, 0.0, true}, {3, 4.0, 0.5, false}};
    EXPECT_EQ(compose_branches(branches), 8.0);
    // A freeing branch first holds back nothing: as without the rule, max(2 + 5, 3, 7.5).
    std::vector<Branch> first = {{1, 2.0, 5.0, true}, {2, 1.0, 0.0, false}, {3, 4.0, 0.5, false}};
    EXPECT_EQ(compose_branches(first), 7.5);
    EXPECT_TRUE(assembles(branches));
    std::vector<Branch> local = {{1, 2.0, 0.0, true}};
    EXPECT_FALSE(assembles(local));
}

// c = a · b (n x n, f32), saved.
ir::Graph square_matmul(int64_t n) {
    ir::Graph graph;
    const ir::TensorId a = *graph.add_input("a", ir::DType::f32, {{"m", n}, {"k", n}});
    const ir::TensorId b = *graph.add_input("b", ir::DType::f32, {{"k", n}, {"n", n}});
    const ir::TensorId c =
        *graph.add("c", "einsum", {{"equation", std::string("ij,jk->ik")}}, {a, b});
    EXPECT_TRUE(graph.save(c).ok());
    return graph;
}

TEST(TimeProgramme, PredictsAKernelAndTheDeliveryOfItsOutput) {
    // Rows split four ways on dgx-v100 (15.7 TFLOP/s f32 at 0.90 for a GEMM, HBM 900 GB/s at 0.85,
    // 3 us a kernel, 0.3 us a transfer, 12 GB/s from each GPU to the host): each function
    // multiplies (n/4 x n) by (n x n); then every device copies its block of the output to the
    // host, all four at once.
    const int64_t n = 4096;
    const ir::Graph graph = square_matmul(n);
    PlannerOptions options;
    options.devices = 4;
    absl::StatusOr<GraphCandidates> candidates = planning_candidates(graph, options);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    int rows = -1;
    for (size_t idx = 0; idx < (*candidates)[0].size(); ++idx) {
        if (split_string(*graph.node(0).op, (*candidates)[0][idx]) == "i/4 j/1 k/1") {
            rows = static_cast<int>(idx);
        }
    }
    ASSERT_GE(rows, 0);
    const std::optional<LogicalPlan> plan = make_plan(graph, options, *candidates, {rows});
    const exprog::Topology v100 = builtin("dgx-v100");
    const double kernel = 2.0 * (n / 4) * n * n / (15.7e12 * 0.90) + 3e-6;
    const double block = 4.0 * (n / 4) * n;
    const double delivery = 0.3e-6 + block / 12e9;
    absl::StatusOr<double> predicted = predict_plan_seconds(graph, *plan, v100);
    ASSERT_TRUE(predicted.ok()) << predicted.status();
    EXPECT_NEAR(*predicted, kernel + delivery, 1e-12 * *predicted);
}

// A chain of `length` matmuls with random sizes (multiples of 8), each output read by the next.
ir::Graph random_chain(std::mt19937_64& rng, int length) {
    std::uniform_int_distribution<int> size(1, 12);
    ir::Graph graph;
    int64_t rows = 8 * size(rng);
    int64_t cols = 8 * size(rng);
    ir::TensorId current = *graph.add_input("x", ir::DType::f32, {{"a", rows}, {"b0", cols}});
    for (int i = 0; i < length; ++i) {
        const int64_t next = 8 * size(rng) * (i % 2 == 0 ? 16 : 1);
        const ir::TensorId weight =
            *graph.add_input(absl::StrCat("w", i), ir::DType::f32,
                             {{absl::StrCat("b", i), cols}, {absl::StrCat("b", i + 1), next}});
        current = *graph.add(absl::StrCat("m", i), "einsum",
                             {{"equation", std::string("ij,jk->ik")}}, {current, weight});
        cols = next;
    }
    EXPECT_TRUE(graph.save(current).ok());
    return graph;
}

TEST(TimeProgramme, NoPlanOfAChainPredictsFaster) {
    const uint64_t seed = std::getenv("EINSUMMABLE_TEST_SEED")
                              ? std::strtoull(std::getenv("EINSUMMABLE_TEST_SEED"), nullptr, 10)
                              : 20261206;
    std::cout << "time programme vs exhaustive: seed " << seed
              << " (EINSUMMABLE_TEST_SEED replays)\n";
    const exprog::Topology topologies[] = {builtin("dgx-a100"), builtin("dgx-v100")};
    for (int case_idx = 0; case_idx < 12; ++case_idx) {
        std::mt19937_64 rng(seed * 7919 + case_idx);
        const ir::Graph graph = random_chain(rng, 2 + case_idx % 2);
        const exprog::Topology& topology = topologies[case_idx % 2];
        PlannerOptions options;
        options.devices = case_idx % 3 == 0 ? 8 : 4;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, " on ", topology.name(),
                                  " at p = ", options.devices, "\n", graph.to_string()));
        absl::StatusOr<GraphCandidates> candidates = planning_candidates(graph, options);
        ASSERT_TRUE(candidates.ok()) << candidates.status();
        TimePlanReport report;
        absl::StatusOr<LogicalPlan> plan = optimize_by_time(graph, options, topology, &report);
        ASSERT_TRUE(plan.ok()) << plan.status();
        absl::StatusOr<double> predicted = predict_plan_seconds(graph, *plan, topology);
        ASSERT_TRUE(predicted.ok()) << predicted.status();
        EXPECT_NEAR(*predicted, report.predicted_s, 1e-12 * report.predicted_s);
        std::vector<int> choice(candidates->size(), 0);
        while (true) {
            const LogicalPlan other = make_plan(graph, options, *candidates, choice);
            absl::StatusOr<double> seconds = predict_plan_seconds(graph, other, topology);
            ASSERT_TRUE(seconds.ok()) << seconds.status();
            ASSERT_LE(report.predicted_s, *seconds * (1 + 1e-12))
                << "a faster plan: " << explain_text(graph, other);
            size_t idx = 0;
            while (idx < choice.size() &&
                   ++choice[idx] == static_cast<int>((*candidates)[idx].size())) {
                choice[idx] = 0;
                ++idx;
            }
            if (idx == choice.size()) {
                break;
            }
        }
    }
}

} // namespace
} // namespace einsummable::logical
