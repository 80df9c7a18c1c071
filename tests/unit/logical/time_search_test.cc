// The search objective's search (compiler/logical/time_objective.h) with timers made up here, so
// that what it should find is known: it keeps the bytes objective's plan when nothing is faster,
// starts from the fastest of the planners', baselines' and caller's plans, moves one operator at
// a time, times each plan once while searching and the distinct finalists once more, never
// returns a plan slower than its fastest start, and stops on the timer's errors and on
// cancellation. tests/unit/pipeline/time_objective_test.cc times plans on the
// whole-plan simulator.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_objective.h"
#include "compiler/workloads/workloads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

using ::testing::HasSubstr;

// At p = 4 the planner runs this FFN data parallel; megatron's plan differs.
constexpr int kDevices = 4;
const char* const kShape = "ffn:tokens=64,d_model=64,d_ff=32";

ir::Graph build() {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(kShape);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

bool same_choices(const LogicalPlan& a, const LogicalPlan& b) {
    for (size_t node = 0; node < a.operators.size(); ++node) {
        if (!(a.operators[node].choice.request == b.operators[node].choice.request)) {
            return false;
        }
    }
    return true;
}

// Counts the timer's calls by timing.
struct Calls {
    int searching = 0;
    int final = 0;
    void count(PlanTiming timing) { ++(timing == PlanTiming::final ? final : searching); }
};

TEST(TimeSearch, ATimerThatAgreesWithTheCostKeepsTheCostObjectivesPlan) {
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    Calls calls;
    auto by_cost = [&](const LogicalPlan& plan, PlanTiming timing) -> absl::StatusOr<double> {
        calls.count(timing);
        return plan.total.bytes.total();
    };
    absl::StatusOr<TimeSearchResult> found = optimize_for_time(graph, options, by_cost);
    ASSERT_TRUE(found.ok()) << found.status();
    const LogicalPlan dp = *optimize(graph, options);
    EXPECT_TRUE(same_choices(found->plan, dp));
    EXPECT_EQ(found->origin, "dp");
    EXPECT_EQ(found->predicted_s, dp.total.bytes.total());
    EXPECT_EQ(found->bytes_plan_predicted_s, found->predicted_s);
    // Each plan timed once while searching, then the distinct finalists (the winner, the starts
    // within 1.5x of the fastest start and the asked planner's plan) once more: fewer than the
    // plans searched, since the local search's neighbours are not finalists.
    EXPECT_GE(calls.final, 1);
    EXPECT_LT(calls.final, calls.searching);
    EXPECT_EQ(found->plans_simulated, calls.searching + calls.final);
    EXPECT_EQ(found->plan.options.cancellation, nullptr);
}

TEST(TimeSearch, StartsFromTheFastestBaseline) {
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    const LogicalPlan megatron = *optimize(graph, {kDevices, Planner::megatron, 0});
    ASSERT_FALSE(same_choices(megatron, *optimize(graph, options)));
    auto megatron_fastest = [&](const LogicalPlan& plan, PlanTiming) -> absl::StatusOr<double> {
        return same_choices(plan, megatron) ? 1.0 : 2.0;
    };
    absl::StatusOr<TimeSearchResult> found = optimize_for_time(graph, options, megatron_fastest);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->origin, "megatron");
    EXPECT_TRUE(same_choices(found->plan, megatron));
    EXPECT_EQ(found->predicted_s, 1.0);
    EXPECT_EQ(found->bytes_plan_predicted_s, 2.0);
    EXPECT_EQ(found->plan.options.planner, Planner::dp) << "the plan keeps the asked options";
}

// A timer that prices plans more coarsely while searching (as pipeline's does, without chunked
// exchanges): a start that only the final timing makes the fastest still wins, when it was
// within 1.5x of the fastest while searching; one slower than that is not timed again.
TEST(TimeSearch, AStartFastestOnlyWhenTimedAsFinalWinsWithinTheSlack) {
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    const LogicalPlan megatron = *optimize(graph, {kDevices, Planner::megatron, 0});
    for (const double searching_s : {1.4, 1.6}) {
        SCOPED_TRACE(searching_s);
        int megatron_final = 0;
        auto coarse = [&](const LogicalPlan& plan, PlanTiming timing) -> absl::StatusOr<double> {
            if (!same_choices(plan, megatron)) {
                return 1.0;
            }
            if (timing == PlanTiming::final) {
                ++megatron_final;
                return 0.5;
            }
            return searching_s;
        };
        absl::StatusOr<TimeSearchResult> found = optimize_for_time(graph, options, coarse);
        ASSERT_TRUE(found.ok()) << found.status();
        if (searching_s < 1.5) {
            EXPECT_EQ(found->origin, "megatron");
            EXPECT_TRUE(same_choices(found->plan, megatron));
            EXPECT_EQ(found->predicted_s, 0.5);
            EXPECT_EQ(megatron_final, 1);
        } else {
            EXPECT_EQ(found->origin, "dp");
            EXPECT_EQ(found->predicted_s, 1.0);
            EXPECT_EQ(megatron_final, 0);
        }
    }
}

// The first candidate of the first operator that none of the planners' starting plans chooses.
const Candidate* unstarted_candidate(const ir::Graph& graph, const GraphCandidates& candidates) {
    std::vector<ir::IntervalRequest> started;
    for (Planner planner : {Planner::dp, Planner::greedy, Planner::data_parallel, Planner::megatron,
                            Planner::ulysses, Planner::row_sharded}) {
        started.push_back(optimize(graph, {kDevices, planner, 0})->operators[0].choice.request);
    }
    for (const Candidate& candidate : candidates[0]) {
        if (std::find(started.begin(), started.end(), candidate.request) == started.end()) {
            return &candidate;
        }
    }
    return nullptr;
}

TEST(TimeSearch, StartsFromTheCallersPlansToo) {
    // The caller's plan (the pipeline gives the time programme's) is the fastest: the search
    // starts there and names it.
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    const GraphCandidates candidates = *enumerate_graph(graph, kDevices);
    const Candidate* unstarted = unstarted_candidate(graph, candidates);
    ASSERT_NE(unstarted, nullptr);
    std::vector<int> choice(candidates.size(), 0);
    for (size_t at = 0; at < candidates[0].size(); ++at) {
        if (candidates[0][at].request == unstarted->request) {
            choice[0] = static_cast<int>(at);
        }
    }
    TimeSearchOptions search;
    search.starts.push_back({"time dp", make_plan(graph, options, candidates, choice)});
    const LogicalPlan& given = search.starts[0].plan;
    auto given_fastest = [&](const LogicalPlan& plan, PlanTiming) -> absl::StatusOr<double> {
        return same_choices(plan, given) ? 1.0 : 2.0;
    };
    absl::StatusOr<TimeSearchResult> found =
        optimize_for_time(graph, options, given_fastest, search);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->origin, "time dp");
    EXPECT_TRUE(same_choices(found->plan, given));
    EXPECT_EQ(found->predicted_s, 1.0);
    EXPECT_EQ(found->bytes_plan_predicted_s, 2.0);
}

TEST(TimeSearch, NeverSlowerThanItsFastestStart) {
    // While searching, megatron's plan is the fastest start and its one-operator changes look
    // faster still; timed as final, those changes are the slowest: the fastest start is
    // returned, not the search's winner.
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    const LogicalPlan megatron = *optimize(graph, {kDevices, Planner::megatron, 0});
    auto changes = [&](const LogicalPlan& plan) {
        int changed = 0;
        for (size_t node = 0; node < plan.operators.size(); ++node) {
            changed +=
                plan.operators[node].choice.request == megatron.operators[node].choice.request ? 0
                                                                                               : 1;
        }
        return changed;
    };
    std::vector<LogicalPlan> starts; // the planners' plans but megatron's
    for (Planner planner : {Planner::dp, Planner::greedy, Planner::data_parallel, Planner::ulysses,
                            Planner::row_sharded}) {
        starts.push_back(*optimize(graph, {kDevices, planner, 0}));
    }
    Calls calls;
    auto time = [&](const LogicalPlan& plan, PlanTiming timing) -> absl::StatusOr<double> {
        calls.count(timing);
        const int changed = changes(plan);
        if (changed == 0) {
            return 1.0;
        }
        if (std::any_of(starts.begin(), starts.end(),
                        [&](const LogicalPlan& start) { return same_choices(plan, start); })) {
            return 2.0;
        }
        if (timing == PlanTiming::final) {
            return 5.0;
        }
        return changed == 1 ? 0.5 : 3.0;
    };
    absl::StatusOr<TimeSearchResult> found = optimize_for_time(graph, options, time);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->origin, "megatron");
    EXPECT_TRUE(same_choices(found->plan, megatron));
    EXPECT_EQ(found->predicted_s, 1.0);
    EXPECT_EQ(found->bytes_plan_predicted_s, 2.0);
    EXPECT_EQ(calls.final, 3); // the search's winner, megatron's plan and the dp plan
    EXPECT_EQ(found->plans_simulated, calls.searching + 3);
}

TEST(TimeSearch, MovesOneOperatorAtATime) {
    // The timer rewards one candidate of the first operator that no starting point chooses:
    // the local search, trying every neighbour, changes that operator and nothing else.
    const ir::Graph graph = build();
    const PlannerOptions options{kDevices, Planner::dp, 0};
    const GraphCandidates candidates = *enumerate_graph(graph, kDevices);
    const Candidate* rewarded = unstarted_candidate(graph, candidates);
    ASSERT_NE(rewarded, nullptr) << "every candidate of the first operator is a starting point";
    auto time = [&](const LogicalPlan& plan, PlanTiming) -> absl::StatusOr<double> {
        return plan.operators[0].choice.request == rewarded->request ? 0.5 : 1.0;
    };
    TimeSearchOptions search;
    search.neighbours = 1 << 20;
    absl::StatusOr<TimeSearchResult> found = optimize_for_time(graph, options, time, search);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(found->origin, "dp + 1 change");
    EXPECT_EQ(found->predicted_s, 0.5);
    EXPECT_EQ(found->bytes_plan_predicted_s, 1.0);
    const LogicalPlan dp = *optimize(graph, options);
    EXPECT_TRUE(found->plan.operators[0].choice.request == rewarded->request);
    for (size_t node = 1; node < dp.operators.size(); ++node) {
        EXPECT_TRUE(found->plan.operators[node].choice.request == dp.operators[node].choice.request)
            << graph.node(dp.operators[node].node).name;
    }
}

TEST(TimeSearch, TheTimersErrorsAndBadOptionsComeThrough) {
    const ir::Graph graph = build();
    auto failing = [](const LogicalPlan&, PlanTiming) -> absl::StatusOr<double> {
        return absl::InvalidArgumentError("no peak_bf16");
    };
    absl::StatusOr<TimeSearchResult> found =
        optimize_for_time(graph, {kDevices, Planner::dp, 0}, failing);
    EXPECT_TRUE(absl::IsInvalidArgument(found.status())) << found.status();
    EXPECT_THAT(found.status().message(), HasSubstr("peak_bf16"));
    auto never = [](const LogicalPlan&, PlanTiming) -> absl::StatusOr<double> {
        ADD_FAILURE() << "timed a plan";
        return 1.0;
    };
    EXPECT_THAT(optimize_for_time(graph, {0, Planner::dp, 0}, never).status().message(),
                HasSubstr("devices must be at least 1"));
}

TEST(TimeSearch, SetBeforeItStartsReturnsCancelledWithoutTimingAPlan) {
    const ir::Graph graph = build();
    support::Cancellation cancellation;
    cancellation.cancel();
    auto never = [](const LogicalPlan&, PlanTiming) -> absl::StatusOr<double> {
        ADD_FAILURE() << "timed a plan";
        return 1.0;
    };
    absl::StatusOr<TimeSearchResult> found =
        optimize_for_time(graph, {kDevices, Planner::dp, 0, &cancellation}, never);
    EXPECT_TRUE(absl::IsCancelled(found.status())) << found.status();
    EXPECT_THAT(found.status().message(), HasSubstr("compile cancelled during"));
    EXPECT_EQ(cancellation.polls(), 1);
}

TEST(TimeSearch, CancelledWhileSearchingStopsAtTheNextPlan) {
    const ir::Graph graph = build();
    support::Cancellation cancellation;
    int timed = 0;
    auto cancel_after_three = [&](const LogicalPlan&, PlanTiming) -> absl::StatusOr<double> {
        if (++timed == 3) {
            cancellation.cancel();
        }
        return static_cast<double>(timed);
    };
    absl::StatusOr<TimeSearchResult> found =
        optimize_for_time(graph, {kDevices, Planner::dp, 0, &cancellation}, cancel_after_three);
    EXPECT_TRUE(absl::IsCancelled(found.status())) << found.status();
    EXPECT_THAT(found.status().message(), HasSubstr("compile cancelled during"));
    EXPECT_EQ(timed, 3);
}

} // namespace
} // namespace einsummable::logical
