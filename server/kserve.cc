#include "server/kserve.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/support/status_macros.h"
#include "server/model_store.h"

namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;

// NotFound unless `version` names the model's one version ("" = the server's choice).
absl::Status check_version(const Model& model, absl::string_view version) {
    const std::string served = kserve_model_version(model);
    if (version.empty() || version == served) {
        return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat("model '", model.name(), "' has no version '", version,
                                            "' (versions: ", served, ")"));
}

void add_metadata(
    const TensorSignature& signature,
    google::protobuf::RepeatedPtrField<inference::ModelMetadataResponse::TensorMetadata>* out) {
    inference::ModelMetadataResponse::TensorMetadata* tensor = out->Add();
    tensor->set_name(signature.name);
    tensor->set_datatype(kserve_datatype(signature.dtype));
    for (int64_t size : signature.shape) {
        tensor->add_shape(size);
    }
}

// The smallest key of a parameter map (protobuf maps iterate in no fixed order; an error should
// name the same parameter every time).
std::string first_key(const google::protobuf::Map<std::string, inference::InferParameter>& map) {
    std::string first;
    for (const auto& [key, value] : map) {
        if (first.empty() || key < first) {
            first = key;
        }
    }
    return first;
}

// A parameter's value as an error message shows it: "string_param 'two'".
std::string value_string(const inference::InferParameter& value) {
    switch (value.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
        return absl::StrCat("bool_param ", value.bool_param() ? "true" : "false");
    case inference::InferParameter::kInt64Param:
        return absl::StrCat("int64_param ", value.int64_param());
    case inference::InferParameter::kStringParam:
        return absl::StrCat("string_param '", absl::CHexEscape(value.string_param().substr(0, 64)),
                            value.string_param().size() > 64 ? "...'" : "'");
    case inference::InferParameter::kDoubleParam:
        return absl::StrCat("double_param ", value.double_param());
    case inference::InferParameter::kUint64Param:
        return absl::StrCat("uint64_param ", value.uint64_param());
    case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
        break;
    }
    return "no value";
}

// An integer parameter's value: int64 or (Triton's) uint64; InvalidArgument naming it and the
// value otherwise.
absl::StatusOr<int64_t> int_parameter(const std::string& name,
                                      const inference::InferParameter& value) {
    switch (value.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param:
        return value.int64_param();
    case inference::InferParameter::kUint64Param:
        if (value.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
            return static_cast<int64_t>(value.uint64_param());
        }
        break;
    default:
        break;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "parameter '", name, "' must be an integer (int64_param); got ", value_string(value)));
}

// The `timeout` parameter, in microseconds: an integer at least 0. A uint64 beyond int64's range
// saturates to INT64_MAX (kserve_model_infer then adds no deadline of its own: the call's own
// still applies). InvalidArgument naming the parameter and its value otherwise.
absl::StatusOr<int64_t> timeout_parameter(const inference::InferParameter& value) {
    if (value.parameter_choice_case() == inference::InferParameter::kUint64Param) {
        return static_cast<int64_t>(
            std::min<uint64_t>(value.uint64_param(), static_cast<uint64_t>(INT64_MAX)));
    }
    absl::StatusOr<int64_t> micros = int_parameter("timeout", value);
    if (micros.ok() && *micros < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter 'timeout': ", *micros, " is negative; expected microseconds, at least 0"));
    }
    return micros;
}

absl::StatusOr<bool> bool_parameter(const std::string& name,
                                    const inference::InferParameter& value) {
    if (value.parameter_choice_case() != inference::InferParameter::kBoolParam) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", name, "' must be a bool (bool_param); got ", value_string(value)));
    }
    return value.bool_param();
}

absl::StatusOr<std::string> string_parameter(const std::string& name,
                                             const inference::InferParameter& value) {
    if (value.parameter_choice_case() != inference::InferParameter::kStringParam) {
        return absl::InvalidArgumentError(
            absl::StrCat("parameter '", name, "' must be a string (string_param)"));
    }
    return value.string_param();
}

// "5,14,17" as integers; InvalidArgument naming the entry that is not one.
absl::Status read_sequence_ends(const std::string& text, v1::ExecuteRequest& execute) {
    for (absl::string_view entry : absl::StrSplit(text, ',')) {
        entry = absl::StripAsciiWhitespace(entry);
        int64_t end = 0;
        if (!absl::SimpleAtoi(entry, &end)) {
            return absl::InvalidArgumentError(
                absl::StrCat("parameter 'sequence_ends': '", entry,
                             "' is not an integer; expected the ends of the packed sequences, "
                             "e.g. \"5,14,17\""));
        }
        execute.add_sequence_ends(end);
    }
    return absl::OkStatus();
}

// The request parameters into `execute`'s options and sequence ends; see
// kserve_execute_request.
absl::Status read_parameters(const Model& model, const inference::ModelInferRequest& req,
                             v1::ExecuteRequest& execute) {
    v1::CompileOptions& options = *execute.mutable_options();
    // Sorted, so the first bad parameter named is the same on every run.
    const std::map<std::string, inference::InferParameter> parameters(req.parameters().begin(),
                                                                      req.parameters().end());
    for (const auto& [name, value] : parameters) {
        if (name == "devices") {
            EINSUMMABLE_ASSIGN_OR_RETURN(int64_t devices, int_parameter(name, value));
            if (devices < 0 || devices > INT32_MAX) {
                return absl::InvalidArgumentError(
                    absl::StrCat("parameter 'devices': ", devices, " is not a device count"));
            }
            options.set_devices(static_cast<int32_t>(devices));
        } else if (name == "planner" || name == "objective" || name == "schedule") {
            EINSUMMABLE_ASSIGN_OR_RETURN(std::string text, string_parameter(name, value));
            if (name == "planner") {
                options.set_planner(text);
            } else if (name == "objective") {
                options.set_objective(text);
            } else {
                options.set_schedule(text);
            }
        } else if (name == "seed") {
            EINSUMMABLE_ASSIGN_OR_RETURN(int64_t seed, int_parameter(name, value));
            options.set_seed(static_cast<uint64_t>(seed));
        } else if (name == "sequence_ends") {
            EINSUMMABLE_ASSIGN_OR_RETURN(std::string text, string_parameter(name, value));
            EINSUMMABLE_RETURN_IF_ERROR(read_sequence_ends(text, execute));
        } else if (name == "timeout") {
            EINSUMMABLE_RETURN_IF_ERROR(timeout_parameter(value));
        } else if (name == kTritonEnableEmptyFinalResponse) {
            // Asks a streaming call for an empty last response; ModelInfer answers once, so
            // there is nothing to honour beyond the type (Triton's unary handler ignores it too).
            EINSUMMABLE_RETURN_IF_ERROR(bool_parameter(name, value));
        } else if (absl::StartsWith(name, kTritonParameterPrefix)) {
            // As Triton: the prefix is reserved for parameters Triton defines, and one it does
            // not know is refused rather than ignored (it may be a newer client's request).
            return absl::InvalidArgumentError(absl::StrCat(
                "parameter '", name, "': names starting with '", kTritonParameterPrefix,
                "' are reserved for Triton; einsummabled accepts only ",
                kTritonEnableEmptyFinalResponse));
        } else if (name != "priority") {
            return absl::InvalidArgumentError(
                absl::StrCat("parameter '", name, "' is not supported by model '", model.name(),
                             "' (parameters: devices, planner, objective, schedule, seed, "
                             "sequence_ends, timeout, priority, ",
                             kTritonEnableEmptyFinalResponse, ")"));
        }
    }
    return absl::OkStatus();
}

// The data of input `index` as little-endian bytes: raw_input_contents[index] or the typed
// contents field of its datatype.
absl::StatusOr<std::string> input_data(const inference::ModelInferRequest& req, int index,
                                       v1::DType dtype) {
    if (req.raw_input_contents_size() > 0) {
        return req.raw_input_contents(index);
    }
    const inference::ModelInferRequest::InferInputTensor& input = req.inputs(index);
    const inference::InferTensorContents& contents = input.contents();
    // Values in a contents field of another type would otherwise be ignored, and the input
    // reported short of bytes ("takes 2048 bytes; got 0"), which hides the real mistake.
    const char* expected = dtype == v1::F32   ? "fp32_contents"
                           : dtype == v1::F64 ? "fp64_contents"
                           : dtype == v1::I32 ? "int_contents"
                           : dtype == v1::I64 ? "int64_contents"
                                              : nullptr;
    if (expected != nullptr) {
        const std::pair<const char*, int> given[] = {
            {"bool_contents", contents.bool_contents_size()},
            {"int_contents", contents.int_contents_size()},
            {"int64_contents", contents.int64_contents_size()},
            {"uint_contents", contents.uint_contents_size()},
            {"uint64_contents", contents.uint64_contents_size()},
            {"fp32_contents", contents.fp32_contents_size()},
            {"fp64_contents", contents.fp64_contents_size()},
            {"bytes_contents", contents.bytes_contents_size()},
        };
        for (const auto& [field, size] : given) {
            if (size > 0 && std::string_view(field) != expected) {
                return absl::InvalidArgumentError(
                    absl::StrCat("input '", input.name(), "' is ", input.datatype(),
                                 ": its values go in ", expected, " or raw_input_contents; got ",
                                 field, " (", size, size == 1 ? " value)" : " values)"));
            }
        }
    }
    // The repeated field's values as little-endian bytes (the platforms served are).
    const auto as_bytes = [](const auto& values) {
        std::string bytes(values.size() * sizeof(values.Get(0)), '\0');
        if (!bytes.empty()) {
            std::memcpy(bytes.data(), values.data(), bytes.size());
        }
        return bytes;
    };
    switch (dtype) {
    case v1::F32:
        return as_bytes(contents.fp32_contents());
    case v1::F64:
        return as_bytes(contents.fp64_contents());
    case v1::I32:
        return as_bytes(contents.int_contents());
    case v1::I64:
        return as_bytes(contents.int64_contents());
    default:
        return absl::InvalidArgumentError(
            absl::StrCat("input '", input.name(), "' is ", input.datatype(),
                         ": its data must come as raw_input_contents (contents has no field for ",
                         input.datatype(), ")"));
    }
}

} // namespace

std::string kserve_datatype(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return "FP16";
    case ir::DType::bf16:
        return "BF16";
    case ir::DType::f32:
        return "FP32";
    case ir::DType::f64:
        return "FP64";
    case ir::DType::i32:
        return "INT32";
    case ir::DType::i64:
        return "INT64";
    }
    return "UNKNOWN";
}

inference::DataType triton_data_type(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return inference::TYPE_FP16;
    case ir::DType::bf16:
        return inference::TYPE_BF16;
    case ir::DType::f32:
        return inference::TYPE_FP32;
    case ir::DType::f64:
        return inference::TYPE_FP64;
    case ir::DType::i32:
        return inference::TYPE_INT32;
    case ir::DType::i64:
        return inference::TYPE_INT64;
    }
    return inference::TYPE_INVALID;
}

absl::StatusOr<v1::DType> from_kserve_datatype(absl::string_view datatype, absl::string_view what) {
    if (datatype == "FP32") {
        return v1::F32;
    }
    if (datatype == "FP16") {
        return v1::F16;
    }
    if (datatype == "BF16") {
        return v1::BF16;
    }
    if (datatype == "FP64") {
        return v1::F64;
    }
    if (datatype == "INT32") {
        return v1::I32;
    }
    if (datatype == "INT64") {
        return v1::I64;
    }
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": datatype '", datatype,
                     "' is not supported (FP32, FP16, BF16, FP64, INT32, INT64)"));
}

std::string kserve_model_version(const Model& model) {
    return model.version() > 0 ? std::to_string(model.version()) : std::string(kKServeModelVersion);
}

inference::ServerMetadataResponse kserve_server_metadata(const Engine& engine) {
    inference::ServerMetadataResponse response;
    response.set_name("einsummable");
    response.set_version(engine.options().version);
    return response;
}

absl::StatusOr<inference::ModelMetadataResponse>
kserve_model_metadata(const Engine& engine, const inference::ModelMetadataRequest& req) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, engine.find_model(req.name()));
    EINSUMMABLE_RETURN_IF_ERROR(check_version(*model, req.version()));
    inference::ModelMetadataResponse response;
    response.set_name(model->name());
    response.add_versions(kserve_model_version(*model));
    response.set_platform(std::string(kKServePlatform));
    for (const TensorSignature& input : model->input_signatures()) {
        add_metadata(input, response.mutable_inputs());
    }
    for (const TensorSignature& output : model->output_signatures()) {
        add_metadata(output, response.mutable_outputs());
    }
    return response;
}

absl::StatusOr<inference::ModelConfigResponse>
kserve_model_config(const Engine& engine, const inference::ModelConfigRequest& req) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, engine.find_model(req.name()));
    EINSUMMABLE_RETURN_IF_ERROR(check_version(*model, req.version()));
    inference::ModelConfigResponse response;
    inference::ModelConfig& config = *response.mutable_config();
    config.set_name(model->name());
    config.set_platform(std::string(kKServePlatform));
    config.set_max_batch_size(0);
    for (const TensorSignature& signature : model->input_signatures()) {
        inference::ModelInput* input = config.add_input();
        input->set_name(signature.name);
        input->set_data_type(triton_data_type(signature.dtype));
        for (int64_t size : signature.shape) {
            input->add_dims(size);
        }
    }
    for (const TensorSignature& signature : model->output_signatures()) {
        inference::ModelOutput* output = config.add_output();
        output->set_name(signature.name);
        output->set_data_type(triton_data_type(signature.dtype));
        for (int64_t size : signature.shape) {
            output->add_dims(size);
        }
    }
    return response;
}

bool kserve_model_ready(const Engine& engine, const inference::ModelReadyRequest& req) {
    absl::StatusOr<std::shared_ptr<const Model>> model = engine.find_model(req.name());
    return model.ok() && check_version(**model, req.version()).ok() &&
           !(*model)->missing_weight().has_value();
}

absl::StatusOr<v1::ExecuteRequest> kserve_execute_request(const Model& model,
                                                          const inference::ModelInferRequest& req) {
    EINSUMMABLE_RETURN_IF_ERROR(check_version(model, req.model_version()));
    if (req.raw_input_contents_size() > 0 && req.raw_input_contents_size() != req.inputs_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("raw_input_contents has ", req.raw_input_contents_size(), " entries for ",
                         req.inputs_size(), " inputs; give one per input, in order, or none"));
    }
    v1::ExecuteRequest execute;
    execute.set_model(model.name());
    EINSUMMABLE_RETURN_IF_ERROR(read_parameters(model, req, execute));

    // Symbols bound by the inputs' shapes, and by which input.
    std::map<std::string, std::pair<int64_t, std::string>> bound;
    for (int index = 0; index < req.inputs_size(); ++index) {
        const inference::ModelInferRequest::InferInputTensor& input = req.inputs(index);
        const std::string what = absl::StrCat("input '", input.name(), "'");
        // Triton refuses this too: which of the two would be the data is anyone's guess.
        if (req.raw_input_contents_size() > 0 && input.has_contents()) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": contents must not be given when the request uses raw_input_contents; "
                      "send each input's data in raw_input_contents or in contents, not both"));
        }
        const TensorSignature* signature = nullptr;
        for (const TensorSignature& candidate : model.input_signatures()) {
            if (candidate.name == input.name()) {
                signature = &candidate;
            }
        }
        if (signature == nullptr) {
            return absl::InvalidArgumentError(absl::StrCat(
                graphdef::quote_name(input.name()), " is not an input of model '", model.name(),
                "' (inputs: ",
                model.inputs().empty() ? std::string("none") : absl::StrJoin(model.inputs(), ", "),
                model.weights().empty() ? std::string()
                                        : absl::StrCat("; weights are uploaded with UploadTensor: ",
                                                       absl::StrJoin(model.weights(), ", ")),
                ")"));
        }
        if (!input.parameters().empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": parameter '", first_key(input.parameters()),
                             "' is not supported (einsummabled reads tensor data from the "
                             "request; no shared memory)"));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(v1::DType dtype, from_kserve_datatype(input.datatype(), what));
        if (input.datatype() != kserve_datatype(signature->dtype)) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, " is ", kserve_datatype(signature->dtype), "; got ", input.datatype()));
        }
        const std::vector<int64_t>& expected = signature->shape;
        const v1::TensorDesc* desc = nullptr;
        for (const v1::TensorDesc& candidate : model.graph_def().inputs()) {
            if (candidate.name() == input.name()) {
                desc = &candidate;
            }
        }
        if (input.shape_size() != static_cast<int>(expected.size())) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, " has ", expected.size(), " dimensions (", shape_string(expected),
                ", -1 = a symbol); got shape ",
                shape_string({input.shape().data(), static_cast<size_t>(input.shape_size())})));
        }
        for (int d = 0; d < input.shape_size(); ++d) {
            const int64_t size = input.shape(d);
            const v1::Dimension& dim = desc->dims(d);
            const std::string dim_name = absl::StrCat(
                "dimension ", d, dim.name().empty() ? "" : absl::StrCat(" ('", dim.name(), "')"));
            if (!dim.has_symbol()) {
                if (size != expected[d]) {
                    return absl::InvalidArgumentError(
                        absl::StrCat(what, " ", dim_name, " is ", expected[d], "; got ", size));
                }
                continue;
            }
            auto [it, inserted] = bound.try_emplace(dim.symbol(), size, input.name());
            if (!inserted && it->second.first != size) {
                return absl::InvalidArgumentError(absl::StrCat(
                    what, " ", dim_name, " binds symbol '", dim.symbol(), "' to ", size,
                    ", but input '", it->second.second, "' binds it to ", it->second.first));
            }
        }
        v1::NamedTensor* named = execute.add_inputs();
        named->set_name(input.name());
        named->mutable_tensor()->set_dtype(dtype);
        named->mutable_tensor()->mutable_shape()->CopyFrom(input.shape());
        EINSUMMABLE_ASSIGN_OR_RETURN(std::string bytes, input_data(req, index, dtype));
        named->mutable_tensor()->set_data(std::move(bytes));
    }

    // Every symbol is a dimension of some input (weights are fixed), so once every input is
    // given every symbol is bound.
    for (const std::string& name : model.inputs()) {
        bool given = false;
        for (const auto& input : req.inputs()) {
            given = given || input.name() == name;
        }
        if (!given) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", name, "' of model '", model.name(),
                             "' is missing (inputs: ", absl::StrJoin(model.inputs(), ", "), ")"));
        }
    }
    for (const auto& [symbol, binding] : bound) {
        (*execute.mutable_dims())[symbol] = binding.first;
    }

    for (const inference::ModelInferRequest::InferRequestedOutputTensor& output : req.outputs()) {
        if (!output.parameters().empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "output '", output.name(), "': parameter '", first_key(output.parameters()),
                "' is not supported (no classification, no shared memory)"));
        }
        execute.add_outputs(output.name());
    }
    return execute;
}

absl::StatusOr<inference::ModelInferResponse>
kserve_model_infer(Engine& engine, const inference::ModelInferRequest& req,
                   const CancelCheck& cancelled) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model,
                                 engine.find_model(req.model_name()));
    EINSUMMABLE_ASSIGN_OR_RETURN(v1::ExecuteRequest execute, kserve_execute_request(*model, req));

    CancelCheck check = cancelled;
    auto timeout = req.parameters().find("timeout");
    if (timeout != req.parameters().end()) {
        EINSUMMABLE_ASSIGN_OR_RETURN(int64_t parsed, timeout_parameter(timeout->second));
        const int64_t micros = parsed;
        const Clock::time_point now = Clock::now();
        // now + micros would overflow the clock (2^63 ns is 292 years) for huge timeouts: those
        // add no deadline, the call's own still applies.
        const int64_t room =
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::time_point::max() - now)
                .count();
        if (micros < room) {
            const Clock::time_point deadline = now + std::chrono::microseconds(micros);
            check = [cancelled, deadline, micros]() -> absl::Status {
                if (Clock::now() >= deadline) {
                    return absl::DeadlineExceededError(
                        absl::StrCat("the request's timeout parameter (", micros, " µs) passed"));
                }
                return cancelled ? cancelled() : absl::OkStatus();
            };
        }
    }

    EINSUMMABLE_ASSIGN_OR_RETURN(v1::ExecuteResponse result, engine.execute(execute, check));
    inference::ModelInferResponse response;
    response.set_model_name(req.model_name());
    response.set_model_version(kserve_model_version(*model));
    response.set_id(req.id());
    for (v1::NamedTensor& named : *result.mutable_outputs()) {
        inference::ModelInferResponse::InferOutputTensor* output = response.add_outputs();
        output->set_name(named.name());
        EINSUMMABLE_ASSIGN_OR_RETURN(
            ir::DType dtype,
            from_wire_dtype(named.tensor().dtype(), absl::StrCat("output '", named.name(), "'")));
        output->set_datatype(kserve_datatype(dtype));
        output->mutable_shape()->CopyFrom(named.tensor().shape());
        *response.add_raw_output_contents() = std::move(*named.mutable_tensor()->mutable_data());
    }
    return response;
}

namespace {

// The repository, or why a repository call cannot run: no --model_repository, a repository
// name, parameters.
template <typename Request>
absl::Status check_repository_call(const char* call, const ModelRepository* repository,
                                   const Request& req) {
    if (repository == nullptr) {
        return no_repository_error(call);
    }
    if (!req.repository_name().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(call, ": repository_name '", req.repository_name(),
                         "': the server has one repository (--model_repository); leave it empty"));
    }
    return absl::OkStatus();
}

template <typename Request>
absl::Status check_no_parameters(const char* call, const Request& req) {
    if (!req.parameters().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(call, ": parameter '", req.parameters().begin()->first,
                         "' is not supported (the model is loaded from its directory as it is)"));
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<inference::RepositoryIndexResponse>
kserve_repository_index(ModelRepository* repository, const inference::RepositoryIndexRequest& req) {
    EINSUMMABLE_RETURN_IF_ERROR(check_repository_call("RepositoryIndex", repository, req));
    inference::RepositoryIndexResponse response;
    for (const RepositoryModel& model : repository->index(req.ready())) {
        inference::RepositoryIndexResponse::ModelIndex& index = *response.add_models();
        index.set_name(model.name);
        if (model.version > 0) {
            index.set_version(std::to_string(model.version));
        }
        index.set_state(repository_state_name(model.state));
        index.set_reason(model.reason);
    }
    return response;
}

absl::Status kserve_repository_load(ModelRepository* repository,
                                    const inference::RepositoryModelLoadRequest& req) {
    EINSUMMABLE_RETURN_IF_ERROR(check_repository_call("RepositoryModelLoad", repository, req));
    EINSUMMABLE_RETURN_IF_ERROR(check_no_parameters("RepositoryModelLoad", req));
    return repository->load_model(req.model_name()).status();
}

absl::Status kserve_repository_unload(ModelRepository* repository,
                                      const inference::RepositoryModelUnloadRequest& req) {
    EINSUMMABLE_RETURN_IF_ERROR(check_repository_call("RepositoryModelUnload", repository, req));
    // Triton's unload takes "unload_dependents" (ensembles); there are none here.
    if (!req.parameters().empty() &&
        !(req.parameters().size() == 1 && req.parameters().count("unload_dependents") == 1)) {
        EINSUMMABLE_RETURN_IF_ERROR(check_no_parameters("RepositoryModelUnload", req));
    }
    return repository->unload_model(req.model_name());
}

} // namespace einsummable::server
