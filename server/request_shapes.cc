#include "server/request_shapes.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/support/status_macros.h"
#include "server/request_errors.h"
#include "server/tensor_limits.h"

namespace einsummable::server {
namespace {

// Execute's inputs: named once each, inputs of the graph and not weights, with the graph's
// dtype, shape and size; every input of the model given.
absl::Status check_execute_inputs(const v1::ExecuteRequest& req, const Model& model,
                                  const ir::Graph& graph) {
    std::set<std::string> given;
    for (const v1::NamedTensor& named : req.inputs()) {
        const std::string& name = named.name();
        if (model.is_weight(name)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input ", graphdef::quote_name(name), " is a weight of model '", model.name(),
                "'; weights are uploaded with UploadTensor, not sent with "
                "Execute"));
        }
        std::optional<ir::TensorId> id = graph.find_tensor(name);
        if (!id || !graph.tensor(*id).is_input()) {
            return absl::InvalidArgumentError(
                absl::StrCat(graphdef::quote_name(name), " is not an input of model '",
                             model.name(), "' (inputs: ", names_or_none(model.inputs()), ")"));
        }
        if (!given.insert(name).second) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is given twice"));
        }
        const ir::TensorType& type = graph.tensor(*id).type;
        const v1::Tensor& tensor = named.tensor();
        if (to_wire_dtype(type.dtype) != tensor.dtype()) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", name, "' is ", ir::dtype_name(type.dtype), " (",
                             type.to_string(), "); got ", wire_dtype_name(tensor.dtype())));
        }
        const std::vector<int64_t> shape = type.shape();
        if (!std::equal(shape.begin(), shape.end(), tensor.shape().begin(), tensor.shape().end())) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input '", name, "' has shape ", shape_string(shape), " (", type.to_string(),
                "); got ",
                shape_string({tensor.shape().data(), static_cast<size_t>(tensor.shape_size())})));
        }
        if (static_cast<int64_t>(tensor.data().size()) != type.bytes()) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' ", type.to_string(),
                                                           " takes ", type.bytes(), " bytes; got ",
                                                           tensor.data().size()));
        }
        // Values an operator cannot take (embedding ids outside the table) fail this request
        // alone, before it can join a batch.
        EINSUMMABLE_RETURN_IF_ERROR(ir::check_input_values(
            graph, *id,
            {reinterpret_cast<const std::byte*>(tensor.data().data()), tensor.data().size()}));
    }
    for (const std::string& input : model.inputs()) {
        if (!given.count(input)) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", input, "' of model '", model.name(),
                             "' is missing (inputs: ", names_or_none(model.inputs()), ")"));
        }
    }
    return absl::OkStatus();
}

// The outputs Execute asks for, saved tensors named once each; every saved tensor when it asks
// for none.
absl::StatusOr<std::vector<std::string>>
requested_outputs(const v1::ExecuteRequest& req, const Model& model, const ir::Graph& graph) {
    std::vector<std::string> outputs;
    std::set<std::string> requested;
    for (const std::string& output : req.outputs()) {
        std::optional<ir::TensorId> id = graph.find_tensor(output);
        if (!id || !graph.tensor(*id).saved) {
            return absl::InvalidArgumentError(absl::StrCat(
                "output ", graphdef::quote_name(output), " is not a saved tensor of model '",
                model.name(), "' (saved: ", names_or_none(model.saved()), ")"));
        }
        if (!requested.insert(output).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("output '", output, "' is requested twice"));
        }
        outputs.push_back(output);
    }
    if (outputs.empty()) {
        for (ir::TensorId id : graph.saved()) {
            outputs.push_back(graph.tensor(id).name);
        }
    }
    return outputs;
}

// The graph's description of `name` when it is an input Execute takes (not a weight).
const v1::TensorDesc* execute_input_desc(const Model& model, const std::string& name) {
    if (model.is_weight(name)) {
        return nullptr;
    }
    for (const v1::TensorDesc& desc : model.graph_def().inputs()) {
        if (desc.name() == name) {
            return &desc;
        }
    }
    return nullptr;
}

// Binds, into `bindings` (which holds the request's dims), the symbols of the inputs' symbolic
// dimensions to the sizes their shapes give; every binding must agree with the dims and with
// the inputs before it.
absl::Status bind_from_inputs(const Model& model, const WireInputs& inputs,
                              graphdef::Bindings& bindings) {
    // Where each symbol bound here came from: the input and its dimension.
    std::map<std::string, std::string> bound_by;
    std::set<std::string> seen;
    for (const v1::NamedTensor& named : inputs) {
        const v1::TensorDesc* desc = execute_input_desc(model, named.name());
        const v1::Tensor& tensor = named.tensor();
        if (desc == nullptr || !seen.insert(named.name()).second ||
            tensor.shape_size() != desc->dims_size()) {
            continue;
        }
        for (int d = 0; d < desc->dims_size(); ++d) {
            const v1::Dimension& dim = desc->dims(d);
            if (!dim.has_symbol()) {
                continue;
            }
            const std::string& symbol = dim.symbol();
            const int64_t size = tensor.shape(d);
            const std::string where =
                absl::StrCat("input ", graphdef::quote_name(named.name()), " dimension ", d,
                             dim.name().empty() ? "" : absl::StrCat(" ('", dim.name(), "')"));
            if (size <= 0 || size > kMaxDimensionSize) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, " binds symbol '", symbol, "' to ", size,
                                 "; sizes must be between 1 and ", kMaxDimensionSize));
            }
            auto [it, inserted] = bindings.try_emplace(symbol, size);
            if (inserted) {
                bound_by[symbol] = where;
                continue;
            }
            if (it->second == size) {
                continue;
            }
            auto by = bound_by.find(symbol);
            if (by == bound_by.end()) {
                return absl::InvalidArgumentError(absl::StrCat("dims: symbol '", symbol,
                                                               "' is bound to ", it->second,
                                                               ", but ", where, " is ", size));
            }
            return absl::InvalidArgumentError(absl::StrCat(where, " binds symbol '", symbol,
                                                           "' to ", size, ", but ", by->second,
                                                           " binds it to ", it->second));
        }
    }
    return absl::OkStatus();
}

} // namespace

std::string bindings_string(const graphdef::Bindings& bindings) {
    if (bindings.empty()) {
        return "no symbols";
    }
    return absl::StrJoin(bindings, ", ", [](std::string* out, const auto& binding) {
        absl::StrAppend(out, binding.first, "=", binding.second);
    });
}

std::string names_or_none(const std::vector<std::string>& names) {
    return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::StatusOr<runtime::CompileOptions> compile_options(const v1::CompileOptions& wire,
                                                        int server_devices,
                                                        const exprog::Topology& topology,
                                                        int synthesis_iterations) {
    runtime::CompileOptions options;
    options.devices = wire.devices() == 0 ? server_devices : wire.devices();
    if (wire.devices() < 0 || options.devices > server_devices) {
        return absl::InvalidArgumentError(absl::StrCat("options.devices: ", wire.devices(),
                                                       " is not between 1 and the server's ",
                                                       server_devices, " devices (0 = all)"));
    }
    if (!wire.planner().empty()) {
        absl::StatusOr<logical::Planner> planner = logical::parse_planner(wire.planner());
        if (!planner.ok()) {
            std::vector<absl::string_view> names;
            for (logical::Planner known : logical::all_planners()) {
                names.push_back(logical::planner_name(known));
            }
            return absl::InvalidArgumentError(absl::StrCat("options.planner: '", wire.planner(),
                                                           "' is not a planner (",
                                                           absl::StrJoin(names, ", "), ")"));
        }
        options.planner = *planner;
    }
    if (!wire.schedule().empty()) {
        absl::StatusOr<exprog::SynthesisMode> mode = exprog::parse_synthesis_mode(wire.schedule());
        if (!mode.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("options.schedule: '", wire.schedule(),
                             "' is not a schedule (optimized, naive, ai)"));
        }
        options.schedule = *mode;
    }
    // Empty: the default objective (time). "cost" is the old clients' name of bytes.
    if (!wire.objective().empty()) {
        absl::StatusOr<logical::Objective> objective = logical::parse_objective(wire.objective());
        if (!objective.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("options.objective: '", wire.objective(),
                             "' is not an objective (bytes, time, search; cost means bytes)"));
        }
        options.objective = *objective;
    }
    options.seed = wire.seed();
    options.topology = topology;
    options.synthesis_iterations = synthesis_iterations;
    return options;
}

absl::StatusOr<graphdef::Bindings>
bindings_for(const Model& model, const google::protobuf::Map<std::string, int64_t>& dims) {
    return bindings_for(model, dims, WireInputs());
}

absl::StatusOr<graphdef::Bindings>
bindings_for(const Model& model, const google::protobuf::Map<std::string, int64_t>& dims,
             const WireInputs& inputs) {
    graphdef::Bindings bindings;
    const std::set<std::string> symbols(model.symbols().begin(), model.symbols().end());
    for (const auto& [symbol, size] : dims) {
        if (!symbols.count(symbol)) {
            return absl::InvalidArgumentError(
                absl::StrCat("dims: '", symbol, "' is not a symbol of model '", model.name(),
                             "' (symbols: ", names_or_none(model.symbols()), ")"));
        }
        if (size <= 0 || size > kMaxDimensionSize) {
            return absl::InvalidArgumentError(
                absl::StrCat("dims: symbol '", symbol, "' is bound to ", size,
                             "; sizes must be between 1 and ", kMaxDimensionSize));
        }
        bindings[symbol] = size;
    }
    EINSUMMABLE_RETURN_IF_ERROR(bind_from_inputs(model, inputs, bindings));
    for (const std::string& symbol : model.symbols()) {
        if (!bindings.count(symbol)) {
            return absl::InvalidArgumentError(absl::StrCat("dims: symbol '", symbol, "' of model '",
                                                           model.name(), "' is not bound"));
        }
    }
    return bindings;
}

absl::StatusOr<std::vector<int64_t>>
sequence_ends_for(const Model& model, const graphdef::Bindings& bindings,
                  const google::protobuf::RepeatedField<int64_t>& wire, int64_t max_sequence_ends) {
    if (!model.batching()) {
        if (!wire.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "sequence_ends: model '", model.name(),
                "' has no batching (RegisterModelRequest.batching); its attention and rope take "
                "their sequence ends from the graph"));
        }
        return std::vector<int64_t>();
    }
    const int64_t length = bindings.at(model.batching()->symbol);
    if (wire.empty()) {
        return std::vector<int64_t>{length};
    }
    if (wire.size() > max_sequence_ends) {
        return absl::ResourceExhaustedError(
            absl::StrCat("sequence_ends: ", wire.size(), " entries; the server accepts at most ",
                         max_sequence_ends, " (--max_sequence_ends)"));
    }
    std::vector<int64_t> ends(wire.begin(), wire.end());
    for (size_t k = 0; k < ends.size(); ++k) {
        const int64_t previous = k == 0 ? 0 : ends[k - 1];
        if (ends[k] <= previous || ends[k] > length) {
            return absl::InvalidArgumentError(
                absl::StrCat("sequence_ends: entry ", k, " (", ends[k], ") must be greater than ",
                             k == 0 ? "0" : absl::StrCat("entry ", k - 1, " (", previous, ")"),
                             " and at most '", model.batching()->symbol, "' = ", length));
        }
    }
    if (ends.back() != length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence_ends: the last entry (", ends.back(), ") must be '", model.batching()->symbol,
            "' = ", length, ": the sequences cover the request"));
    }
    return ends;
}

RequestShapes::RequestShapes(int devices, exprog::Topology topology, const EngineSettings& settings)
    : devices_(devices), topology_(std::move(topology)), settings_(settings) {}

absl::StatusOr<RequestShape>
RequestShapes::shape(std::shared_ptr<const Model> model,
                     const google::protobuf::Map<std::string, int64_t>& dims,
                     const v1::CompileOptions& options,
                     const google::protobuf::RepeatedField<int64_t>& sequence_ends) const {
    return shape(std::move(model), dims, WireInputs(), options, sequence_ends);
}

absl::StatusOr<RequestShape>
RequestShapes::shape(std::shared_ptr<const Model> model,
                     const google::protobuf::Map<std::string, int64_t>& dims,
                     const WireInputs& inputs, const v1::CompileOptions& options,
                     const google::protobuf::RepeatedField<int64_t>& sequence_ends) const {
    EINSUMMABLE_ASSIGN_OR_RETURN(graphdef::Bindings bindings, bindings_for(*model, dims, inputs));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::vector<int64_t> ends,
        sequence_ends_for(*model, bindings, sequence_ends, settings_.max_sequence_ends));
    return shape_with(std::move(model), std::move(bindings), options, std::move(ends));
}

absl::Status RequestShapes::check_model_options(const std::string& model,
                                                const v1::CompileOptions& options) const {
    absl::StatusOr<runtime::CompileOptions> checked =
        compile_options(options, devices_, topology_, settings_.synthesis_iterations);
    if (!checked.ok()) {
        return absl::Status(checked.status().code(),
                            absl::StrCat("model '", model, "': ", checked.status().message()));
    }
    return absl::OkStatus();
}

absl::StatusOr<RequestShape> RequestShapes::shape_with(std::shared_ptr<const Model> model,
                                                       graphdef::Bindings bindings,
                                                       const v1::CompileOptions& wire_options,
                                                       std::vector<int64_t> sequence_ends) const {
    // The request's options over the model's: a field the request sets wins (proto3 MergeFrom
    // copies the fields that are not 0 or empty).
    v1::CompileOptions merged = model->options();
    merged.MergeFrom(wire_options);
    EINSUMMABLE_ASSIGN_OR_RETURN(
        runtime::CompileOptions options,
        compile_options(merged, devices_, topology_, settings_.synthesis_iterations));
    const std::string where =
        absl::StrCat("model '", model->name(), "' with ", bindings_string(bindings), ": ");
    // Bound every input before the ir multiplies sizes, then every tensor of the graph.
    for (const v1::TensorDesc& input : model->graph_def().inputs()) {
        absl::StatusOr<int64_t> bytes = input_bytes(input, bindings);
        if (!bytes.ok()) {
            return with_prefix(bytes.status(), where);
        }
    }
    absl::StatusOr<ir::Graph> graph = model->build(bindings, sequence_ends);
    if (!graph.ok()) {
        return with_prefix(graph.status(), where);
    }
    if (absl::Status status =
            check_operator_devices(static_cast<int64_t>(graph->nodes().size()), options.devices,
                                   settings_.max_operator_devices);
        !status.ok()) {
        return with_prefix(status, where);
    }
    for (const ir::GraphTensor& tensor : graph->tensors()) {
        absl::StatusOr<int64_t> bytes = checked_bytes(absl::StrCat("tensor '", tensor.name, "'"),
                                                      tensor.type.shape(), tensor.type.dtype);
        if (!bytes.ok()) {
            return with_prefix(bytes.status(), where);
        }
        if (*bytes > settings_.max_tensor_bytes) {
            return absl::ResourceExhaustedError(
                absl::StrCat(where, "tensor '", tensor.name, "' ", tensor.type.to_string(),
                             " takes ", *bytes, " bytes; the server accepts tensors of at most ",
                             settings_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
        }
    }
    return RequestShape{std::move(model), std::move(options), std::move(bindings),
                        std::move(sequence_ends), *std::move(graph)};
}

absl::StatusOr<std::vector<std::string>>
RequestShapes::execute_outputs(const v1::ExecuteRequest& req, const Model& model,
                               const ir::Graph& graph) const {
    if (std::optional<std::string> missing = model.missing_weight()) {
        return absl::FailedPreconditionError(
            absl::StrCat("weight '", *missing, "' of model '", model.name(),
                         "' has not been uploaded (UploadTensor)"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_execute_inputs(req, model, graph));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::string> outputs,
                                 requested_outputs(req, model, graph));
    int64_t reply_bytes = 0;
    for (const std::string& output : outputs) {
        reply_bytes += graph.tensor(*graph.find_tensor(output)).type.bytes();
    }
    if (reply_bytes > settings_.max_message_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the outputs (", absl::StrJoin(outputs, ", "), ") take ", reply_bytes,
                         " bytes; a reply may take at most ", settings_.max_message_bytes,
                         " (--max_message_bytes)"));
    }
    return outputs;
}

} // namespace einsummable::server
