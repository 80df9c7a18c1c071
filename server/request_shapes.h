#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "einsummable/v1/service.pb.h"
#include "proto/graph_def.h"
#include "runtime/plan.h"
#include "server/engine_settings.h"
#include "server/model.h"

// Request shapes and their validation: what a Compile, Execute or Explain asks for — its model,
// dims, options and sequence ends — checked against the model and the server's limits, with
// its graph built and bounded, before any plan is looked for. Errors are InvalidArgument naming
// the field at fault, or ResourceExhausted naming the limit (and its flag) a request is over;
// they begin "model '<name>' with <bindings>: " where the fault is in the graph built.
namespace einsummable::server {

// What a request runs: its model, options, bindings and sequence ends checked, and the graph
// built and bounded; no plan yet.
struct RequestShape {
    std::shared_ptr<const Model> model;
    runtime::CompileOptions options;
    graphdef::Bindings bindings;
    // A model with batching: the sequences' ends along its batch dimension (PlanKey); empty for
    // other models.
    std::vector<int64_t> sequence_ends;
    ir::Graph graph;
};

// The request's options as runtime options on a server of `server_devices` devices and
// `topology` (devices 0: all of them); InvalidArgument naming the option.
absl::StatusOr<runtime::CompileOptions> compile_options(const v1::CompileOptions& wire,
                                                        int server_devices,
                                                        const exprog::Topology& topology,
                                                        int synthesis_iterations);

// The request's inputs as their own wire type (Execute's), for binding symbols from shapes.
using WireInputs = google::protobuf::RepeatedPtrField<v1::NamedTensor>;

// The request's dims as bindings: every symbol of the model bound, nothing else, sizes in
// [1, kMaxDimensionSize].
absl::StatusOr<graphdef::Bindings>
bindings_for(const Model& model, const google::protobuf::Map<std::string, int64_t>& dims);
// The same, with the symbols the inputs' shapes say bound from them: a symbolic dimension of an
// input of the model binds its symbol to the size given. `dims` may still bind any symbol, and
// must then agree with every input that binds it, as inputs must agree among themselves
// (InvalidArgument naming the symbol, the input, its dimension and both sizes). Inputs that
// cannot bind (not an input of the model, a weight, a rank other than the graph's, given twice)
// are left to execute_outputs' checks, which name what is wrong with them.
absl::StatusOr<graphdef::Bindings>
bindings_for(const Model& model, const google::protobuf::Map<std::string, int64_t>& dims,
             const WireInputs& inputs);

// The request's sequence_ends, checked against the model and its bindings: one sequence when
// none are given for a model with batching; none for other models (which may not give any).
// At most `max_sequence_ends` entries (ResourceExhausted).
absl::StatusOr<std::vector<int64_t>>
sequence_ends_for(const Model& model, const graphdef::Bindings& bindings,
                  const google::protobuf::RepeatedField<int64_t>& wire, int64_t max_sequence_ends);

// "d=64, tokens=128", or "no symbols".
std::string bindings_string(const graphdef::Bindings& bindings);
// "a, b", or "none".
std::string names_or_none(const std::vector<std::string>& names);

// Shapes requests for one server: its devices, topology and settings (the limits).
class RequestShapes {
public:
    RequestShapes(int devices, exprog::Topology topology, const EngineSettings& settings);

    // The request's shape: options, bindings (bindings_for) and sequence ends
    // (sequence_ends_for) checked, then shape_with.
    absl::StatusOr<RequestShape>
    shape(std::shared_ptr<const Model> model,
          const google::protobuf::Map<std::string, int64_t>& dims,
          const v1::CompileOptions& options,
          const google::protobuf::RepeatedField<int64_t>& sequence_ends) const;
    // The same for an Execute: its inputs' shapes bind symbols too (bindings_for with inputs).
    absl::StatusOr<RequestShape>
    shape(std::shared_ptr<const Model> model,
          const google::protobuf::Map<std::string, int64_t>& dims, const WireInputs& inputs,
          const v1::CompileOptions& options,
          const google::protobuf::RepeatedField<int64_t>& sequence_ends) const;
    // A model's registered compile options (v1::RegisterModelRequest::options) checked as a
    // request's are: InvalidArgument "model 'm': options.planner: ...".
    absl::Status check_model_options(const std::string& model,
                                     const v1::CompileOptions& options) const;
    // Options checked, the graph built with checked `bindings` and `sequence_ends`, and bounded:
    // every input before it is built, then operators × devices and every tensor
    // (--max_operator_devices, --max_tensor_bytes).
    absl::StatusOr<RequestShape> shape_with(std::shared_ptr<const Model> model,
                                            graphdef::Bindings bindings,
                                            const v1::CompileOptions& options,
                                            std::vector<int64_t> sequence_ends) const;
    // Execute's checks against the graph of its shape: weights uploaded, inputs (named once,
    // each an input and not a weight, with the graph's dtype, shape and size), outputs (saved
    // tensors, named once) and the reply's size (--max_message_bytes). The outputs to return,
    // in order: those asked for, or every saved tensor.
    absl::StatusOr<std::vector<std::string>> execute_outputs(const v1::ExecuteRequest& req,
                                                             const Model& model,
                                                             const ir::Graph& graph) const;

private:
    const int devices_;
    const exprog::Topology topology_;
    const EngineSettings settings_;
};

} // namespace einsummable::server
