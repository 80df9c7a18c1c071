#pragma once

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Softmax along one axis (attribute `axis`, default -1 = last). The normalised axis is never
// split; every other dimension is shardable at any position.
class Softmax final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "softmax";
    absl::string_view kind() const override { return kKind; }
    // A row-wise pass that reads and writes each element once: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // Every dimension but the axis is a token (a row normalised alone); the axis, never split,
    // is a feature of the output.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;
    int axis() const { return axis_; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Softmax(Attributes attributes, std::vector<TensorType> inputs, int axis);
    std::vector<int> other_dims() const;

    int axis_;
};

} // namespace einsummable::ir
