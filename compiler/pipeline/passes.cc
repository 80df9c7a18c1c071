#include "compiler/pipeline/passes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/logical/micro_batches.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_dp.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/support/status_macros.h"

namespace einsummable::pipeline {
namespace {

// Seconds between laps.
class Stopwatch {
public:
    double lap() {
        const auto now = std::chrono::steady_clock::now();
        const double seconds = std::chrono::duration<double>(now - start_).count();
        start_ = now;
        return seconds;
    }

private:
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

} // namespace

const physical::ResidentLayout* pinned_layout(const Options& options) {
    return options.resident_defines ? nullptr : options.resident;
}

logical::PlannerOptions planner_options(const ir::Graph& graph, const Options& options,
                                        const Machine& machine) {
    // Every pass polls the one cancellation (compiler/support/cancellation.h); the plan's
    // decisions never depend on it.
    logical::PlannerOptions planner{options.devices, options.planner, options.seed,
                                    options.cancellation};
    // Kept when a plan that does not fit is planned again with its weights unreplicated.
    planner.batch_invariant = options.batch_invariant;
    planner.attention_splits = machine.attention_splits;
    // Pinned inputs: the planner pays for their tiling, the exchanges read them in place.
    planner.pinned = physical::pinned_tilings(graph, pinned_layout(options), options.devices);
    return planner;
}

PassOptions pass_options(const ir::Graph& graph, const Options& options, const Machine& machine) {
    physical::PhysicalOptions physical;
    physical.synthesis.mode = options.schedule;
    physical.synthesis.seed = options.synthesis_seed.value_or(options.seed);
    physical.synthesis.iterations = options.synthesis_iterations;
    physical.synthesis.max_chunks = options.max_chunks.value_or(kDefaultMaxChunks);
    physical.choose_chunking = options.choose_chunking || !options.max_chunks.has_value();
    physical.synthesis.cancellation = options.cancellation;
    physical.cache = options.cache;
    physical.resident = pinned_layout(options);
    return PassOptions{machine.topology ? *machine.topology : default_topology(options.devices),
                       planner_options(graph, options, machine),
                       physical,
                       !options.max_chunks.has_value(),
                       options.micro_batches,
                       options.time_search,
                       machine.device_memory_bytes};
}

physical::PhysicalOptions physical_options(const PassOptions& passes,
                                           logical::Objective objective) {
    physical::PhysicalOptions physical = passes.physical;
    // The search's plans chunk as the time programme's do: it starts from that plan, and must
    // not return one slower than the plan the time objective alone compiles.
    if (passes.chunk_only_by_time &&
        logical::planned_objective(passes.planner.planner, objective) ==
            logical::Objective::bytes) {
        physical.synthesis.max_chunks = 0;
        physical.choose_chunking = false;
    }
    return physical;
}

absl::StatusOr<logical::TimeSearchResult>
optimize_for_time(const ir::Graph& graph, const logical::PlannerOptions& planner,
                  const exprog::Topology& topology, const physical::PhysicalOptions& physical,
                  const logical::TimeSearchOptions& search) {
    // One cancellation for every stage: the planner's, else the synthesis's.
    logical::PlannerOptions options = planner;
    if (options.cancellation == nullptr) {
        options.cancellation = physical.synthesis.cancellation;
    }
    // Every plan tried shares one synthesis cache: most exchanges recur between them.
    physical::SynthesisCache own_cache;
    physical::PhysicalOptions final_options = physical;
    final_options.synthesis.cancellation = options.cancellation;
    if (final_options.cache == nullptr) {
        final_options.cache = &own_cache;
    }
    physical::PhysicalOptions searching = final_options;
    searching.synthesis.iterations =
        std::min(physical.synthesis.iterations, search.search_iterations);
    // Candidates are ranked with whole-atom exchanges: choosing chunks per exchange was four
    // fifths of the search's time. The final comparison chunks as the plan will be built.
    searching.synthesis.max_chunks = 0;
    searching.choose_chunking = false;
    auto time = [&](const logical::LogicalPlan& plan,
                    logical::PlanTiming timing) -> absl::StatusOr<double> {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            physical::SimulatedPlan simulated,
            physical::compile_and_simulate(graph, plan, topology,
                                           timing == logical::PlanTiming::final ? final_options
                                                                                : searching));
        return simulated.simulation.predicted_s;
    };
    return logical::optimize_for_time(graph, options, time, search);
}

absl::StatusOr<ObjectivePlan> plan_by_bytes(const ir::Graph& graph,
                                            const logical::PlannerOptions& planner) {
    EINSUMMABLE_ASSIGN_OR_RETURN(logical::LogicalPlan plan, logical::optimize(graph, planner));
    plan.objective = logical::PlanObjective{logical::Objective::bytes};
    return ObjectivePlan{std::move(plan), std::nullopt};
}

absl::StatusOr<ObjectivePlan>
plan_by_objective(const ir::Graph& graph, logical::Objective objective, const PassOptions& passes) {
    objective = logical::planned_objective(passes.planner.planner, objective);
    if (objective == logical::Objective::bytes) {
        return plan_by_bytes(graph, passes.planner);
    }
    logical::TimePlanReport report;
    EINSUMMABLE_ASSIGN_OR_RETURN(
        logical::LogicalPlan by_time,
        logical::optimize_by_time(graph, passes.planner, passes.topology, &report));
    if (objective == logical::Objective::time) {
        by_time.objective =
            logical::PlanObjective{logical::Objective::time, report.predicted_s, report.origin};
        return ObjectivePlan{std::move(by_time), std::nullopt};
    }
    // The search starts from the time programme's plan too, and simulates plans on the
    // topology with the options the exchanges are compiled with, so the plan it finds is timed
    // as it will be built.
    logical::TimeSearchOptions search = passes.search;
    search.starts.push_back({"time dp", std::move(by_time)});
    EINSUMMABLE_ASSIGN_OR_RETURN(logical::TimeSearchResult found,
                                 optimize_for_time(graph, passes.planner, passes.topology,
                                                   physical_options(passes, objective), search));
    logical::LogicalPlan plan = std::move(found.plan);
    plan.objective =
        logical::PlanObjective{logical::Objective::search, found.predicted_s, found.origin};
    return ObjectivePlan{std::move(plan), static_cast<logical::TimeSearchReport>(found)};
}

absl::StatusOr<std::optional<physical::ResidentLayout>>
lay_out_resident(const ir::Graph& graph, const physical::PhysicalPlan& physical,
                 const Options& options) {
    std::optional<physical::ResidentLayout> defined;
    if (options.resident == nullptr && !options.resident_inputs.empty()) {
        physical::ResidentLayout layout =
            physical::define_resident_layout(graph, physical, options.resident_inputs);
        if (!layout.tensors.empty()) {
            defined = std::move(layout);
        }
    } else if (options.resident != nullptr && options.resident_defines &&
               physical::define_resident_layout(graph, physical, options.resident_inputs) !=
                   *options.resident) {
        return absl::FailedPreconditionError(
            "the plan lays its resident inputs out differently from the resident weights it "
            "was asked to define again");
    }
    return defined;
}

absl::Status lower_plan(const ir::Graph& graph, const Options& options,
                        const support::Cancellation* cancellation, CompiledPlan& plan) {
    const physical::ResidentLayout* layout = options.resident;
    if (layout == nullptr && plan.defined_layout.has_value()) {
        layout = &*plan.defined_layout;
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(plan.exec,
                                 physical::lower(graph, plan.physical, layout, cancellation));
    plan.exec.batch_invariant = options.batch_invariant; // the kernels' half of it
    plan.resident_names.clear();
    for (const auto& [id, tensor] : physical::pinned_inputs(graph, layout, options.devices)) {
        plan.resident_names.insert(graph.tensor(id).name);
    }
    plan.need =
        device_need(plan.exec, layout, plan.resident_names, weight_names(options), options.devices);
    return absl::OkStatus();
}

std::set<std::string> weight_names(const Options& options) {
    std::set<std::string> names = options.weights;
    names.insert(options.resident_inputs.begin(), options.resident_inputs.end());
    if (options.resident != nullptr) {
        for (const auto& [name, tensor] : options.resident->tensors) {
            names.insert(name);
        }
    }
    return names;
}

std::vector<DeviceNeed> device_need(const physical::ExecGraph& exec,
                                    const physical::ResidentLayout* layout,
                                    const std::set<std::string>& resident_names,
                                    const std::set<std::string>& weights, int devices) {
    std::vector<DeviceNeed> need(devices);
    for (int device = 0; device < devices; ++device) {
        need[device].device = device;
        if (!resident_names.empty() && layout != nullptr &&
            device < static_cast<int>(layout->arena_bytes.size())) {
            need[device].resident = layout->arena_bytes[device];
        }
        need[device].weights = need[device].resident;
        if (device < static_cast<int>(exec.arena_bytes.size())) {
            need[device].activations = exec.arena_bytes[device];
        }
    }
    for (const std::string& name : weights) {
        auto it = exec.input_blocks.find(name);
        if (it == exec.input_blocks.end() || resident_names.count(name) > 0) {
            continue;
        }
        for (physical::BufferId id : it->second) {
            const physical::Buffer& buffer = exec.buffers[id];
            if (buffer.device < devices) {
                need[buffer.device].weights += buffer.bytes();
                need[buffer.device].activations -= buffer.bytes();
            }
        }
    }
    return need;
}

absl::StatusOr<CompiledPlan> plan_and_synthesize(const ir::Graph& graph, const PassOptions& passes,
                                                 logical::Objective objective,
                                                 physical::PhysicalPlan* whole_atoms) {
    CompiledPlan plan;
    Stopwatch watch;
    EINSUMMABLE_ASSIGN_OR_RETURN(ObjectivePlan logical,
                                 plan_by_objective(graph, objective, passes));
    plan.seconds.logical = watch.lap();
    plan.logical = std::move(logical.plan);
    plan.search = std::move(logical.search);
    if (passes.micro_batches.has_value()) {
        EINSUMMABLE_RETURN_IF_ERROR(
            logical::micro_batch_plan(graph, *passes.micro_batches, plan.logical));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(plan.physical,
                                 physical::compile_physical(graph, plan.logical, passes.topology,
                                                            physical_options(passes, objective),
                                                            whole_atoms));
    plan.seconds.physical = watch.lap();
    return plan;
}

absl::Status lay_out_and_lower(const ir::Graph& graph, const Options& options,
                               const support::Cancellation* cancellation, CompiledPlan& plan) {
    Stopwatch watch;
    EINSUMMABLE_ASSIGN_OR_RETURN(plan.defined_layout,
                                 lay_out_resident(graph, plan.physical, options));
    EINSUMMABLE_RETURN_IF_ERROR(lower_plan(graph, options, cancellation, plan));
    plan.seconds.lowering = watch.lap();
    return absl::OkStatus();
}

absl::Status keep_fastest_chunking(const ir::Graph& graph, const Options& options,
                                   const PassOptions& passes, physical::PhysicalPlan whole_atoms,
                                   CompiledPlan& plan) {
    const bool chunked =
        std::any_of(plan.physical.operators.begin(), plan.physical.operators.end(),
                    [](const physical::OperatorPlacement& op) {
                        return std::any_of(op.exchanges.begin(), op.exchanges.end(),
                                           [](const physical::Exchange& exchange) {
                                               return exchange.chunked_lowered_s <
                                                      exchange.whole_atoms_lowered_s;
                                           });
                    });
    if (!chunked) {
        return absl::OkStatus();
    }
    Stopwatch watch;
    EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation chosen,
                                 physical::simulate_plan(plan.exec, passes.topology));
    CompiledPlan whole;
    whole.logical = plan.logical;
    whole.physical = std::move(whole_atoms);
    EINSUMMABLE_RETURN_IF_ERROR(lay_out_and_lower(graph, options, options.cancellation, whole));
    EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation simulated,
                                 physical::simulate_plan(whole.exec, passes.topology));
    // Whole atoms on a tie: chunks only where they pay.
    if (simulated.predicted_s <= chosen.predicted_s) {
        whole.search = std::move(plan.search);
        whole.seconds = plan.seconds;
        plan = std::move(whole);
    }
    plan.seconds.physical += watch.lap();
    return absl::OkStatus();
}

absl::Status keep_fastest_micro_batches(const ir::Graph& graph, const Options& options,
                                        const PassOptions& passes, logical::Objective objective,
                                        CompiledPlan& plan) {
    if (passes.micro_batches.has_value() || options.batch_invariant ||
        logical::planned_objective(passes.planner.planner, objective) ==
            logical::Objective::bytes) {
        return absl::OkStatus();
    }
    Stopwatch watch;
    // The plan cut with `weights`; nullopt where no cut pays.
    auto cut = [&](const std::vector<int>& weights)
        -> absl::StatusOr<std::optional<logical::LogicalPlan>> {
        logical::LogicalPlan batched = plan.logical;
        EINSUMMABLE_RETURN_IF_ERROR(logical::micro_batch_plan(graph, weights, batched));
        if (std::all_of(batched.operators.begin(), batched.operators.end(),
                        [](const logical::OperatorPlan& op) { return op.groups.empty(); })) {
            return std::nullopt;
        }
        return batched;
    };
    // Nothing to try where no operator has token rows to cut (a matrix chain).
    EINSUMMABLE_ASSIGN_OR_RETURN(std::optional<logical::LogicalPlan> halves,
                                 cut(logical::equal_micro_batches(2)));
    if (!halves.has_value()) {
        return absl::OkStatus();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation simulated,
                                 physical::simulate_plan(plan.exec, passes.topology));
    double computed = 0.0; // when the last node ends; the rest is the delivery
    for (size_t n = 0; n < plan.exec.nodes.size() && n < simulated.result.trace.size(); ++n) {
        computed = std::max(computed, simulated.result.trace[n].end);
    }
    const double delivery = simulated.predicted_s - computed;
    if (delivery <= 0.01 * simulated.predicted_s) {
        return absl::OkStatus();
    }
    std::vector<logical::LogicalPlan> tries = {*std::move(halves)};
    const int last = static_cast<int>(std::clamp(std::round(computed / delivery), 1.0, 64.0));
    if (last > 1) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::optional<logical::LogicalPlan> small_last,
                                     cut({last, 1}));
        if (small_last.has_value()) {
            tries.push_back(*std::move(small_last));
        }
    }
    double best = simulated.predicted_s;
    for (logical::LogicalPlan& logical : tries) {
        CompiledPlan batched;
        batched.logical = std::move(logical);
        EINSUMMABLE_ASSIGN_OR_RETURN(
            batched.physical, physical::compile_physical(graph, batched.logical, passes.topology,
                                                         physical_options(passes, objective)));
        EINSUMMABLE_RETURN_IF_ERROR(
            lay_out_and_lower(graph, options, options.cancellation, batched));
        EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation timed,
                                     physical::simulate_plan(batched.exec, passes.topology));
        if (timed.predicted_s < best) {
            best = timed.predicted_s;
            batched.search = plan.search;
            batched.seconds = plan.seconds;
            plan = std::move(batched);
        }
    }
    plan.seconds.physical += watch.lap();
    return absl::OkStatus();
}

absl::Status keep_faster_than_time(const ir::Graph& graph, const Options& options,
                                   const PassOptions& passes, CompiledPlan& plan) {
    EINSUMMABLE_ASSIGN_OR_RETURN(CompiledPlan by_time,
                                 plan_once(graph, options, passes, logical::Objective::time));
    EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation searched,
                                 physical::simulate_plan(plan.exec, passes.topology));
    EINSUMMABLE_ASSIGN_OR_RETURN(const physical::PlanSimulation timed,
                                 physical::simulate_plan(by_time.exec, passes.topology));
    if (timed.predicted_s < searched.predicted_s) {
        by_time.logical.objective =
            logical::PlanObjective{logical::Objective::search, timed.predicted_s, "time dp"};
        by_time.search = std::move(plan.search);
        by_time.seconds.logical += plan.seconds.logical;
        by_time.seconds.physical += plan.seconds.physical;
        by_time.seconds.lowering += plan.seconds.lowering;
        plan = std::move(by_time);
    }
    return absl::OkStatus();
}

absl::StatusOr<CompiledPlan> plan_once(const ir::Graph& graph, const Options& options,
                                       const PassOptions& passes, logical::Objective objective) {
    physical::PhysicalPlan whole_atoms;
    EINSUMMABLE_ASSIGN_OR_RETURN(CompiledPlan plan,
                                 plan_and_synthesize(graph, passes, objective, &whole_atoms));
    EINSUMMABLE_RETURN_IF_ERROR(lay_out_and_lower(graph, options, options.cancellation, plan));
    EINSUMMABLE_RETURN_IF_ERROR(
        keep_fastest_chunking(graph, options, passes, std::move(whole_atoms), plan));
    EINSUMMABLE_RETURN_IF_ERROR(
        keep_fastest_micro_batches(graph, options, passes, objective, plan));
    if (logical::planned_objective(passes.planner.planner, objective) ==
        logical::Objective::search) {
        EINSUMMABLE_RETURN_IF_ERROR(keep_faster_than_time(graph, options, passes, plan));
    }
    return plan;
}

} // namespace einsummable::pipeline
