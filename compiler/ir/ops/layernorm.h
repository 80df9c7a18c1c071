#pragma once

#include "compiler/ir/ops/norm_common.h"

namespace einsummable::ir {

// LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * gamma (+ beta). Inputs
// x [..., d], gamma [d] and optionally beta [d]; attribute eps (default 1e-5). The normalised
// (last) dimension is never split; the leading ones are shardable at any position.
class LayerNorm final : public NormOperator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "layernorm";
    absl::string_view kind() const override { return kKind; }
    KernelClass kernel_class() const override { return KernelClass::norm; }
    double flops(const FunctionSpec& function) const override;

protected:
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    using NormOperator::NormOperator;
};

} // namespace einsummable::ir
