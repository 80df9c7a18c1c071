#include "compiler/ir/ops/split_heads.h"

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> SplitHeads::make(const Attributes& attributes,
                                             std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"heads", "heads_name", "head_dim_name"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("split_heads takes 1 input, got ", inputs.size()));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t heads, attributes.get_int("heads"));
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string heads_name,
                                 attributes.get_string_or("heads_name", "heads"));
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string head_dim_name,
                                 attributes.get_string_or("head_dim_name", "d_head"));
    const TensorType& input = inputs[0];
    if (input.rank() == 0) {
        return operand_error("input", 0, input, "needs a dimension to split into heads");
    }
    const Dim& last = input.dims.back();
    if (heads <= 0 || last.size % heads != 0) {
        return operand_error("input", 0, input,
                             absl::StrCat("shape mismatch: dimension '", last.name, "' (",
                                          last.size, ") does not split into ", heads, " heads"));
    }
    TensorType output = input;
    output.dims.back() = {heads_name, heads};
    output.dims.push_back({head_dim_name, last.size / heads});
    Attributes normalised = {
        {"heads", heads}, {"heads_name", heads_name}, {"head_dim_name", head_dim_name}};
    return OperatorPtr(
        new SplitHeads(std::move(normalised), std::move(inputs), {std::move(output)}));
}

// Indices: the leading dimensions of the input, then heads.
std::vector<ShardableIndex> SplitHeads::shardable_indices() const {
    const TensorType& output = output_types()[0];
    return indices_for_dims(output, dim_range(0, output.rank() - 1));
}

std::vector<IndexRole> SplitHeads::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(shardable_indices().size(), IndexRole::token);
    roles.back() = IndexRole::head; // the heads: the last shardable dimension
    return roles;
}

SpecLayout SplitHeads::layout() const {
    const TensorType& input = input_types()[0];
    const TensorType& output = output_types()[0];
    const int heads_index = input.rank() - 1;
    std::vector<DimBinding> in = bind_dims(input, dim_range(0, heads_index));
    in.back() = {heads_index, output.dims.back().size}; // h·d follows heads, scaled by d
    std::vector<DimBinding> out = bind_dims(output, dim_range(0, heads_index + 1));
    return {{in}, {out}, {AggOp::none}};
}

std::vector<HostTensor> SplitHeads::compute(absl::Span<const HostTensor> inputs,
                                            const FunctionSpec& function) const {
    // Row-major [..., h·d] and [..., h, d] hold the same sequence of values.
    return {HostTensor(function.outputs[0], inputs[0].values())};
}

} // namespace einsummable::ir
