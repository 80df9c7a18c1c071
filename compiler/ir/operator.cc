#include "compiler/ir/operator.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

Operator::Operator(Attributes attributes, std::vector<TensorType> input_types,
                   std::vector<TensorType> output_types)
    : attributes_(std::move(attributes)), input_types_(std::move(input_types)),
      output_types_(std::move(output_types)) {}

absl::StatusOr<JoinAggSpec> Operator::spec(const IntervalRequest& request) const {
    EINSUMMABLE_RETURN_IF_ERROR(validate_request(shardable_indices(), request));
    return build_spec(request);
}

JoinAggSpec Operator::whole_spec() const {
    IntervalRequest request;
    for (const ShardableIndex& index : shardable_indices()) {
        request.push_back({{0, index.size}});
    }
    return build_spec(request);
}

namespace {

Box project(const std::vector<DimBinding>& bindings, const TensorType& type,
            const std::vector<Interval>& chosen) {
    std::vector<Interval> dims(bindings.size());
    for (size_t dim = 0; dim < bindings.size(); ++dim) {
        const DimBinding& binding = bindings[dim];
        if (binding.index == DimBinding::kWhole) {
            dims[dim] = {0, type.dims[dim].size};
        } else {
            const Interval& interval = chosen[binding.index];
            dims[dim] = {interval.lower * binding.scale, interval.upper * binding.scale};
        }
    }
    return Box(std::move(dims));
}

} // namespace

JoinAggSpec Operator::build_spec(const IntervalRequest& request) const {
    const SpecLayout spec_layout = layout();
    JoinAggSpec spec;
    spec.aggregations = spec_layout.aggregations;
    const size_t num_indices = request.size();
    std::vector<size_t> choice(num_indices, 0);
    std::vector<Interval> chosen(num_indices);
    // Row-major over the indices: the last index varies fastest.
    while (true) {
        for (size_t idx = 0; idx < num_indices; ++idx) {
            chosen[idx] = request[idx][choice[idx]];
        }
        FunctionSpec function;
        for (int input_idx = 0; input_idx < num_inputs(); ++input_idx) {
            function.inputs.push_back(
                project(spec_layout.inputs[input_idx], input_types_[input_idx], chosen));
        }
        for (int output_idx = 0; output_idx < num_outputs(); ++output_idx) {
            function.outputs.push_back(
                project(spec_layout.outputs[output_idx], output_types_[output_idx], chosen));
        }
        spec.functions.push_back(std::move(function));
        int idx = static_cast<int>(num_indices) - 1;
        while (idx >= 0 && ++choice[idx] == request[idx].size()) {
            choice[idx] = 0;
            --idx;
        }
        if (idx < 0) {
            break;
        }
    }
    return spec;
}

absl::StatusOr<std::vector<HostTensor>> Operator::reference(absl::Span<const HostTensor> inputs,
                                                            const FunctionSpec& function) const {
    EINSUMMABLE_RETURN_IF_ERROR(check_blocks(inputs, function));
    return compute(inputs, function);
}

absl::StatusOr<std::vector<PartialBlock>>
Operator::reference_partial(absl::Span<const HostTensor> inputs,
                            const FunctionSpec& function) const {
    EINSUMMABLE_RETURN_IF_ERROR(check_blocks(inputs, function));
    return compute_partials(inputs, function);
}

absl::StatusOr<std::vector<PartialBlock>> Operator::compute_partials(absl::Span<const HostTensor>,
                                                                     const FunctionSpec&) const {
    return absl::UnimplementedError(
        absl::StrCat(kind(), " has no output aggregated with statistics, so no partial results"));
}

absl::Status Operator::check_blocks(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const {
    if (static_cast<int>(inputs.size()) != num_inputs() ||
        static_cast<int>(function.inputs.size()) != num_inputs() ||
        static_cast<int>(function.outputs.size()) != num_outputs()) {
        return absl::InvalidArgumentError(absl::StrCat(
            kind(), ": expected ", num_inputs(), " inputs and ", num_outputs(), " outputs, got ",
            inputs.size(), " input blocks and a function spec with ", function.inputs.size(),
            " inputs and ", function.outputs.size(), " outputs"));
    }
    for (int input_idx = 0; input_idx < num_inputs(); ++input_idx) {
        if (inputs[input_idx].box() != function.inputs[input_idx]) {
            return absl::InvalidArgumentError(absl::StrCat(
                kind(), ": input ", input_idx, " block is ", inputs[input_idx].box().to_string(),
                ", the function spec reads ", function.inputs[input_idx].to_string()));
        }
        if (!input_types_[input_idx].box().contains(function.inputs[input_idx])) {
            return absl::InvalidArgumentError(absl::StrCat(
                kind(), ": input ", input_idx, " block ", function.inputs[input_idx].to_string(),
                " leaves the input type ", input_types_[input_idx].to_string()));
        }
    }
    for (int output_idx = 0; output_idx < num_outputs(); ++output_idx) {
        if (!output_types_[output_idx].box().contains(function.outputs[output_idx])) {
            return absl::InvalidArgumentError(
                absl::StrCat(kind(), ": output ", output_idx, " block ",
                             function.outputs[output_idx].to_string(), " leaves the output type ",
                             output_types_[output_idx].to_string()));
        }
    }
    return check_function(function);
}

absl::Status Operator::check_function(const FunctionSpec& function) const {
    const SpecLayout spec_layout = layout();
    const std::vector<ShardableIndex> indices = shardable_indices();
    std::vector<std::optional<Interval>> chosen(indices.size());
    auto check_operand = [&](const char* role, int operand_idx,
                             const std::vector<DimBinding>& bindings, const TensorType& type,
                             const Box& box) -> absl::Status {
        if (box.rank() != type.rank()) {
            return absl::InvalidArgumentError(
                absl::StrCat(kind(), ": ", role, " ", operand_idx, " block ", box.to_string(),
                             " has the wrong rank for ", type.to_string()));
        }
        for (int dim = 0; dim < type.rank(); ++dim) {
            const DimBinding& binding = bindings[dim];
            const Interval& got = box[dim];
            Interval implied = {0, type.dims[dim].size};
            if (binding.index != DimBinding::kWhole) {
                if (got.lower % binding.scale != 0 || got.upper % binding.scale != 0) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        kind(), ": ", role, " ", operand_idx, " dimension ", dim, " interval ",
                        got.to_string(), " is not a multiple of ", binding.scale));
                }
                const Interval index_interval = {got.lower / binding.scale,
                                                 got.upper / binding.scale};
                std::optional<Interval>& seen = chosen[binding.index];
                if (!seen) {
                    seen = index_interval;
                }
                implied = {seen->lower * binding.scale, seen->upper * binding.scale};
            }
            if (got != implied) {
                return absl::InvalidArgumentError(absl::StrCat(
                    kind(), ": ", role, " ", operand_idx, " dimension ", dim, " ('",
                    type.dims[dim].name, "') block interval ", got.to_string(),
                    " is inconsistent with the other operands, which imply ", implied.to_string()));
            }
        }
        return absl::OkStatus();
    };
    for (int input_idx = 0; input_idx < num_inputs(); ++input_idx) {
        EINSUMMABLE_RETURN_IF_ERROR(check_operand("input", input_idx, spec_layout.inputs[input_idx],
                                                  input_types_[input_idx],
                                                  function.inputs[input_idx]));
    }
    for (int output_idx = 0; output_idx < num_outputs(); ++output_idx) {
        EINSUMMABLE_RETURN_IF_ERROR(
            check_operand("output", output_idx, spec_layout.outputs[output_idx],
                          output_types_[output_idx], function.outputs[output_idx]));
    }
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        const ShardableIndex& index = indices[idx];
        if (!chosen[idx] || index.any_position) {
            continue;
        }
        for (int64_t bound : {chosen[idx]->lower, chosen[idx]->upper}) {
            if (bound != 0 && bound != index.size &&
                !std::binary_search(index.cut_positions.begin(), index.cut_positions.end(),
                                    bound)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    kind(), ": index ", index.to_string(), " may not be cut at ", bound));
            }
        }
    }
    return absl::OkStatus();
}

std::string Operator::describe() const {
    return absl::StrCat(kind(), "(", attributes_.to_string(), ")");
}

std::vector<ShardableIndex> indices_for_dims(const TensorType& type, absl::Span<const int> dims) {
    std::vector<ShardableIndex> out;
    for (int dim : dims) {
        std::string name =
            type.dims[dim].name.empty() ? absl::StrCat("dim", dim) : type.dims[dim].name;
        const std::string base = name;
        for (int suffix = 2; std::any_of(out.begin(), out.end(),
                                         [&](const ShardableIndex& i) { return i.name == name; });
             ++suffix) {
            name = absl::StrCat(base, "#", suffix);
        }
        out.push_back(ShardableIndex::any(std::move(name), type.dims[dim].size));
    }
    return out;
}

std::vector<DimBinding> bind_dims(const TensorType& type, absl::Span<const int> dims,
                                  int first_index) {
    std::vector<DimBinding> out(type.rank());
    for (size_t k = 0; k < dims.size(); ++k) {
        out[dims[k]] = {first_index + static_cast<int>(k), 1};
    }
    return out;
}

std::vector<int> dim_range(int begin, int end) {
    std::vector<int> dims;
    for (int dim = begin; dim < end; ++dim) {
        dims.push_back(dim);
    }
    return dims;
}

std::vector<DimBinding> whole_dims(const TensorType& type) {
    return std::vector<DimBinding>(type.rank());
}

double Operator::input_bytes_read(const FunctionSpec& function, int input) const {
    return static_cast<double>(function.inputs[input].volume() *
                               dtype_size(input_types()[input].dtype));
}

absl::Status Operator::check_input_values(int /*input*/,
                                          absl::Span<const std::byte> /*bytes*/) const {
    return absl::OkStatus();
}

absl::Status operand_error(absl::string_view role, int operand_idx, const TensorType& type,
                           absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat(role, " ", operand_idx, " (", type.to_string(), "): ", message));
}

} // namespace einsummable::ir
