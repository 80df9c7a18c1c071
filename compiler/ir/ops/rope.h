#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Rotary position embedding on x [tokens, ..., d_head] (d_head even), "rotate half" form: for
// i < d/2 with angle = position · theta^(-2i/d),
//   y[i] = x[i]·cos − x[i+d/2]·sin,   y[i+d/2] = x[i]·sin + x[i+d/2]·cos.
// A token's position is its absolute index minus the start of its packed sequence (attributes
// theta, default 10000, and sequence_ends). Since positions come from the absolute box a block
// covers, tokens can be split anywhere; the middle dimensions are shardable, d_head is not.
class Rope final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "rope";
    absl::string_view kind() const override { return kKind; }
    // Element-wise rotations: memory-bound.
    KernelClass kernel_class() const override { return KernelClass::elementwise; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // Dimension 0 (the positions) is a token; the middle dimensions are heads.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double flops(const FunctionSpec& function) const override;

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Rope(Attributes attributes, std::vector<TensorType> inputs, double theta,
         std::vector<int64_t> sequence_ends);

    double theta_;
    std::vector<int64_t> sequence_ends_;
};

} // namespace einsummable::ir
