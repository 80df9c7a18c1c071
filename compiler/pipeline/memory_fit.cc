// Pass 5 of the pipeline: the memory fit (passes.h, fit_memory) and the check it makes.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/pipeline/passes.h"
#include "compiler/support/status_macros.h"

namespace einsummable::pipeline {
namespace {

// The device whose need passes `capacity` by the most bytes; null when every one fits.
const DeviceNeed* worst_device(const std::vector<DeviceNeed>& need, int64_t capacity) {
    const DeviceNeed* worst = nullptr;
    for (const DeviceNeed& device : need) {
        if (device.total() > capacity && (worst == nullptr || device.total() > worst->total())) {
            worst = &device;
        }
    }
    return worst;
}

// "device 1 needs 40960 B (weights 16384 B + activations 24576 B) and has 32768 B"
std::string need_text(const DeviceNeed& device, int64_t capacity) {
    return absl::StrCat("device ", device.device, " needs ", device.total(), " B (weights ",
                        device.weights, " B + activations ", device.activations, " B) and has ",
                        capacity, " B");
}

// The graph inputs a plan that does not fit keeps unreplicated: its weights, or every input
// when they name none.
std::set<ir::TensorId> unreplicated_inputs(const ir::Graph& graph, const Options& options) {
    const std::set<std::string> weights = weight_names(options);
    const std::vector<ir::TensorId> inputs = graph.inputs();
    std::set<ir::TensorId> kept;
    for (ir::TensorId id : inputs) {
        if (weights.count(graph.tensor(id).name) > 0) {
            kept.insert(id);
        }
    }
    if (kept.empty()) { // no weights named: keep every input whole
        kept.insert(inputs.begin(), inputs.end());
    }
    return kept;
}

// ResourceExhausted: what the first plan needed (null: it was not measured, having laid a
// layout defined again out otherwise), the inputs planned again unreplicated, and what the plan
// planned again that comes closest needs.
absl::Status no_plan_fits(const ir::Graph& graph, const std::vector<DeviceNeed>* first_need,
                          const std::set<ir::TensorId>& unreplicated,
                          const std::vector<DeviceNeed>& smallest_need, int64_t capacity) {
    std::vector<std::string> names;
    for (ir::TensorId id : unreplicated) {
        names.push_back(graph.tensor(id).name);
    }
    std::string first = "planned with ";
    if (const DeviceNeed* worst =
            first_need == nullptr ? nullptr : worst_device(*first_need, capacity)) {
        first = absl::StrCat(need_text(*worst, capacity), "; planned again with ");
    }
    return absl::ResourceExhaustedError(absl::StrCat(
        "no plan fits in device memory: ", first, absl::StrJoin(names, ", "), " unreplicated, ",
        need_text(*worst_device(smallest_need, capacity), capacity)));
}

// Passes 1 to 4 again with the weights unreplicated, for options.objective and then the bytes
// objective, until a plan fits; see fit_memory.
absl::StatusOr<CompiledPlan> plan_unreplicated(const ir::Graph& graph, const Options& options,
                                               const PassOptions& passes,
                                               const std::vector<DeviceNeed>* first_need) {
    PassOptions again = passes;
    again.planner.unreplicated = unreplicated_inputs(graph, options);
    // A plan by time (the time programme's or the search's) may hold more activations than the
    // bytes objective's: when it does not fit either, the bytes objective plans with the weights
    // unreplicated.
    const logical::Objective asked = logical::planned_objective(options.planner, options.objective);
    std::vector<logical::Objective> objectives = {asked};
    if (asked != logical::Objective::bytes) {
        objectives.push_back(logical::Objective::bytes);
    }
    const int64_t capacity = passes.device_memory_bytes;
    std::vector<DeviceNeed> smallest_need; // of the plans planned again, the one that fits best
    CompiledPlan plan;
    absl::Status fits;
    for (logical::Objective objective : objectives) {
        physical::PhysicalPlan whole_atoms;
        EINSUMMABLE_ASSIGN_OR_RETURN(plan,
                                     plan_and_synthesize(graph, again, objective, &whole_atoms));
        fits = lay_out_and_lower(graph, options, options.cancellation, plan);
        if (fits.ok()) {
            fits = keep_fastest_chunking(graph, options, again, std::move(whole_atoms), plan);
        }
        if (fits.ok()) {
            fits = check_memory(plan.need, capacity);
        }
        if (absl::IsFailedPrecondition(fits)) {
            // Lays the layout it defines again out otherwise: the layout may come from the
            // next objective (a defining compile that fell back to it).
            continue;
        }
        if (fits.ok() || !absl::IsResourceExhausted(fits)) {
            break;
        }
        if (smallest_need.empty() || worst_device(plan.need, capacity)->total() <
                                         worst_device(smallest_need, capacity)->total()) {
            smallest_need = plan.need;
        }
    }
    if (!fits.ok() && !smallest_need.empty()) {
        return no_plan_fits(graph, first_need, again.planner.unreplicated, smallest_need, capacity);
    }
    if (!fits.ok()) {
        return fits;
    }
    plan.weights_unreplicated = true;
    return plan;
}

} // namespace

absl::Status check_memory(const std::vector<DeviceNeed>& need, int64_t capacity) {
    if (capacity <= 0) {
        return absl::OkStatus();
    }
    const DeviceNeed* worst = worst_device(need, capacity);
    if (worst == nullptr) {
        return absl::OkStatus();
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("the plan does not fit in device memory: ", need_text(*worst, capacity)));
}

absl::StatusOr<CompiledPlan> fit_memory(const ir::Graph& graph, const Options& options,
                                        const PassOptions& passes,
                                        absl::StatusOr<CompiledPlan> first) {
    // lay_out_resident's one error: the plan lays a layout it was asked to define again out
    // otherwise. Planned again like a plan that does not fit.
    const bool differs = absl::IsFailedPrecondition(first.status());
    if (!first.ok() && !differs) {
        return first.status();
    }
    const absl::Status fits =
        first.ok() ? check_memory(first->need, passes.device_memory_bytes) : first.status();
    if (fits.ok()) {
        return first;
    }
    // Pinned weights are read where the model's layout put them: a plan is not planned again.
    if (!passes.planner.pinned.empty()) {
        return absl::ResourceExhaustedError(
            absl::StrCat(fits.message(), " (its weights are read where the model's layout put "
                                         "them, so it is not planned again)"));
    }
    return plan_unreplicated(graph, options, passes, first.ok() ? &first->need : nullptr);
}

} // namespace einsummable::pipeline
