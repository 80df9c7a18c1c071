#pragma once

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// LayerNorm over the last dimension: y = (x - mean) / sqrt(var + eps) * gamma (+ beta). Inputs
// x [..., d], gamma [d] and optionally beta [d]; attribute eps (default 1e-5). The normalised
// (last) dimension is never split; the leading ones are shardable at any position.
class LayerNorm final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    absl::string_view kind() const override { return "layernorm"; }
    std::vector<ShardableIndex> shardable_indices() const override;
    double flops(const FunctionSpec& function) const override;
    double eps() const { return eps_; }

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    LayerNorm(Attributes attributes, std::vector<TensorType> inputs, double eps);

    double eps_;
};

} // namespace einsummable::ir
