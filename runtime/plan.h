#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/time_objective.h"
#include "compiler/support/cancellation.h"
#include "runtime/backend.h"

namespace einsummable::runtime {

struct CompileOptions {
    int devices = 1;
    logical::Planner planner = logical::Planner::dp;
    uint64_t seed = 0; // the random planner's and the synthesis search's seed
    exprog::SynthesisMode schedule = exprog::SynthesisMode::optimized;
    // The machine the exchange programs are synthesised for; default_topology(devices) when
    // unset.
    std::optional<exprog::Topology> topology;
    int synthesis_iterations = 600; // exprog::SynthesisOptions::iterations
    // What the logical plan minimises: cost — the paper's cost in bytes (logical::optimize);
    // time — whole-plan simulated time on the topology (physical::optimize_for_time: the
    // planner's plan, greedy's, the baselines' and a local search around the fastest, never
    // slower than the cost objective's plan; much slower to compile). restore() needs nothing
    // of it: the record holds the decisions.
    physical::Objective objective = physical::Objective::cost;
    // Set by another thread to stop the compile: compile() then returns Cancelled ("compile
    // cancelled during <stage>") within one step of the compiler's loops (docs/planner.md,
    // "Cancellation"); the backend's prepare(), the last step, is not interrupted. Null = never.
    // Shared so that the canceller may outlive or predate the compile; the plan keeps a copy of
    // the options, so it is released with the plan. Never changes the plan a compile gives, and
    // is part of no plan key or record; restore() ignores it (it runs no search).
    std::shared_ptr<const support::Cancellation> cancellation;
};

// dgx-a100 for up to 8 devices; beyond, a switch of `devices` GPUs with dgx-a100's numbers
// ("switch-<devices>").
exprog::Topology default_topology(int devices);

// The largest relative error (ir::max_relative_error) of a saved output of `dtype` against the
// double-precision reference that the runtime accepts: kernels compute in f32 and tensors are
// stored in their dtype between kernels, so f16 and bf16 outputs carry several roundings.
// f32 (and f64): 1e-5; f16: 1e-2; bf16: 5e-2 (measured margins in docs/runtime.md).
double output_tolerance(ir::DType dtype);

// A graph compiled for a backend (DESIGN.md "The pipeline"): the logical plan, the exchange
// programs, the ExecGraph and the backend's executable, allocated once. Load every input, then
// execute() any number of times, offloading saved outputs in between.
//
// Inputs and outputs are whole tensors, row-major. load()/offload() take f32 values (converted
// to and from the tensor's dtype); the _bytes variants take the dtype's own little-endian bytes.
// Loads and executes of one plan are serialised internally, so concurrent callers are safe
// (each sees a consistent run).
class Plan {
public:
    // Compiles `graph` (validated) for `backend`, which the caller chooses (the daemon's
    // --backend, the CLI's flag) and which must have at least options.devices devices.
    // Cancelled when options.cancellation is set before or during the call.
    static absl::StatusOr<std::unique_ptr<Plan>>
    compile(ir::Graph graph, const CompileOptions& options, std::shared_ptr<Backend> backend);

    // Rebuilds a plan from the record() of a plan compiled from this graph with these options
    // (compiler/physical/plan_record.h), without running the optimiser or the synthesis: every
    // recorded decision is checked against the graph. InvalidArgument naming the operator,
    // tensor or record line when the record does not fit (corrupt, or stale: another graph,
    // device count, planner, schedule, topology or format); otherwise as compile().
    static absl::StatusOr<std::unique_ptr<Plan>> restore(ir::Graph graph,
                                                         const CompileOptions& options,
                                                         absl::string_view record,
                                                         std::shared_ptr<Backend> backend);
    // This plan's decisions as text, for restore(): each operator's intervals, each exchange
    // program with its membership and times.
    std::string record() const;

    // InvalidArgument naming the tensor when it is not a graph input or the size is wrong.
    absl::Status load(absl::string_view name, absl::Span<const float> values);
    absl::Status load_bytes(absl::string_view name, absl::Span<const std::byte> bytes);
    // FailedPrecondition naming the first input never loaded.
    absl::Status execute();
    // NotFound naming the tensor when it is not saved; FailedPrecondition before any execute().
    absl::StatusOr<std::vector<float>> offload(absl::string_view name);
    absl::StatusOr<std::vector<std::byte>> offload_bytes(absl::string_view name);

    // The logical plan, the exchange programs with simulated times, predicted bytes per device
    // pair and peak memory per device.
    std::string explain() const;

    const ir::Graph& graph() const { return graph_; }
    const CompileOptions& options() const { return options_; }
    const logical::LogicalPlan& logical_plan() const { return logical_; }
    const physical::PhysicalPlan& physical_plan() const { return physical_; }
    const physical::ExecGraph& exec_graph() const { return exec_; }
    const Backend& backend() const { return *backend_; }
    // Bytes the backend copied between devices, [src][dst], over all executes so far.
    std::vector<std::vector<int64_t>> bytes_moved() const;
    // Peak bytes per device of the static memory plan (the arenas).
    const std::vector<int64_t>& peak_bytes() const { return exec_.arena_bytes; }
    int64_t executions() const;

private:
    Plan() = default;
    // What compile() and restore() share: the checks of the options, graph and backend, then
    // (finish) lowering and the backend's prepare once the plans are set; finish stops, Cancelled,
    // once `cancellation` (null: never) is set.
    static absl::StatusOr<std::unique_ptr<Plan>>
    start(ir::Graph graph, const CompileOptions& options, std::shared_ptr<Backend> backend);
    absl::Status finish(const support::Cancellation* cancellation = nullptr);
    const ir::GraphTensor* tensor(absl::string_view name) const;

    ir::Graph graph_;
    CompileOptions options_;
    logical::LogicalPlan logical_;
    physical::PhysicalPlan physical_;
    physical::ExecGraph exec_;
    std::shared_ptr<Backend> backend_;
    std::unique_ptr<Executable> executable_;

    mutable std::mutex mutex_; // guards everything below and the executable
    std::set<std::string> loaded_;
    int64_t executions_ = 0;
};

} // namespace einsummable::runtime
