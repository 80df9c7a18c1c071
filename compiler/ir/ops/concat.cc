#include "compiler/ir/ops/concat.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

// OK iff input `idx` can join input 0 along `axis`: the same dtype and rank, and the same size
// in every other dimension.
absl::Status check_joins(const TensorType& first, const TensorType& input, int idx, int axis) {
    if (input.dtype != first.dtype) {
        return operand_error("input", idx, input,
                             absl::StrCat("concat needs input 0's dtype ", dtype_name(first.dtype),
                                          ", got ", dtype_name(input.dtype)));
    }
    if (input.rank() != first.rank()) {
        return operand_error(
            "input", idx, input,
            absl::StrCat("concat needs input 0's rank ", first.rank(), ", got ", input.rank()));
    }
    for (int dim = 0; dim < first.rank(); ++dim) {
        if (dim != axis && input.dims[dim].size != first.dims[dim].size) {
            return operand_error(
                "input", idx, input,
                absl::StrCat("dimension ", dim, " ('", input.dims[dim].name, "') has size ",
                             input.dims[dim].size, " where input 0's ('", first.dims[dim].name,
                             "') has ", first.dims[dim].size, "; concat along axis ", axis,
                             " needs every other dimension equal"));
        }
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<OperatorPtr> Concat::make(const Attributes& attributes,
                                         std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"axis", "dim_name"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.empty()) {
        return absl::InvalidArgumentError("concat takes at least 1 input, got 0");
    }
    const TensorType& first = inputs[0];
    const int rank = first.rank();
    EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t axis, attributes.get_int("axis"));
    if (rank == 0 || axis < -rank || axis >= rank) {
        return operand_error(
            "input", 0, first,
            absl::StrCat("concat axis ", axis, " is out of range for rank ", rank));
    }
    const int normalised = static_cast<int>(axis < 0 ? axis + rank : axis);
    int64_t length = 0;
    for (size_t idx = 0; idx < inputs.size(); ++idx) {
        EINSUMMABLE_RETURN_IF_ERROR(
            check_joins(first, inputs[idx], static_cast<int>(idx), normalised));
        length += inputs[idx].dims[normalised].size;
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string dim_name,
                                 attributes.get_string_or("dim_name", first.dims[normalised].name));
    TensorType output = first;
    output.dims[normalised] = {dim_name, length};
    return OperatorPtr(new Concat({{"axis", int64_t{normalised}}, {"dim_name", dim_name}},
                                  std::move(inputs), std::move(output), normalised));
}

Concat::Concat(Attributes attributes, std::vector<TensorType> inputs, TensorType output, int axis)
    : Operator(std::move(attributes), std::move(inputs), {std::move(output)}), axis_(axis) {}

std::vector<int> Concat::other_dims() const {
    std::vector<int> dims;
    for (int dim = 0; dim < input_types()[0].rank(); ++dim) {
        if (dim != axis_) {
            dims.push_back(dim);
        }
    }
    return dims;
}

std::vector<ShardableIndex> Concat::shardable_indices() const {
    return indices_for_dims(input_types()[0], other_dims());
}

std::vector<IndexRole> Concat::index_roles(const OperandRoles& operands) const {
    std::vector<IndexRole> roles;
    for (int dim : other_dims()) {
        std::optional<IndexRole> known;
        for (size_t input = 0; !known && input < operands.dims.size(); ++input) {
            if (static_cast<size_t>(dim) < operands.dims[input].size()) {
                known = operands.dims[input][dim];
            }
        }
        roles.push_back(known.value_or(IndexRole::feature));
    }
    return roles;
}

SpecLayout Concat::layout() const {
    const std::vector<int> dims = other_dims();
    SpecLayout spec_layout;
    for (const TensorType& input : input_types()) {
        spec_layout.inputs.push_back(bind_dims(input, dims));
    }
    spec_layout.outputs.push_back(bind_dims(output_types()[0], dims));
    spec_layout.aggregations.push_back(AggOp::none);
    return spec_layout;
}

// Each block is [outer, length, inner] around the axis: every outer row of the output is the
// inputs' rows of that outer index, one after another.
std::vector<HostTensor> Concat::compute(absl::Span<const HostTensor> inputs,
                                        const FunctionSpec& function) const {
    HostTensor output(function.outputs[0]);
    const Box& box = function.outputs[0];
    int64_t outer = 1;
    int64_t inner = 1;
    for (int dim = 0; dim < box.rank(); ++dim) {
        if (dim < axis_) {
            outer *= box[dim].size();
        } else if (dim > axis_) {
            inner *= box[dim].size();
        }
    }
    const int64_t row = box[axis_].size() * inner; // one outer index of the output
    int64_t offset = 0;                            // of the input's part in an output row
    for (const HostTensor& input : inputs) {
        const int64_t part = input.box()[axis_].size() * inner;
        for (int64_t o = 0; o < outer; ++o) {
            const double* from = input.data() + o * part;
            std::copy(from, from + part, output.data() + o * row + offset);
        }
        offset += part;
    }
    return {std::move(output)};
}

} // namespace einsummable::ir
