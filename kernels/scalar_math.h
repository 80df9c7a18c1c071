#pragma once

// The scalar functions of an einsum's join (ir::ScalarFn) and the ⊕ of its aggregation, written
// once for the CPU kernels (kernels/cpu/einsum_f32.cc) and the CUDA kernels
// (kernels/cuda/einsum_generic.cu), so both backends compute the same formula with the same NaN
// and signed-zero behaviour as the reference (ir::ScalarOp::apply). T is float or double: the
// kernels compute in f32, or in f64 for f64 storage.
//
// C++17 and free of absl, since nvcc compiles it. Tests: tests/unit/kernels/scalar_math_test.cc.

#include <math.h>

#if defined(__CUDACC__)
#define EINSUMMABLE_HOST_DEVICE __host__ __device__
#else
#define EINSUMMABLE_HOST_DEVICE
#endif

namespace einsummable::kernels {

// ir::ScalarFn by value (compiler/ir/scalar_op.h includes absl, which this header must not).
// kernels/scalar_math_ir.h converts and static_asserts that the two agree.
enum class ScalarMathFn : int {
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
    add,
    sub,
    mul,
    div,
    max,
    min,
};

namespace scalar_math {

// The C library's functions in the type's own precision (expf for float: a call through the
// double overload would compute in f64 on the device). Global names on purpose: nvcc declares
// the device versions there, and the host's <math.h> does too.
EINSUMMABLE_HOST_DEVICE inline float libm_exp(float x) {
    return ::expf(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_exp(double x) {
    return ::exp(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_erf(float x) {
    return ::erff(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_erf(double x) {
    return ::erf(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_tanh(float x) {
    return ::tanhf(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_tanh(double x) {
    return ::tanh(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_log(float x) {
    return ::logf(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_log(double x) {
    return ::log(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_sqrt(float x) {
    return ::sqrtf(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_sqrt(double x) {
    return ::sqrt(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_fabs(float x) {
    return ::fabsf(x);
}
EINSUMMABLE_HOST_DEVICE inline double libm_fabs(double x) {
    return ::fabs(x);
}
EINSUMMABLE_HOST_DEVICE inline float libm_pow(float x, float y) {
    return ::powf(x, y);
}
EINSUMMABLE_HOST_DEVICE inline double libm_pow(double x, double y) {
    return ::pow(x, y);
}

// The exponential the exp-based functions use unless the caller passes its own: the CPU kernels
// pass their vectorisable fast_exp (kernels/cpu/vector_math.h, within a few ulp of this one).
struct LibmExp {
    template <typename T>
    EINSUMMABLE_HOST_DEVICE T operator()(T x) const {
        return libm_exp(x);
    }
};

// ---- unary ----------------------------------------------------------------------------------

template <typename T>
EINSUMMABLE_HOST_DEVICE inline T identity(T x) {
    return x;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T neg(T x) {
    return -x;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T abs(T x) {
    return libm_fabs(x);
}
// A comparison rather than fmax, so that NaN passes through and -0 stays -0.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T relu(T x) {
    return x < T(0) ? T(0) : x;
}
// The exact (erf) form, as ir::ScalarOp::apply; x·(1/√2) rather than x/√2 keeps f32 in one
// rounding (at most an ulp from the reference's division in f64).
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T gelu(T x) {
    return T(0.5) * x * (T(1) + libm_erf(x * T(0.70710678118654752440)));
}
template <typename T, typename Exp = LibmExp>
EINSUMMABLE_HOST_DEVICE inline T silu(T x, Exp exp = Exp()) {
    return x / (T(1) + exp(-x));
}
template <typename T, typename Exp = LibmExp>
EINSUMMABLE_HOST_DEVICE inline T sigmoid(T x, Exp exp = Exp()) {
    return T(1) / (T(1) + exp(-x));
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T tanh(T x) {
    return libm_tanh(x);
}
template <typename T, typename Exp = LibmExp>
EINSUMMABLE_HOST_DEVICE inline T exp(T x, Exp exp_fn = Exp()) {
    return exp_fn(x);
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T log(T x) {
    return libm_log(x);
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T sqrt(T x) {
    return libm_sqrt(x);
}
// 1/sqrt(x) in two roundings, as the reference; rsqrtf would differ by an ulp or two.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T rsqrt(T x) {
    return T(1) / libm_sqrt(x);
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T square(T x) {
    return x * x;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T reciprocal(T x) {
    return T(1) / x;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T scale(T x, T constant) {
    return x * constant;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T add_scalar(T x, T constant) {
    return x + constant;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T pow_scalar(T x, T constant) {
    return libm_pow(x, constant);
}
// x > 0 rather than x < 0: NaN takes the x·constant branch, which keeps it NaN.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T leaky_relu(T x, T constant) {
    return x > T(0) ? x : x * constant;
}

// ---- binary ---------------------------------------------------------------------------------

template <typename T>
EINSUMMABLE_HOST_DEVICE inline T add(T x, T y) {
    return x + y;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T sub(T x, T y) {
    return x - y;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T mul(T x, T y) {
    return x * y;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T div(T x, T y) {
    return x / y;
}
// NaN in either operand gives NaN (NumPy's maximum and minimum; docs/operators.md "Non-finite
// inputs"): a max or min aggregation must give NaN whatever order a plan combines its parts in,
// which std::max, std::min, fmax and fmin do not (each drops a NaN in one operand). Otherwise
// std::max's and std::min's choice: x on ties (max(-0, +0) is -0). One compare and a select
// per element, which vectorises; ir::ScalarOp::apply and ir::aggregate compute the same.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T max(T x, T y) {
    return (x >= y || x != x) ? x : y;
}
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T min(T x, T y) {
    return (x <= y || x != x) ? x : y;
}
// argmax's choice between the elements a and b at indices ia and ib: the larger, NaN larger than
// any number, and between equals (two NaN too) the smaller index — so the first largest element
// wins whatever order a kernel or the arg_max ⊕ compares in (ir::arg_max_wins, the reference's).
template <typename T, typename I>
EINSUMMABLE_HOST_DEVICE inline bool arg_max_wins(T a, I ia, T b, I ib) {
    const bool a_nan = a != a;
    const bool b_nan = b != b;
    if (a_nan != b_nan) {
        return a_nan;
    }
    if (!a_nan && a != b) {
        return a > b;
    }
    return ia < ib;
}

// ---- by code, for kernels that switch per element (a warp-uniform branch on the GPU) ---------

// A unary function; identity for a binary code, as ir::ScalarOp::apply(x) does.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T apply_unary(ScalarMathFn fn, T x, T constant) {
    switch (fn) {
    case ScalarMathFn::neg:
        return neg(x);
    case ScalarMathFn::abs:
        return abs(x);
    case ScalarMathFn::relu:
        return relu(x);
    case ScalarMathFn::gelu:
        return gelu(x);
    case ScalarMathFn::silu:
        return silu(x);
    case ScalarMathFn::sigmoid:
        return sigmoid(x);
    case ScalarMathFn::tanh:
        return tanh(x);
    case ScalarMathFn::exp:
        return exp(x);
    case ScalarMathFn::log:
        return log(x);
    case ScalarMathFn::sqrt:
        return sqrt(x);
    case ScalarMathFn::rsqrt:
        return rsqrt(x);
    case ScalarMathFn::square:
        return square(x);
    case ScalarMathFn::reciprocal:
        return reciprocal(x);
    case ScalarMathFn::scale:
        return scale(x, constant);
    case ScalarMathFn::add_scalar:
        return add_scalar(x, constant);
    case ScalarMathFn::pow_scalar:
        return pow_scalar(x, constant);
    case ScalarMathFn::leaky_relu:
        return leaky_relu(x, constant);
    default:
        return x;
    }
}

// A binary function; x for a unary code, as ir::ScalarOp::apply(x, y) does.
template <typename T>
EINSUMMABLE_HOST_DEVICE inline T apply_binary(ScalarMathFn fn, T x, T y) {
    switch (fn) {
    case ScalarMathFn::add:
        return add(x, y);
    case ScalarMathFn::sub:
        return sub(x, y);
    case ScalarMathFn::mul:
        return mul(x, y);
    case ScalarMathFn::div:
        return div(x, y);
    case ScalarMathFn::max:
        return max(x, y);
    case ScalarMathFn::min:
        return min(x, y);
    default:
        return x;
    }
}

EINSUMMABLE_HOST_DEVICE constexpr bool is_binary(ScalarMathFn fn) {
    return static_cast<int>(fn) >= static_cast<int>(ScalarMathFn::add);
}

} // namespace scalar_math
} // namespace einsummable::kernels
