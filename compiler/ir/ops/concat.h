#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Concatenation of one or more tensors along one dimension, as NumPy's concatenate: attribute
// `axis` (required; a negative axis counts from the end, -1 the last) and optionally `dim_name`
// for the output's axis dimension (default: the first input's axis dimension's name). Every
// input has the first input's dtype and rank and the sizes of its dimensions other than the
// axis; the output is the first input's type with the axis as long as the inputs' together.
//
// Every dimension other than the axis is shardable at any position. The axis is never split:
// each function spec reads every input whole along it and writes the output's axis whole. (A
// later change can allow cuts at the boundaries between the inputs, where a function then reads
// only the inputs its output block covers.)
class Concat final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "concat";
    absl::string_view kind() const override { return kKind; }
    // A copy of its inputs' blocks: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // A copy, so each index takes the role its inputs' dimension carries (the first input
    // whose producer declared one), as an element-wise einsum's kept indices do; a feature where
    // none is known. The axis follows no index, so it is a feature to the operators after it.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override { return 0.0; }
    // The concatenated dimension, normalised to [0, rank).
    int axis() const { return axis_; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Concat(Attributes attributes, std::vector<TensorType> inputs, TensorType output, int axis);
    // Every dimension but the axis, in order: the shardable indices.
    std::vector<int> other_dims() const;

    int axis_;
};

} // namespace einsummable::ir
