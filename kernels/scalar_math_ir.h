#pragma once

// ir::ScalarFn to kernels/scalar_math.h's ScalarMathFn, for host code that sees both (the CUDA
// einsum's planning, the tests). scalar_math.h cannot include compiler/ir (nvcc compiles it and
// ir brings absl), so it mirrors the enum by value; the static_asserts keep the two in step.

#include "compiler/ir/scalar_op.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels {

#define EINSUMMABLE_SAME_FN(name)                                                                  \
    static_assert(static_cast<int>(ir::ScalarFn::name) == static_cast<int>(ScalarMathFn::name))
EINSUMMABLE_SAME_FN(identity);
EINSUMMABLE_SAME_FN(neg);
EINSUMMABLE_SAME_FN(abs);
EINSUMMABLE_SAME_FN(relu);
EINSUMMABLE_SAME_FN(gelu);
EINSUMMABLE_SAME_FN(silu);
EINSUMMABLE_SAME_FN(sigmoid);
EINSUMMABLE_SAME_FN(tanh);
EINSUMMABLE_SAME_FN(exp);
EINSUMMABLE_SAME_FN(log);
EINSUMMABLE_SAME_FN(sqrt);
EINSUMMABLE_SAME_FN(rsqrt);
EINSUMMABLE_SAME_FN(square);
EINSUMMABLE_SAME_FN(reciprocal);
EINSUMMABLE_SAME_FN(scale);
EINSUMMABLE_SAME_FN(add_scalar);
EINSUMMABLE_SAME_FN(pow_scalar);
EINSUMMABLE_SAME_FN(leaky_relu);
EINSUMMABLE_SAME_FN(add);
EINSUMMABLE_SAME_FN(sub);
EINSUMMABLE_SAME_FN(mul);
EINSUMMABLE_SAME_FN(div);
EINSUMMABLE_SAME_FN(max);
EINSUMMABLE_SAME_FN(min);
#undef EINSUMMABLE_SAME_FN

inline ScalarMathFn scalar_math_fn(ir::ScalarFn fn) {
    return static_cast<ScalarMathFn>(static_cast<int>(fn));
}

} // namespace einsummable::kernels
