#pragma once

#include "compiler/ir/ops/norm_common.h"

namespace einsummable::ir {

// RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight. Inputs x [..., d]
// and weight [d]; attribute eps (default 1e-5). The normalised (last) dimension is never split;
// the leading ones are shardable at any position and the weight is read whole.
class RmsNorm final : public NormOperator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "rmsnorm";
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
