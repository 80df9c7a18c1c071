#pragma once

#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::logical {

// The search objective (Objective::search, logical_plan.h; docs/simulation.md, "A
// compute-aware choice"): whole-plan simulated time. The planner's plan, greedy's, the
// hand-written baselines' and the caller's extra starting plans (the pipeline gives the time
// programme's) are simulated, then a local search from the fastest tries, per round, the
// `neighbours` cheapest plans (by the paper's cost) that change one operator's spec, moving while
// one is faster.

// A plan the search starts from besides the planners' own (a plan of the same options, e.g.
// the time programme's), with where it came from ("time dp").
struct StartingPlan {
    std::string origin;
    LogicalPlan plan;
};

struct TimeSearchOptions {
    int neighbours = 8; // plans simulated per round of the local search
    int rounds = 3;     // rounds at most; the search stops early when no neighbour is faster
    // Synthesis iterations while searching (the final plan is simulated with the caller's): read
    // by the timer that simulates plans (pipeline::optimize_for_time), not by the search.
    int search_iterations = 100;
    // Starting points besides the asked planner's, greedy's and the baselines' plans, tried in
    // order after them. Their choices join the candidates the search ranges over.
    std::vector<StartingPlan> starts;
};

// How the search went: what einsummable-plan and bench/paper report beside the plan.
struct TimeSearchReport {
    double predicted_s = 0.0; // the plan's simulated time, timed as PlanTiming::final
    // The simulated time of the plan options.planner gives alone (logical::optimize: the bytes
    // objective's plan for dp), timed as PlanTiming::final.
    double bytes_plan_predicted_s = 0.0;
    // Where it came from: "dp", "ulysses", "time dp", "dp + 2 changes", ...
    std::string origin;
    int plans_simulated = 0;
};

struct TimeSearchResult : TimeSearchReport {
    LogicalPlan plan; // the fastest plan found
};

// How a plan is timed: while searching (the timer may spend less on it, e.g. fewer synthesis
// iterations, whole-atom exchanges), or for the final comparison of the fastest plan found with
// the starts and options.planner's plan.
enum class PlanTiming { searching, final };

// The simulated seconds of a plan. The search knows no machine: the caller's timer compiles
// and simulates the plan (pipeline::optimize_for_time: compiler/physical's whole-plan
// simulator on a topology). Its errors end the search.
using PlanTimer = absl::FunctionRef<absl::StatusOr<double>(const LogicalPlan&, PlanTiming)>;

// The plan minimising `time` for `options` (devices, planner, seed), never slower (timed as
// final) than the fastest starting plan (timed while searching) nor than options.planner's plan:
// the winner of the local search, every start within 1.5x of the fastest start (timed while
// searching) and options.planner's plan are each timed as final and the fastest is returned. The
// search ranges over the candidates that optimize() would choose among (options.batch_invariant:
// keep_unaggregated; options.unreplicated: keep_unreplicated), and a baseline's plan that uses
// another is no starting point. Deterministic when `time` is. Cancelled once
// options.cancellation is set: it is polled per plan timed and per operator whose neighbours are
// costed (the timer polls its own). InvalidArgument when options.devices < 1; other errors are
// optimize()'s or the timer's.
absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const PlannerOptions& options, PlanTimer time,
                                                   const TimeSearchOptions& search = {});

} // namespace einsummable::logical
