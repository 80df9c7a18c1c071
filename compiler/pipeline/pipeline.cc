#include "compiler/pipeline/pipeline.h"

#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/internal_error.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/plan_record.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/pipeline/passes.h"
#include "compiler/support/status_macros.h"

namespace einsummable::pipeline {

exprog::Topology default_topology(int devices) {
    absl::StatusOr<exprog::Topology> a100 = exprog::builtin_topology("dgx-a100");
    EINSUMMABLE_CHECK(a100.ok(), "the built-in dgx-a100 topology must parse");
    if (devices <= a100->num_gpus()) {
        return *std::move(a100);
    }
    absl::StatusOr<exprog::Topology> wide = exprog::Topology::make_switch(
        absl::StrCat("switch-", devices), devices, a100->link_bandwidth(), a100->hbm_bandwidth(),
        a100->latency_s());
    EINSUMMABLE_CHECK(wide.ok(), "a switch with dgx-a100's numbers must be valid");
    absl::StatusOr<exprog::Topology> with_device = wide->with_device(a100->device());
    EINSUMMABLE_CHECK(with_device.ok(), "dgx-a100's device model must be valid");
    return *std::move(with_device);
}

absl::Status check_options(const ir::Graph& graph, const Options& options) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices must be at least 1 (got ", options.devices, ")"));
    }
    if (options.synthesis_iterations < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "synthesis_iterations must be non-negative (got ", options.synthesis_iterations, ")"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(graph.validate());
    // Resident states: the inputs laid out now and those the given layout holds.
    std::set<std::string> resident = options.resident_inputs;
    for (const auto& [id, tensor] :
         physical::pinned_inputs(graph, options.resident, options.devices)) {
        resident.insert(graph.tensor(id).name);
    }
    return physical::resident_states(graph, resident).status();
}

absl::Status check(const ir::Graph& graph, const Options& options, const Machine& machine) {
    EINSUMMABLE_RETURN_IF_ERROR(check_options(graph, options));
    if (machine.devices < options.devices) {
        return absl::InvalidArgumentError(absl::StrCat("the plan needs ", options.devices,
                                                       " devices; the ", machine.backend,
                                                       " backend has ", machine.devices));
    }
    return absl::OkStatus();
}

absl::StatusOr<CompiledPlan> compile(const ir::Graph& graph, const Options& options,
                                     const Machine& machine) {
    EINSUMMABLE_RETURN_IF_ERROR(check(graph, options, machine));
    const PassOptions passes = pass_options(graph, options, machine);
    // 1. plan_by_objective, 2. compile_physical, 3. lay_out_resident, 4. lower_plan.
    absl::StatusOr<CompiledPlan> plan = plan_once(graph, options, passes, options.objective);
    // 5. A plan that does not fit the devices' memory is planned again, unreplicated.
    return fit_memory(graph, options, passes, std::move(plan));
}

absl::StatusOr<ObjectivePlan> plan_logical(const ir::Graph& graph, const Options& options,
                                           const Machine& machine) {
    if (logical::planned_objective(options.planner, options.objective) ==
        logical::Objective::bytes) {
        // It reads no topology, and a default one for many devices takes a while to make.
        return plan_by_bytes(graph, planner_options(graph, options, machine));
    }
    return plan_by_objective(graph, options.objective, pass_options(graph, options, machine));
}

absl::StatusOr<CompiledPlan> restore(const ir::Graph& graph, const Options& options,
                                     const Machine& machine, absl::string_view record) {
    EINSUMMABLE_RETURN_IF_ERROR(check(graph, options, machine));
    // The record's header names the planner, devices and seed it was made with; the plan keeps
    // no cancellation (restore runs no search) and the attention splits of any backend.
    logical::PlannerOptions planner{options.devices, options.planner, options.seed};
    planner.batch_invariant = options.batch_invariant;
    const physical::ResidentLayout* pinned = pinned_layout(options);
    planner.pinned = physical::pinned_tilings(graph, pinned, options.devices);
    const exprog::Topology topology =
        machine.topology ? *machine.topology : default_topology(options.devices);
    EINSUMMABLE_ASSIGN_OR_RETURN(
        physical::RestoredPlan restored,
        physical::restore_plan(graph, planner, topology, options.schedule, record, pinned));
    CompiledPlan plan;
    plan.logical = std::move(restored.logical);
    if (!plan.logical.objective.has_value()) {
        // A record from before records named their objective: the caller found it for this one.
        plan.logical.objective =
            logical::PlanObjective{logical::planned_objective(options.planner, options.objective)};
    }
    plan.physical = std::move(restored.physical);
    EINSUMMABLE_RETURN_IF_ERROR(lay_out_and_lower(graph, options, nullptr, plan));
    // A record made for more memory than this compile has is refused, not run out of memory.
    EINSUMMABLE_RETURN_IF_ERROR(check_memory(plan.need, machine.device_memory_bytes));
    return plan;
}

} // namespace einsummable::pipeline
