#pragma once

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::ir {

// The scalar function an einsum applies at every point of its join (EinDecomp's extended
// einsum). Unary functions take one operand, binary ones two; `constant` parameterises the
// unary ones that need it (scale, add_scalar, pow_scalar, leaky_relu).
enum class ScalarFn {
    // unary
    identity,
    neg,
    abs,
    relu,
    gelu,
    silu,
    sigmoid,
    tanh,
    exp,
    log,
    sqrt,
    rsqrt,
    square,
    reciprocal,
    scale,
    add_scalar,
    pow_scalar,
    leaky_relu,
    // binary
    add,
    sub,
    mul,
    div,
    max,
    min,
};

// max and min as NumPy's maximum and minimum compute them (docs/operators.md "Non-finite
// inputs"): NaN in either operand gives NaN, so that a max or min aggregation is NaN whatever
// order a plan combines its parts in; std::max, std::min, fmax and fmin each drop a NaN in one
// of their operands. Otherwise std::max's and std::min's choice (a on ties: max(-0, +0) is -0).
// kernels/scalar_math.h computes the same for the kernels.
inline double propagating_max(double a, double b) {
    return (a >= b || a != a) ? a : b;
}
inline double propagating_min(double a, double b) {
    return (a <= b || a != a) ? a : b;
}

struct ScalarOp {
    ScalarFn fn = ScalarFn::identity;
    double constant = 0.0;

    int arity() const;
    double apply(double x) const;           // unary
    double apply(double x, double y) const; // binary
    absl::string_view name() const;
    // Parses a function name; the error lists the known names.
    static absl::StatusOr<ScalarOp> parse(absl::string_view name, double constant = 0.0);
};

} // namespace einsummable::ir
