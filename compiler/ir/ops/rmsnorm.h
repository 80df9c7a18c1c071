#pragma once

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// RMSNorm over the last dimension: y = x / sqrt(mean(x^2) + eps) * weight. Inputs x [..., d]
// and weight [d]; attribute eps (default 1e-5). The normalised (last) dimension is never split;
// the leading ones are shardable at any position and the weight is read whole.
class RmsNorm final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    absl::string_view kind() const override { return "rmsnorm"; }
    std::vector<ShardableIndex> shardable_indices() const override;
    double flops(const FunctionSpec& function) const override;
    double eps() const { return eps_; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    RmsNorm(Attributes attributes, std::vector<TensorType> inputs, double eps);

    double eps_;
};

} // namespace einsummable::ir
