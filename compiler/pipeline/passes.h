#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/cancellation.h"

// The passes of compile() (compiler/pipeline/pipeline.h), in its order, each a function of its
// own (tests/unit/pipeline/).
namespace einsummable::pipeline {

// What the passes of one compile read, derived once from its options and machine.
struct PassOptions {
    exprog::Topology topology;
    // The options' planner, devices, seed, cancellation and batch invariance, the machine's
    // attention splits, and the tilings of the resident inputs pinned (Options::resident unless
    // it is being defined again).
    logical::PlannerOptions planner;
    // The options' schedule, seed, iterations, chunks, cache and cancellation; the pinned
    // resident inputs read in place.
    physical::PhysicalOptions physical;
    // Options::max_chunks unset: physical's chunking (kDefaultMaxChunks, chosen per exchange)
    // is for plans by time (the time programme's and the search's); the bytes objective's
    // plans keep whole atoms.
    bool chunk_only_by_time = false;
    // Options::micro_batches: unset, by objective (keep_fastest_micro_batches).
    std::optional<std::vector<int>> micro_batches;
    logical::TimeSearchOptions search;
    int64_t device_memory_bytes = 0; // the machine's; 0 = unlimited
};
PassOptions pass_options(const ir::Graph& graph, const Options& options, const Machine& machine);
// The planner's part of it (which needs no topology).
logical::PlannerOptions planner_options(const ir::Graph& graph, const Options& options,
                                        const Machine& machine);
// The resident inputs the planner and the exchanges take as they lie: options.resident, unless
// it is being defined again (null then, and without it).
const physical::ResidentLayout* pinned_layout(const Options& options);

// 1. The logical plan for `objective` as passes.planner's planner plans by it
// (logical::planned_objective: only dp plans by objective), the objective recorded in the plan:
//   bytes  — logical::optimize;
//   time   — logical::optimize_by_time on passes.topology (its prediction and origin recorded);
//   search — optimize_for_time below, started from the time programme's plan as well (its
//            report comes with it).
absl::StatusOr<ObjectivePlan>
plan_by_objective(const ir::Graph& graph, logical::Objective objective, const PassOptions& passes);
// The bytes objective's plan (logical::optimize), which needs no topology.
absl::StatusOr<ObjectivePlan> plan_by_bytes(const ir::Graph& graph,
                                            const logical::PlannerOptions& planner);

// The search objective on the whole-plan simulator: logical::optimize_for_time, each plan timed by
// physical::compile_and_simulate on `topology` with `physical` — while searching with at most
// search.search_iterations synthesis iterations — every plan sharing one synthesis cache
// (physical.cache, else one of its own). Cancelled once planner.cancellation (or, when that is
// null, physical.synthesis.cancellation) is set. Errors are the search's, compile_physical's or
// simulate_plan's (e.g. a dtype the topology gives no peak for).
absl::StatusOr<logical::TimeSearchResult>
optimize_for_time(const ir::Graph& graph, const logical::PlannerOptions& planner,
                  const exprog::Topology& topology, const physical::PhysicalOptions& physical,
                  const logical::TimeSearchOptions& search = {});

// 2. physical::compile_physical (compiler/physical/physical_plan.h): the exchange programs.

// 3. The layout of the resident inputs the plan defines: with options.resident_inputs and no
// options.resident, define_resident_layout of them (unset when the plan reads none of them);
// otherwise unset. With options.resident and options.resident_defines: FailedPrecondition when
// the plan lays the inputs out differently from options.resident.
absl::StatusOr<std::optional<physical::ResidentLayout>>
lay_out_resident(const ir::Graph& graph, const physical::PhysicalPlan& physical,
                 const Options& options);

// 4. Lowers plan.physical, reading in place the resident inputs of options.resident, else of
// plan.defined_layout (neither: none): plan.exec (memory planned; batch-invariant kernels with
// options.batch_invariant), plan.resident_names and plan.need. Cancelled once `cancellation`
// (null: never) is set.
absl::Status lower_plan(const ir::Graph& graph, const Options& options,
                        const support::Cancellation* cancellation, CompiledPlan& plan);

// The graph inputs that are weights: options.weights, options.resident_inputs and the inputs
// options.resident holds.
std::set<std::string> weight_names(const Options& options);

// What each of `devices` devices holds for one instance of `exec`: the resident arena of
// `layout` it reads (when `resident_names` is not empty), its own arenas, and of those the
// blocks of `weights` it keeps its own copies of (those not in `resident_names`).
std::vector<DeviceNeed> device_need(const physical::ExecGraph& exec,
                                    const physical::ResidentLayout* layout,
                                    const std::set<std::string>& resident_names,
                                    const std::set<std::string>& weights, int devices);

// OK, or ResourceExhausted naming the device that passes `capacity` by the most bytes: "the
// plan does not fit in device memory: device 1 needs 40960 B (weights 16384 B + activations
// 24576 B) and has 32768 B". A capacity of 0 is unlimited.
absl::Status check_memory(const std::vector<DeviceNeed>& need, int64_t capacity);

// Passes 1 and 2 for `objective`: the plan's logical and physical plans (and search report).
// When its exchanges were chosen chunked or not (physical_options) and `whole_atoms` is not
// null, *whole_atoms receives its physical plan with whole atoms everywhere
// (physical::compile_physical).
absl::StatusOr<CompiledPlan> plan_and_synthesize(const ir::Graph& graph, const PassOptions& passes,
                                                 logical::Objective objective,
                                                 physical::PhysicalPlan* whole_atoms = nullptr);
// The physical options pass 2 compiles a plan by `objective` with: passes.physical, with whole
// atoms when passes.chunk_only_by_time and the planner plans by bytes.
physical::PhysicalOptions physical_options(const PassOptions& passes, logical::Objective objective);
// Passes 3 and 4 on such a plan.
absl::Status lay_out_and_lower(const ir::Graph& graph, const Options& options,
                               const support::Cancellation* cancellation, CompiledPlan& plan);
// The whole-plan guard of the per-exchange chunking choice (docs/physical.md "Choosing
// chunks"): an exchange priced alone is not the plan (concurrent exchanges share links,
// per-chunk aggregates queue behind kernels, chunk buffers reuse memory), so when `plan` (passes
// 1-4 done) has chunked exchanges, it is simulated (physical::simulate_plan on
// passes.topology) against `whole_atoms` lowered the same way, and the whole-atom plan replaces
// it unless the chunked one is faster. Nothing to do when no exchange was chunked.
absl::Status keep_fastest_chunking(const ir::Graph& graph, const Options& options,
                                   const PassOptions& passes, physical::PhysicalPlan whole_atoms,
                                   CompiledPlan& plan);
// Micro-batches by objective (Options::micro_batches unset; logical/micro_batches.h): for a
// plan by the time or search objective (not batch-invariant) whose saved outputs' delivery —
// the simulated time D past the last node's end, C — is more than 1 % of its simulated time,
// the logical plan is compiled again (passes 2-4) with two halves ({1, 1}) and with a last
// micro-batch sized to be delivered in about the time the rest's delivery overlaps
// ({round(C / D), 1}, at most 64:1), and the fastest of the three by the whole-plan simulator is
// kept (the first on a tie). Nothing to do otherwise.
absl::Status keep_fastest_micro_batches(const ir::Graph& graph, const Options& options,
                                        const PassOptions& passes, logical::Objective objective,
                                        CompiledPlan& plan);
// The search objective's guarantee with micro-batches: the search starts from the time
// programme's plan and never returns a slower one, but it searches plans without micro-batches,
// and its plan cut into micro-batches may simulate slower than the time programme's cut into
// its own. The time objective's compile (plan_once) is made too, and replaces `plan` (named the
// search's, from "time dp") where it simulates faster.
absl::Status keep_faster_than_time(const ir::Graph& graph, const Options& options,
                                   const PassOptions& passes, CompiledPlan& plan);
// Passes 1 to 4, for `objective`, with keep_fastest_chunking and keep_fastest_micro_batches
// (or the micro-batches Options::micro_batches asks for); for the search objective,
// keep_faster_than_time.
absl::StatusOr<CompiledPlan> plan_once(const ir::Graph& graph, const Options& options,
                                       const PassOptions& passes, logical::Objective objective);

// 5. The memory fit of `first` (plan_once for options.objective): `first` when it fits
// passes.device_memory_bytes. Otherwise — or when it is FailedPrecondition, a layout defined
// again otherwise — planned again (passes 1 to 4) with the weights (weight_names; every graph input
// when they name none) unreplicated, for options.objective and then, if that does not fit
// either, the bytes objective (a plan by time may hold more activations than the bytes plan);
// weights_unreplicated is set on the plan that fits. ResourceExhausted when the weights are
// pinned (their layout is fixed, so nothing is planned again) or when no plan fits, naming
// what the first plan and the plan planned again that comes closest need; other errors as
// they come.
absl::StatusOr<CompiledPlan> fit_memory(const ir::Graph& graph, const Options& options,
                                        const PassOptions& passes,
                                        absl::StatusOr<CompiledPlan> first);

} // namespace einsummable::pipeline
