#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/resident_layout.h"

namespace einsummable::physical {

// A compiled plan's decisions as text, so a plan can be rebuilt without running the logical
// optimiser or the exchange-program synthesis (the daemon's plan cache, server/plan_store.h).
// docs/physical.md, "Plan cache files", gives the format with an example:
//
//   einsummable-plan-record 1
//   plan devices 4 planner dp seed 0 schedule optimized topology "dgx-a100" objective time
//     predicted 0.00123 origin "time dp"        (one line: the plan's LogicalPlan::objective)
//   operator "w1" einsum                     every operator, in NodeId order
//     index "tokens" [0,24) [24,48)          its interval request, per shardable index
//     exchange input 1 tensor "x"            its exchanges, in compile_physical's order
//       membership F0=1 F1=0                 the size-declared partitions' GPUs
//       times 1.2e-05 3.4e-05                simulated and naive seconds (%.17g)
//       program 9                            that many lines of exprog::print_program
//         GPUS: 0, 1, 2, 3
//         ...
//   saved "y"                                a saved output's exchange, as above
//     ...
//   end
//
// Names are quoted and C-escaped. The record holds decisions, never code: restore_plan checks
// every one against the graph it is given. 'objective NAME predicted SECONDS origin "..."' ends
// the plan line when the logical plan names the objective that made it (LogicalPlan::objective,
// restored as it was); records written before objectives were named end at the topology, and
// are read as they always were.
inline constexpr int kPlanRecordVersion = 1;

std::string plan_record(const ir::Graph& graph, const logical::LogicalPlan& logical,
                        const PhysicalPlan& physical);

// The objective a record's plan line names; unset for a record that names none (one written
// before records named it). InvalidArgument when the record's first lines are not a record's.
absl::StatusOr<std::optional<logical::Objective>> recorded_objective(absl::string_view record);

struct RestoredPlan {
    logical::LogicalPlan logical;
    PhysicalPlan physical;
};

// Rebuilds the plans a record describes for `graph`, without optimising or synthesising:
//   - the header must name `planner`'s devices, planner and seed, `mode` and the topology's name;
//   - every operator must match the graph's (name, kind, shardable indices) and its request
//     must be valid for the operator (Operator::spec) with at most `devices` function specs; the
//     logical plan is logical::make_plan over candidates built from the requests; with
//     `planner.batch_invariant` (and a planner that is no baseline) no request may aggregate
//     (logical::aggregates), as none that such a compile chooses does;
//   - every exchange's preamble is rebuilt as compile_physical builds it (build_physical) and
//     must equal the recorded program's GPUS, PARTITIONS, IN and OUT; the recorded program must
//     be valid under its membership (exprog::check_with_membership), which must give every
//     size-declared partition its size in GPUs and put an operator's function specs on distinct
//     devices;
//   - resident inputs: `planner.pinned` and `resident` as the compile had them (the caller keys
//     plans by the layout's fingerprint, so a record is restored with the layout it was made
//     for; a resident exchange's preamble is rebuilt from the layout like any other).
// The logical plan's objective is the record's (unset when it names none); the header's
// objective is not checked against anything (the caller's plan key says which objective's plan
// it looks for).
// InvalidArgument naming the operator, tensor or record line otherwise: a corrupt record, or a
// stale one for another graph, device count or version. Never crashes on arbitrary bytes.
absl::StatusOr<RestoredPlan> restore_plan(const ir::Graph& graph,
                                          const logical::PlannerOptions& planner,
                                          const exprog::Topology& topology,
                                          exprog::SynthesisMode mode, absl::string_view record,
                                          const ResidentLayout* resident = nullptr);

} // namespace einsummable::physical
