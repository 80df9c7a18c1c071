#pragma once

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// [..., h·d] -> [..., h, d]: splits the last dimension into `heads` heads (attributes: heads;
// optional heads_name, default "heads", and head_dim_name, default "d_head"). The leading
// dimensions and heads are shardable at any position; a head is never split, so the input
// block of heads [h0, h1) is the contiguous range [h0·d, h1·d).
class SplitHeads final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "split_heads";
    absl::string_view kind() const override { return kKind; }
    // A copy in another layout: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // The leading dimensions are tokens; the heads are heads.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override { return 0.0; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    using Operator::Operator;
};

} // namespace einsummable::ir
