#pragma once

#include <string_view>
#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Shared by rmsnorm and layernorm, which normalise x [..., d] over its last dimension and
// scale (and shift) by parameter vectors of length d.

// Checks the attributes (only `eps`, >= 0, default 1e-5) and inputs: 1 + [min_params,
// max_params] of them, x of rank >= 1, every parameter a vector of x's last-dimension size and
// dtype. Returns eps.
absl::StatusOr<double> check_norm(absl::string_view kind, const Attributes& attributes,
                                  absl::Span<const TensorType> inputs, int min_params,
                                  int max_params);

// The shared shape of the two: x's leading dimensions are shardable at any position, x and the
// output follow them, the parameters are read whole, and output boxes never repeat.
class NormOperator : public Operator {
public:
    std::vector<ShardableIndex> shardable_indices() const override;
    // Every leading dimension is a token (a row normalised alone); the normalised one, never
    // split, is a feature of the output.
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    double eps() const { return eps_; }

protected:
    NormOperator(std::vector<TensorType> inputs, double eps);
    SpecLayout layout() const override;
    // The dimensions of x before the normalised one.
    std::vector<int> leading_dims() const;

    double eps_;
};

} // namespace einsummable::ir
