#include "compiler/ir/ops/merge_heads.h"

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> MergeHeads::make(const Attributes& attributes,
                                             std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"dim_name"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("merge_heads takes 1 input, got ", inputs.size()));
    }
    const TensorType& input = inputs[0];
    if (input.rank() < 2) {
        return operand_error("input", 0, input,
                             "needs [..., heads, head_dim], at least two dimensions");
    }
    const Dim& heads = input.dims[input.rank() - 2];
    const Dim& head_dim = input.dims[input.rank() - 1];
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::string dim_name,
        attributes.get_string_or("dim_name", absl::StrCat(heads.name, "*", head_dim.name)));
    TensorType output = input;
    output.dims.pop_back();
    output.dims.back() = {dim_name, heads.size * head_dim.size};
    return OperatorPtr(
        new MergeHeads({{"dim_name", dim_name}}, std::move(inputs), {std::move(output)}));
}

// Indices: the leading dimensions, then heads.
std::vector<ShardableIndex> MergeHeads::shardable_indices() const {
    const TensorType& input = input_types()[0];
    return indices_for_dims(input, dim_range(0, input.rank() - 1));
}

std::vector<IndexRole> MergeHeads::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(shardable_indices().size(), IndexRole::token);
    roles.back() = IndexRole::head; // the heads: the last shardable dimension
    return roles;
}

SpecLayout MergeHeads::layout() const {
    const TensorType& input = input_types()[0];
    const TensorType& output = output_types()[0];
    const int heads_index = input.rank() - 2;
    std::vector<DimBinding> in = bind_dims(input, dim_range(0, heads_index + 1));
    std::vector<DimBinding> out = bind_dims(output, dim_range(0, heads_index));
    out.back() = {heads_index, input.dims.back().size}; // h·d follows heads, scaled by d
    return {{in}, {out}, {AggOp::none}};
}

std::vector<HostTensor> MergeHeads::compute(absl::Span<const HostTensor> inputs,
                                            const FunctionSpec& function) const {
    return {HostTensor(function.outputs[0], inputs[0].values())};
}

} // namespace einsummable::ir
