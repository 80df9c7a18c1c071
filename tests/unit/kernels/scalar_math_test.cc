// kernels/scalar_math.h against ir::ScalarOp::apply (the reference every backend must match), on
// edge values (signed zeros, subnormals, overflow, ±inf, NaN in either operand) and seeded random
// values. The f64 versions must agree with the reference to an ulp or two; the f32 versions with
// the reference rounded to f32 within a few ulp. Replay with EINSUMMABLE_TEST_SEED=<printed seed>.

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/scalar_op.h"
#include "gtest/gtest.h"
#include "kernels/scalar_math.h"
#include "kernels/scalar_math_ir.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

const std::vector<ir::ScalarFn> kUnary = {
    ir::ScalarFn::identity,   ir::ScalarFn::neg,        ir::ScalarFn::abs,
    ir::ScalarFn::relu,       ir::ScalarFn::gelu,       ir::ScalarFn::silu,
    ir::ScalarFn::sigmoid,    ir::ScalarFn::tanh,       ir::ScalarFn::exp,
    ir::ScalarFn::log,        ir::ScalarFn::sqrt,       ir::ScalarFn::rsqrt,
    ir::ScalarFn::square,     ir::ScalarFn::reciprocal, ir::ScalarFn::scale,
    ir::ScalarFn::add_scalar, ir::ScalarFn::pow_scalar, ir::ScalarFn::leaky_relu,
};
const std::vector<ir::ScalarFn> kBinary = {ir::ScalarFn::add, ir::ScalarFn::sub, ir::ScalarFn::mul,
                                           ir::ScalarFn::div, ir::ScalarFn::max, ir::ScalarFn::min};

std::vector<double> constants_for(ir::ScalarFn fn) {
    switch (fn) {
    case ir::ScalarFn::scale:
    case ir::ScalarFn::add_scalar:
    case ir::ScalarFn::leaky_relu:
        return {-2.0, -0.1, 0.0, 0.01, 0.5, 3.0};
    case ir::ScalarFn::pow_scalar:
        return {-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 2.5, 3.0};
    default:
        return {0.0};
    }
}

// Every value is exactly representable in f32, so the f32 and f64 versions see the same input.
std::vector<float> test_values(uint64_t seed) {
    std::vector<float> values = {0.0f,
                                 -0.0f,
                                 1.0f,
                                 -1.0f,
                                 0.5f,
                                 -0.5f,
                                 2.0f,
                                 -2.0f,
                                 3.0f,
                                 -3.0f,
                                 0.1f,
                                 -0.1f,
                                 10.0f,
                                 -10.0f,
                                 20.0f,
                                 -20.0f,
                                 88.0f,
                                 -88.0f,
                                 89.0f,
                                 -89.0f,
                                 100.0f,
                                 -100.0f,
                                 1e-30f,
                                 -1e-30f,
                                 1e-40f,
                                 -1e-40f,
                                 FLT_MIN,
                                 -FLT_MIN,
                                 FLT_MAX,
                                 -FLT_MAX,
                                 1e30f,
                                 -1e30f,
                                 3.14159f,
                                 1e-7f,
                                 -1e-7f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN()};
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> near(-8.0f, 8.0f);
    std::uniform_real_distribution<float> exponent(-40.0f, 40.0f);
    for (int idx = 0; idx < 2000; ++idx) {
        values.push_back(near(rng));
    }
    for (int idx = 0; idx < 500; ++idx) {
        const float magnitude = std::pow(10.0f, exponent(rng));
        values.push_back(idx % 2 == 0 ? magnitude : -magnitude);
    }
    return values;
}

double ulp_of(double value, double epsilon) {
    return std::max(std::abs(value) * epsilon, std::numeric_limits<double>::denorm_min());
}

// got agrees with expected: the same NaN-ness, the same infinity, the same signed zero, and
// otherwise within `ulps` units of `epsilon` relative to expected, plus `slack`.
::testing::AssertionResult agrees(double got, double expected, double ulps, double epsilon,
                                  double slack) {
    slack = std::isfinite(slack) ? slack : 0.0; // slack scaled by a NaN or infinite input
    const bool same =
        (std::isnan(got) && std::isnan(expected)) || (std::isinf(expected) && got == expected) ||
        (expected == 0.0 && got == 0.0 && std::signbit(got) == std::signbit(expected)) ||
        (std::isfinite(got) && std::isfinite(expected) && expected != 0.0 &&
         std::abs(got - expected) <= ulps * ulp_of(expected, epsilon) + slack) ||
        (std::isfinite(got) && expected == 0.0 && std::abs(got) <= slack);
    if (same) {
        return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "got " << got << ", expected " << expected
                                         << " (difference " << got - expected << ")";
}

uint64_t seed_for_test() {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "scalar_math_test seed " << seed << "\n";
    return seed;
}

TEST(ScalarMathTest, UnaryF64MatchesReference) {
    const std::vector<float> values = test_values(seed_for_test());
    for (ir::ScalarFn fn : kUnary) {
        for (double constant : constants_for(fn)) {
            const ir::ScalarOp op{fn, constant};
            for (float value : values) {
                const double x = value;
                const double expected = op.apply(x);
                const double got = scalar_math::apply_unary(scalar_math_fn(fn), x, constant);
                // gelu multiplies by 1/√2 where the reference divides by √2; near x = -∞ the
                // 1 + erf(...) cancels and that ulp grows relative to the result, not to x.
                const double slack =
                    fn == ir::ScalarFn::gelu ? 4.0 * DBL_EPSILON * std::abs(x) : 0.0;
                EXPECT_TRUE(agrees(got, expected, 2.0, DBL_EPSILON, slack))
                    << op.name() << "(" << x << ") constant " << constant;
            }
        }
    }
}

TEST(ScalarMathTest, UnaryF32MatchesReferenceRoundedToF32) {
    const std::vector<float> values = test_values(seed_for_test());
    for (ir::ScalarFn fn : kUnary) {
        for (double constant : constants_for(fn)) {
            // The kernels take the constant as f32 (static_cast<float>(op.constant)).
            const float constant_f32 = static_cast<float>(constant);
            const ir::ScalarOp op{fn, static_cast<double>(constant_f32)};
            for (float x : values) {
                const double reference = op.apply(static_cast<double>(x));
                const auto expected = static_cast<double>(static_cast<float>(reference));
                const auto got = static_cast<double>(
                    scalar_math::apply_unary(scalar_math_fn(fn), x, constant_f32));
                // f32 libm calls are within an ulp or two; silu and sigmoid compound two. Results
                // near the bottom of the f32 range may differ by about FLT_MIN·|x| (silu(-89):
                // exp(89) overflows f32, so x / inf is -0 where the reference has -2e-37), and
                // gelu's cancellation for negative x scales with |x| as in the f64 test.
                double slack = FLT_MIN * (1.0 + std::abs(static_cast<double>(x)));
                if (fn == ir::ScalarFn::gelu) {
                    slack += 4.0 * FLT_EPSILON * std::abs(static_cast<double>(x));
                }
                EXPECT_TRUE(agrees(got, expected, 4.0, FLT_EPSILON, slack))
                    << op.name() << "(" << x << ") constant " << constant_f32;
            }
        }
    }
}

TEST(ScalarMathTest, BinaryMatchesReferenceExactly) {
    std::vector<float> values = {0.0f,
                                 -0.0f,
                                 1.0f,
                                 -1.0f,
                                 0.5f,
                                 3.0f,
                                 -7.0f,
                                 1e-40f,
                                 FLT_MAX,
                                 1e30f,
                                 -1e-30f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN()};
    std::mt19937_64 rng(seed_for_test());
    std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
    for (int idx = 0; idx < 60; ++idx) {
        values.push_back(dist(rng));
    }
    for (ir::ScalarFn fn : kBinary) {
        const ir::ScalarOp op{fn, 0.0};
        for (float x : values) {
            for (float y : values) {
                const double expected = op.apply(x, y);
                // +, -, ×, ÷ of two f32 values computed in f64 and rounded once are the correctly
                // rounded f32 result, so the f32 version must match exactly; max and min must
                // give NaN for a NaN in either operand, as the reference does.
                const auto expected_f32 = static_cast<double>(static_cast<float>(expected));
                const auto got_f32 =
                    static_cast<double>(scalar_math::apply_binary(scalar_math_fn(fn), x, y));
                EXPECT_TRUE(agrees(got_f32, expected_f32, 0.0, FLT_EPSILON, 0.0))
                    << op.name() << "(" << x << ", " << y << ") in f32";
                const double got_f64 = scalar_math::apply_binary(
                    scalar_math_fn(fn), static_cast<double>(x), static_cast<double>(y));
                EXPECT_TRUE(agrees(got_f64, expected, 0.0, DBL_EPSILON, 0.0))
                    << op.name() << "(" << x << ", " << y << ") in f64";
            }
        }
    }
}

TEST(ScalarMathTest, MaxAndMinGiveNaNWhenEitherOperandIsNaN) {
    // The aggregations rely on it: a running max that starts at -inf, or parts
    // combined in any order, give NaN as soon as one value is NaN.
    for (double value : {1.0, -kInf, kInf, kNaN}) {
        EXPECT_TRUE(std::isnan(scalar_math::max(kNaN, value))) << value;
        EXPECT_TRUE(std::isnan(scalar_math::max(value, kNaN))) << value;
        EXPECT_TRUE(std::isnan(scalar_math::min(kNaN, value))) << value;
        EXPECT_TRUE(std::isnan(scalar_math::min(value, kNaN))) << value;
        EXPECT_TRUE(std::isnan(scalar_math::max(static_cast<float>(value), NAN))) << value;
        EXPECT_TRUE(std::isnan(scalar_math::min(static_cast<float>(value), NAN))) << value;
        EXPECT_TRUE(std::isnan(ir::propagating_max(value, kNaN))) << value;
        EXPECT_TRUE(std::isnan(ir::propagating_min(value, kNaN))) << value;
    }
    EXPECT_EQ(scalar_math::max(-kInf, 1.0), 1.0);
    EXPECT_EQ(scalar_math::min(kInf, 1.0), 1.0);
    // Equal operands (±0): std::max and std::min return the first.
    EXPECT_TRUE(std::signbit(scalar_math::max(-0.0f, 0.0f)));
    EXPECT_FALSE(std::signbit(scalar_math::min(0.0f, -0.0f)));
}

TEST(ScalarMathTest, ExpBasedFunctionsUseTheGivenExponential) {
    // The CPU kernels pass their own exp; the formula around it must stay the reference's.
    struct ConstantExp {
        float operator()(float) const { return 3.0f; }
    };
    EXPECT_EQ(scalar_math::exp(0.25f, ConstantExp()), 3.0f);
    EXPECT_EQ(scalar_math::sigmoid(0.25f, ConstantExp()), 0.25f); // 1 / (1 + 3)
    EXPECT_EQ(scalar_math::silu(2.0f, ConstantExp()), 0.5f);      // 2 / (1 + 3)
    EXPECT_FLOAT_EQ(scalar_math::silu(2.0f), static_cast<float>(2.0 / (1.0 + std::exp(-2.0))));
}

TEST(ScalarMathTest, ArityMatchesReference) {
    for (ir::ScalarFn fn : kUnary) {
        EXPECT_FALSE(scalar_math::is_binary(scalar_math_fn(fn))) << ir::ScalarOp{fn, 0.0}.name();
        EXPECT_EQ((ir::ScalarOp{fn, 0.0}.arity()), 1);
    }
    for (ir::ScalarFn fn : kBinary) {
        EXPECT_TRUE(scalar_math::is_binary(scalar_math_fn(fn))) << ir::ScalarOp{fn, 0.0}.name();
        EXPECT_EQ((ir::ScalarOp{fn, 0.0}.arity()), 2);
    }
}

} // namespace
} // namespace einsummable::kernels
