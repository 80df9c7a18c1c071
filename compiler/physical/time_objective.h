#pragma once

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/plan_simulation.h"

namespace einsummable::physical {

// The objectives and the time objective's search live with the logical planner
// (compiler/logical/time_objective.h); this runs the search on the whole-plan simulator.
using logical::Objective;
using logical::objective_name;
using logical::parse_objective;
using logical::TimeSearchOptions;
using logical::TimeSearchResult;

// The plan minimising simulated time for `options` (devices, planner, seed) on `topology`:
// logical::optimize_for_time, each plan timed by compile_and_simulate with `physical` — while
// searching with at most search.search_iterations synthesis iterations — every plan sharing one
// synthesis cache (physical.cache, else one of its own). Cancelled once options.cancellation
// (or, when that is null, physical.synthesis.cancellation) is set. Errors are the search's,
// compile_physical's or simulate_plan's (e.g. a dtype the topology gives no peak for).
absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const logical::PlannerOptions& options,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& physical,
                                                   const TimeSearchOptions& search = {});

} // namespace einsummable::physical
