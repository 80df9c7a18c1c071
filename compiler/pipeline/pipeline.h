#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/support/cancellation.h"

// The one compile pipeline (docs/design.md "The pipeline"): a bound, validated graph in, the
// plans and the lowered ExecGraph with its memory plan out, for a machine described as data.
// Pure C++ like the rest of compiler/: no I/O, no device. runtime::Plan prepares what it
// returns on a backend; the daemon, einsummable-plan and the benchmarks call it alike.
//
//   compile(graph, options, machine):
//     check          the options against the graph and the machine
//     1. plan_by_objective    the logical plan: logical::optimize (bytes), the time
//                             programme (time, the default), or the search on the whole-plan
//                             simulator (search)
//     2. compile_physical     exchange programs, synthesised on the machine's topology
//     3. lay_out_resident     the layout of the resident inputs it reads or defines
//     4. lower_plan           the ExecGraph and its static memory plan; what each device needs
//     5. fit_memory           a plan that does not fit the devices' memory is planned again
//                             (1-4) with its weights unreplicated
// The passes are declared in compiler/pipeline/passes.h.
namespace einsummable::pipeline {

// What the plan is compiled for, as plain data: what runtime::Plan reads of its backend and
// options (a tool without a backend describes the machine it simulates).
struct Machine {
    std::string backend; // its name, for messages ("the plan needs 8 devices; the cpu backend …")
    int devices = 1;     // devices it has; a plan may use fewer
    // The interconnect the exchange programs are synthesised for; unset: default_topology of
    // the plan's device count.
    std::optional<exprog::Topology> topology;
    // Bytes each device may hold for the plan (its resident weights plus one instance's
    // arenas); 0 = unlimited.
    int64_t device_memory_bytes = 0;
    // The attention splits the backend's kernels run (logical::PlannerOptions::attention_splits).
    logical::AttentionSplits attention_splits = logical::AttentionSplits::any;
};

// dgx-a100 for up to 8 devices; beyond, a switch of `devices` GPUs with dgx-a100's numbers
// ("switch-<devices>").
exprog::Topology default_topology(int devices);

// The most chunks of an exchange when Options::max_chunks is unset and the plan is by time.
inline constexpr int kDefaultMaxChunks = 8;

// How to compile (runtime::CompileOptions says more of each, as the daemon sets them).
struct Options {
    int devices = 1;
    logical::Planner planner = logical::Planner::dp;
    uint64_t seed = 0; // the random planner's seed, and the synthesis search's
    // The synthesis search's seed when it is another (bench/paper synthesises every random
    // plan's exchanges with seed 0).
    std::optional<uint64_t> synthesis_seed;
    exprog::SynthesisMode schedule = exprog::SynthesisMode::optimized;
    int synthesis_iterations = 600; // exprog::SynthesisOptions::iterations
    // Pipelined exchanges (exprog::SynthesisOptions::max_chunks); 0: whole atoms. Unset: by
    // objective (docs/physical.md "Choosing chunks"): a plan by the time objective chunks its
    // exchanges into up to kDefaultMaxChunks where that pays, as choose_chunking below; the
    // bytes and search objectives' plans keep whole atoms.
    std::optional<int> max_chunks;
    // With max_chunks > 0: chunk each exchange only where its lowering simulates faster
    // (physical::PhysicalOptions::choose_chunking), and keep the plan so chosen only where it
    // simulates faster than with whole atoms everywhere (keep_fastest_chunking, passes.h).
    bool choose_chunking = false;
    // Micro-batches (logical/micro_batches.h): each operator's token rows cut into parts, their
    // sizes in proportion to these weights, that one device runs one after another, so the first
    // rows' outputs leave while the rest computes. Unset: by objective — a plan by the time or
    // search objective whose saved outputs' delivery is more than 1 % of its simulated time is
    // compiled again with micro-batches, and the fastest by the whole-plan simulator is kept
    // (keep_fastest_micro_batches, passes.h); the bytes objective's plans, the baselines' and
    // batch-invariant compiles have none. Set: these for any plan (empty or one weight: none).
    std::optional<std::vector<int>> micro_batches;
    // Shared by compiles that may reuse each other's synthesised exchanges (a hit is what the
    // synthesis would give). Null: none. Not owned.
    physical::SynthesisCache* cache = nullptr;
    // What the dp planner minimises (logical::Objective; other planners give their own plan
    // whatever it is, logical::planned_objective), and the search objective's budget.
    logical::Objective objective = logical::Objective::time;
    logical::TimeSearchOptions time_search;
    // Once set, compile() returns Cancelled ("compile cancelled during <stage>") within one
    // step of the passes' loops. Null: never. Not owned. Changes no decision.
    const support::Cancellation* cancellation = nullptr;
    // Resident inputs (compiler/physical/resident_layout.h). `resident`: the layout of inputs
    // that already live on the devices (not owned); those the plan reads are read in place, and
    // the planner pays the repartition of reading one in another tiling. Without it, the inputs
    // named in `resident_inputs` get the layout the plan reads them in
    // (CompiledPlan::defined_layout). With `resident_defines`, this is the compile that defined
    // `resident`, made again: planned free, it must lay the inputs out exactly so.
    const physical::ResidentLayout* resident = nullptr;
    std::set<std::string> resident_inputs;
    bool resident_defines = false;
    // The graph inputs that are weights, for the memory fit (with resident_inputs and the
    // inputs `resident` holds): counted as weights, and what a plan that does not fit stops
    // replicating.
    std::set<std::string> weights;
    // No operator aggregates partial results (logical::PlannerOptions::batch_invariant), and
    // the kernels compute an element the same in blocks of any size (ExecGraph::batch_invariant).
    bool batch_invariant = false;
};

// What one plan needs of one device: `weights` = the resident arena it reads plus its own
// copies of weights, `activations` = the rest of one instance's arenas.
struct DeviceNeed {
    int device = 0;
    int64_t weights = 0;
    int64_t activations = 0;
    int64_t resident = 0; // of `weights`: the resident arena, which instances share
    int64_t total() const { return weights + activations; }
};

// Wall time of each pass of the plan's compile (its last attempt when the memory fit planned
// again): what bench/paper reports as planning and synthesis time.
struct PassSeconds {
    double logical = 0.0;  // plan_by_objective
    double physical = 0.0; // compile_physical
    double lowering = 0.0; // lay_out_resident and lower_plan
};

// The logical plan (its objective recorded in it) and, with the search objective, how the
// search found it.
struct ObjectivePlan {
    logical::LogicalPlan plan;
    std::optional<logical::TimeSearchReport> search;
};

// What the runtime needs to execute a compiled graph.
struct CompiledPlan {
    logical::LogicalPlan logical;
    std::optional<logical::TimeSearchReport> search; // ObjectivePlan::search
    physical::PhysicalPlan physical;
    physical::ExecGraph exec; // lowered, its memory planned
    // The layout of the resident inputs this plan defines (Options::resident_inputs without
    // Options::resident), for the runtime to allocate; unset otherwise.
    std::optional<physical::ResidentLayout> defined_layout;
    // The graph inputs it reads in place: from Options::resident or defined_layout.
    std::set<std::string> resident_names;
    std::vector<DeviceNeed> need; // per device, with one instance
    // Whether it was planned again with its weights unreplicated to fit the devices' memory.
    bool weights_unreplicated = false;
    PassSeconds seconds;
};

// InvalidArgument when the options are not for this graph: fewer than 1 device, negative
// synthesis iterations, or a graph that saves nothing (ir::Graph::validate).
absl::Status check_options(const ir::Graph& graph, const Options& options);
// check_options, then InvalidArgument when the machine has fewer devices than the plan uses.
absl::Status check(const ir::Graph& graph, const Options& options, const Machine& machine);

// The whole pipeline above. Errors: check()'s; the passes' (Cancelled once
// options.cancellation is set; FailedPrecondition when a compile that defines its resident
// layout again lays it out otherwise); ResourceExhausted naming the device, the bytes it needs
// (weights and activations apart) and the capacity when no plan fits the devices' memory.
absl::StatusOr<CompiledPlan> compile(const ir::Graph& graph, const Options& options,
                                     const Machine& machine);

// Pass 1 alone, with the settings compile() gives it: the logical plan by objective
// (einsummable-plan without --simulate). No checks of its own; the bytes objective makes no
// topology.
absl::StatusOr<ObjectivePlan> plan_logical(const ir::Graph& graph, const Options& options,
                                           const Machine& machine);

// The plan a record (physical::plan_record) holds, without optimising or synthesising: the
// record's plans checked against the graph (physical::restore_plan), then passes 3-4 and the
// memory check (a record made for more memory is refused, not planned again). Ignores
// options.cancellation, and the objective but to name it in a plan whose record names none
// (one recorded before records named it: the caller's key found it for that objective).
absl::StatusOr<CompiledPlan> restore(const ir::Graph& graph, const Options& options,
                                     const Machine& machine, absl::string_view record);

} // namespace einsummable::pipeline
