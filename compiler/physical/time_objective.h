#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/plan_simulation.h"

namespace einsummable::physical {

// What the planner's final choice minimises (docs/simulation.md, "A compute-aware choice"):
//   cost — the paper's cost in bytes (logical::optimize alone);
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
    // Synthesis iterations while searching (the final plan is simulated with the caller's).
    int search_iterations = 100;
};

struct TimeSearchResult {
    logical::LogicalPlan plan; // the fastest plan found
    double predicted_s = 0.0;  // its simulated time with the caller's synthesis options
    // The simulated time of the plan the cost objective gives (options.planner's own plan).
    double cost_plan_predicted_s = 0.0;
    std::string origin; // where it came from: "dp", "ulysses", "dp + 2 changes", ...
    int plans_simulated = 0;
};

// The plan minimising simulated time for `options` (devices, planner, seed) on `topology`,
// exchange programs synthesised with `physical`. The search ranges over the candidates that
// logical::optimize would choose among (options.batch_invariant: keep_unaggregated;
// options.unreplicated: keep_unreplicated), and a baseline's plan that uses another is no
// starting point. Deterministic for its inputs. Cancelled once
// options.cancellation (or, when that is null, physical.synthesis.cancellation) is set: it is
// polled per plan simulated, per operator whose neighbours are costed and by the synthesis. Errors
// are logical::optimize's, compile_physical's or simulate_plan's (e.g. a dtype the topology gives
// no peak for).
absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const logical::PlannerOptions& options,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& physical,
                                                   const TimeSearchOptions& search = {});

} // namespace einsummable::physical
