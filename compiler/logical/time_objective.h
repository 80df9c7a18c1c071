#pragma once

#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::logical {

// What the planner's final choice minimises (docs/simulation.md, "A compute-aware choice"):
//   cost — the paper's cost in bytes (optimize alone);
//   time — whole-plan simulated time: the planner's plan, greedy's and the hand-written
//          baselines' are simulated, then a local search from the fastest tries, per round,
//          the `neighbours` cheapest plans (by the paper's cost) that change one operator's
//          spec, moving while one is faster.
enum class Objective { cost, time };

absl::string_view objective_name(Objective objective);
absl::StatusOr<Objective> parse_objective(absl::string_view name); // "cost" or "time"

struct TimeSearchOptions {
    int neighbours = 8; // plans simulated per round of the local search
    int rounds = 3;     // rounds at most; the search stops early when no neighbour is faster
    // Synthesis iterations while searching (the final plan is simulated with the caller's): read
    // by the timer that simulates plans (pipeline::optimize_for_time), not by the search.
    int search_iterations = 100;
};

// How the search went: what einsummable-plan and bench/paper report beside the plan.
struct TimeSearchReport {
    double predicted_s = 0.0; // the plan's simulated time, timed as PlanTiming::final
    // The simulated time of the plan the cost objective gives (options.planner's own plan).
    double cost_plan_predicted_s = 0.0;
    std::string origin; // where it came from: "dp", "ulysses", "dp + 2 changes", ...
    int plans_simulated = 0;
};

struct TimeSearchResult : TimeSearchReport {
    LogicalPlan plan; // the fastest plan found
};

// How a plan is timed: while searching (the timer may spend less on it, e.g. fewer synthesis
// iterations), or for the final comparison of the fastest plan found with the cost objective's.
enum class PlanTiming { searching, final };

// The simulated seconds of a plan. The search knows no machine: the caller's timer compiles
// and simulates the plan (pipeline::optimize_for_time: compiler/physical's whole-plan
// simulator on a topology). Its errors end the search.
using PlanTimer = absl::FunctionRef<absl::StatusOr<double>(const LogicalPlan&, PlanTiming)>;

// The plan minimising `time` for `options` (devices, planner, seed). The search ranges over
// the candidates that optimize() would choose among (options.batch_invariant:
// keep_unaggregated; options.unreplicated: keep_unreplicated), and a baseline's plan that uses
// another is no starting point. Deterministic when `time` is. Cancelled once
// options.cancellation is set: it is polled per plan timed and per operator whose neighbours are
// costed (the timer polls its own). InvalidArgument when options.devices < 1; other errors are
// optimize()'s or the timer's.
absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const PlannerOptions& options, PlanTimer time,
                                                   const TimeSearchOptions& search = {});

} // namespace einsummable::logical
