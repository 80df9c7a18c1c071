// The logical optimiser observes PlannerOptions::cancellation (compiler/support/cancellation.h):
// set before it starts, optimize() returns Cancelled for every planner; set from another thread,
// it stops a long programme; unset, it changes no decision.

#include <iostream>
#include <string>

#include "absl/status/status.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/workloads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cancel_after.h"

namespace einsummable::logical {
namespace {

using ::testing::HasSubstr;

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << name << ": " << graph.status();
    return *std::move(graph);
}

TEST(LogicalCancellation, SetBeforeItStartsEveryPlannerReturnsCancelled) {
    const ir::Graph graph = build("llama-block:tokens=1024");
    support::Cancellation cancellation;
    cancellation.cancel();
    for (Planner planner : all_planners()) {
        SCOPED_TRACE(planner_name(planner));
        absl::StatusOr<LogicalPlan> plan = optimize(graph, {8, planner, 0, &cancellation});
        EXPECT_TRUE(absl::IsCancelled(plan.status())) << plan.status();
        EXPECT_THAT(std::string(plan.status().message()), HasSubstr("compile cancelled during"));
    }
    EXPECT_TRUE(absl::IsCancelled(enumerate_graph(graph, 8, &cancellation).status()));
    const GraphCandidates candidates = *enumerate_graph(graph, 8);
    EXPECT_TRUE(absl::IsCancelled(choose_dp(graph, candidates, true, &cancellation).status()));
}

TEST(LogicalCancellation, SetFromAnotherThreadStopsALongProgramme) {
    // The largest graph the optimiser meets in practice is small; a deep stack makes the
    // programme take long enough to be stopped half-way.
    const ir::Graph graph = build("llama-stack:blocks=256,tokens=8192");
    auto [full, full_s] = einsummable::testing::timed([&] { return optimize(graph, {8}); });
    ASSERT_TRUE(full.ok()) << full.status();
    ASSERT_GT(full_s, 4 * std::chrono::duration<double>(einsummable::testing::kCancelDelay).count())
        << "the workload is too small to be stopped half-way";
    for (Planner planner : {Planner::dp, Planner::greedy}) {
        SCOPED_TRACE(planner_name(planner));
        support::Cancellation cancellation;
        auto [plan, timing] = einsummable::testing::run_cancelled_after(
            cancellation, einsummable::testing::kCancelDelay, [&] {
                return optimize(graph, {8, planner, 0, &cancellation});
            });
        EXPECT_TRUE(absl::IsCancelled(plan.status())) << plan.status();
        EXPECT_LT(timing.after_cancel_s, einsummable::testing::kCancelBoundS);
        std::cout << planner_name(planner) << ": full " << full_s * 1e3 << " ms; returned "
                  << timing.after_cancel_s * 1e3 << " ms after cancel()\n";
    }
}

TEST(LogicalCancellation, AnUnsetCancellationChangesNoDecision) {
    for (const std::string name : {"llama-block:seqs=8x1024", "chain:A"}) {
        const ir::Graph graph = build(name);
        for (Planner planner : all_planners()) {
            SCOPED_TRACE(name + " " + std::string(planner_name(planner)));
            support::Cancellation cancellation;
            absl::StatusOr<LogicalPlan> plain = optimize(graph, {4, planner, 7});
            absl::StatusOr<LogicalPlan> with = optimize(graph, {4, planner, 7, &cancellation});
            ASSERT_TRUE(plain.ok() && with.ok());
            EXPECT_EQ(explain_text(graph, *plain), explain_text(graph, *with));
            EXPECT_EQ(with->options.cancellation, nullptr) << "a plan outlives its compile";
        }
    }
}

} // namespace
} // namespace einsummable::logical
