#include "server/generation.h"

#include <chrono>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/dtype.h"
#include "compiler/support/status_macros.h"
#include "server/sampling.h"

namespace einsummable::server {

namespace {

// The `index`-th row of a [rows, vocab] tensor as floats.
absl::StatusOr<std::vector<float>> logits_row(const v1::Tensor& tensor, int64_t row,
                                              const std::string& name) {
    if (tensor.shape_size() != 2 || tensor.shape(0) <= row) {
        return absl::InternalError(
            absl::StrCat("output '", name, "' is not [tokens, vocab] with ", row + 1, " rows"));
    }
    const int64_t vocab = tensor.shape(1);
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype,
                                 from_wire_dtype(tensor.dtype(), "the logits' dtype"));
    const int64_t size = ir::dtype_size(dtype);
    const std::string& data = tensor.data();
    if (static_cast<int64_t>(data.size()) != tensor.shape(0) * vocab * size) {
        return absl::InternalError(
            absl::StrCat("output '", name, "' has ", data.size(), " bytes for its shape"));
    }
    std::vector<float> values(static_cast<size_t>(vocab));
    const char* at = data.data() + row * vocab * size;
    for (int64_t v = 0; v < vocab; ++v) {
        const char* element = at + v * size;
        switch (dtype) {
        case ir::DType::f32: {
            std::memcpy(&values[v], element, 4);
            break;
        }
        case ir::DType::f64: {
            double value = 0.0;
            std::memcpy(&value, element, 8);
            values[v] = static_cast<float>(value);
            break;
        }
        case ir::DType::f16:
        case ir::DType::bf16: {
            uint16_t bits = 0;
            std::memcpy(&bits, element, 2);
            values[v] = dtype == ir::DType::f16 ? ir::f16_to_float(bits) : ir::bf16_to_float(bits);
            break;
        }
        default:
            return absl::FailedPreconditionError(absl::StrCat(
                "output '", name, "' is ", ir::dtype_name(dtype), ", not floating-point logits"));
        }
    }
    return values;
}

// The ids as the model's input tensor.
v1::NamedTensor ids_tensor(const GenerationInterface& interface, const std::vector<int64_t>& ids) {
    v1::NamedTensor named;
    named.set_name(interface.ids);
    v1::Tensor* tensor = named.mutable_tensor();
    tensor->set_dtype(interface.ids_dtype);
    tensor->add_shape(static_cast<int64_t>(ids.size()));
    std::string* data = tensor->mutable_data();
    if (interface.ids_dtype == v1::I64) {
        data->resize(ids.size() * 8);
        std::memcpy(data->data(), ids.data(), data->size());
    } else {
        data->resize(ids.size() * 4);
        for (size_t i = 0; i < ids.size(); ++i) {
            const int32_t id = static_cast<int32_t>(ids[i]);
            std::memcpy(data->data() + i * 4, &id, 4);
        }
    }
    return named;
}

} // namespace

absl::StatusOr<GenerationInterface> generation_interface(const Model& model) {
    const std::string who = absl::StrCat("model '", model.name(), "'");
    if (!model.batching().has_value()) {
        return absl::FailedPreconditionError(absl::StrCat(
            who, " has no batching: Generate runs models batched along their token dimension "
                 "(RegisterModelRequest.batching)"));
    }
    GenerationInterface interface;
    for (const TensorSignature& input : model.input_signatures()) {
        if (!interface.ids.empty()) {
            return absl::FailedPreconditionError(
                absl::StrCat(who, " has inputs '", interface.ids, "' and '", input.name,
                             "' besides its weights; Generate feeds one: the token ids"));
        }
        if (!ir::is_integer(input.dtype) || input.shape.size() != 1) {
            return absl::FailedPreconditionError(absl::StrCat(
                who, "'s input '", input.name, "' is ", ir::dtype_name(input.dtype), " of rank ",
                input.shape.size(), "; Generate feeds token ids: i32 or i64 [tokens]"));
        }
        interface.ids = input.name;
        interface.ids_dtype = to_wire_dtype(input.dtype);
    }
    if (interface.ids.empty()) {
        return absl::FailedPreconditionError(
            absl::StrCat(who, " has no input besides its weights; Generate feeds token ids"));
    }
    const std::vector<TensorSignature>& outputs = model.output_signatures();
    const TensorSignature* logits = nullptr;
    for (const TensorSignature& output : outputs) {
        if (outputs.size() == 1 || output.name == "logits") {
            logits = &output;
        }
    }
    if (logits == nullptr) {
        return absl::FailedPreconditionError(absl::StrCat(
            who, " saves ", outputs.size(),
            " tensors and none is named 'logits'; Generate reads the logits [tokens, vocab]"));
    }
    if (logits->shape.size() != 2 || ir::is_integer(logits->dtype)) {
        return absl::FailedPreconditionError(absl::StrCat(
            who, "'s output '", logits->name, "' is ", ir::dtype_name(logits->dtype), " of rank ",
            logits->shape.size(), "; Generate reads floating-point logits [tokens, vocab]"));
    }
    interface.logits = logits->name;
    return interface;
}

absl::Status generate(Engine& engine, const v1::GenerateRequest& req, const CancelCheck& cancelled,
                      const std::function<bool(const v1::GenerateResponse&)>& emit) {
    const auto start = std::chrono::steady_clock::now();
    if (req.prompt_ids().empty()) {
        return absl::InvalidArgumentError("prompt_ids is empty; give at least one token id");
    }
    if (req.max_tokens() < 0 || req.max_tokens() > kMaxGenerateTokens) {
        return absl::InvalidArgumentError(absl::StrCat("max_tokens is ", req.max_tokens(),
                                                       "; give 1 to ", kMaxGenerateTokens,
                                                       ", or 0 for ", kMaxGenerateTokens));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const SamplingParams params, sampling_params(req.sampling()));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model,
                                 engine.find_model(req.model()));
    EINSUMMABLE_ASSIGN_OR_RETURN(const GenerationInterface interface, generation_interface(*model));
    const int32_t max_tokens = req.max_tokens() == 0 ? kMaxGenerateTokens : req.max_tokens();
    // i32 ids are sent as they are: an id past int32 would wrap into another id the vocabulary
    // check would pass.
    for (int i = 0; i < req.prompt_ids_size() && interface.ids_dtype == v1::I32; ++i) {
        const int64_t id = req.prompt_ids(i);
        if (id < std::numeric_limits<int32_t>::min() || id > std::numeric_limits<int32_t>::max()) {
            return absl::InvalidArgumentError(absl::StrCat("prompt_ids[", i, "] = ", id,
                                                           " does not fit the model's i32 input '",
                                                           interface.ids, "'"));
        }
    }

    GenerationRequest request;
    request.prompt.assign(req.prompt_ids().begin(), req.prompt_ids().end());
    request.max_tokens = max_tokens;
    request.params = params;
    request.stop_ids.assign(req.stop_ids().begin(), req.stop_ids().end());
    absl::StatusOr<std::shared_ptr<GenerationPool>> pool =
        engine.generation_pools().find_or_create(engine, model, interface, req.options());
    if (pool.ok()) {
        return (*pool)->generate(request, cancelled, emit);
    }
    if (!absl::IsUnimplemented(pool.status())) {
        return pool.status();
    }
    // No caches for this model: each step runs the whole sequence.
    std::mt19937_64 rng(params.seed);
    auto previous = start;
    std::vector<int64_t> ids(req.prompt_ids().begin(), req.prompt_ids().end());
    for (int32_t index = 0; index < max_tokens; ++index) {
        if (cancelled) {
            EINSUMMABLE_RETURN_IF_ERROR(cancelled());
        }
        v1::ExecuteRequest step;
        step.set_model(req.model());
        *step.mutable_options() = req.options();
        *step.add_inputs() = ids_tensor(interface, ids);
        step.add_outputs(interface.logits);
        EINSUMMABLE_ASSIGN_OR_RETURN(v1::ExecuteResponse result, engine.execute(step, cancelled));
        if (result.outputs_size() != 1) {
            return absl::InternalError(absl::StrCat("the step returned ", result.outputs_size(),
                                                    " outputs, not the logits alone"));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(const std::vector<float> row,
                                     logits_row(result.outputs(0).tensor(),
                                                static_cast<int64_t>(ids.size()) - 1,
                                                interface.logits));
        EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t token, choose_token(row, params, rng));
        ids.push_back(token);

        const auto now = std::chrono::steady_clock::now();
        if (Metrics* metrics = engine.metrics(); metrics != nullptr) {
            metrics->generated_token(req.model(), index,
                                     std::chrono::duration<double>(now - previous).count());
        }
        previous = now;
        const v1::GenerateResponse response = token_response(
            request, token, index, std::chrono::duration<double>(now - start).count());
        if (!emit(response)) {
            return absl::CancelledError("the client went away");
        }
        if (!response.finish_reason().empty()) {
            break;
        }
    }
    return absl::OkStatus();
}

} // namespace einsummable::server
