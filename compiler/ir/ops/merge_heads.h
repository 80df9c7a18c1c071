#pragma once

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// [..., h, d] -> [..., h·d]: the inverse of split_heads (optional attribute dim_name for the
// merged dimension, default "<heads name>*<head dim name>"). The leading dimensions and heads
// are shardable at any position.
class MergeHeads final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "merge_heads";
    absl::string_view kind() const override { return kKind; }
    // A copy in another layout: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // The leading dimensions are tokens; the heads are heads (and so is the merged h·d, which
    // follows them).
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
