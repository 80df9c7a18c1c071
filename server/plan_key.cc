#include "server/plan_key.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::server {

PlanKey plan_key(const RequestShape& shape, const std::string& topology, int64_t device_memory,
                 const std::string& version) {
    const Model& model = *shape.model;
    const runtime::CompileOptions& options = shape.options;
    PlanKey key;
    key.model = model.name();
    key.graph_fingerprint = model.fingerprint();
    key.dims = shape.bindings;
    key.devices = options.devices;
    key.planner = std::string(logical::planner_name(options.planner));
    // The objective the planner plans by: another planner's plan is the same whatever was asked.
    key.objective = std::string(
        logical::objective_name(logical::planned_objective(options.planner, options.objective)));
    key.seed = options.seed;
    key.schedule = std::string(exprog::synthesis_mode_name(options.schedule));
    key.synthesis_iterations = options.synthesis_iterations;
    key.topology = topology;
    key.device_memory = device_memory;
    key.version = version;
    key.sequence_ends = shape.sequence_ends;
    return key;
}

std::string batch_key(const RequestShape& shape) {
    const runtime::CompileOptions& options = shape.options;
    return absl::StrCat(
        shape.model->id(), " ", bindings_string(shape.bindings), " devices=", options.devices,
        " planner=", logical::planner_name(options.planner), " objective=",
        logical::objective_name(logical::planned_objective(options.planner, options.objective)),
        " seed=", options.seed, " schedule=", exprog::synthesis_mode_name(options.schedule),
        " ends=", absl::StrJoin(shape.sequence_ends, ","));
}

std::string layout_identity(const std::string& model, const std::string& graph_fingerprint,
                            const std::string& version) {
    return absl::StrCat("model=", model, " graph=", graph_fingerprint, " version=", version);
}

} // namespace einsummable::server
