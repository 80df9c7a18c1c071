#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::logical {

// The dynamic programme over predicted time (docs/planner.md "Pricing by time"): the objective
// `time`, the default. It keeps choose_dp's structure (trees cut at tensors with several
// consumers, Opt(op, T) per output tiling) but prices every candidate by the time_model.h terms
// on `topology` — the slowest device's kernels, the exchange that feeds each produced input (α–β
// over the topology's links), the aggregation — instead of the paper's bytes.

// How the time programme's plan was chosen, for explain and the plan records.
struct TimePlanReport {
    // The plan's predicted time (predict_plan_seconds).
    double predicted_s = 0.0;
    // Where the plan came from: "time dp", or the complete plan that predicted faster than the
    // programme's own ("bytes dp", "data-parallel", ...).
    std::string origin;
};

// The plan minimising predicted time for `options` (devices, batch invariance, pinned and
// unreplicated inputs, attention splits; options.planner is ignored). InvalidArgument when
// options.devices exceeds the topology's GPUs; the topology's pricing errors (a dtype it gives
// no peak for); Cancelled as optimize().
absl::StatusOr<LogicalPlan> optimize_by_time(const ir::Graph& graph, const PlannerOptions& options,
                                             const exprog::Topology& topology,
                                             TimePlanReport* report = nullptr);

// The predicted time of a complete plan on `topology`, as the programme prices it.
absl::StatusOr<double> predict_plan_seconds(const ir::Graph& graph, const LogicalPlan& plan,
                                            const exprog::Topology& topology);

} // namespace einsummable::logical
