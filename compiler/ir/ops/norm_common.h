#pragma once

#include <string_view>
#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Shared by rmsnorm and layernorm, which normalise x [..., d] over its last dimension and
// scale (and shift) by parameter vectors of length d.

// Checks there are 1 + [min_params, max_params] inputs, x has rank >= 1, and every parameter
// is a vector of x's last-dimension size and dtype.
absl::Status check_norm_inputs(absl::string_view kind, absl::Span<const TensorType> inputs,
                               int min_params, int max_params);
// The dimensions of x before the normalised one.
std::vector<int> leading_dims(const TensorType& x);
// x and the output follow the leading dimensions; parameters are whole.
SpecLayout norm_layout(absl::Span<const TensorType> inputs);
absl::StatusOr<double> norm_eps(const Attributes& attributes);

} // namespace einsummable::ir
