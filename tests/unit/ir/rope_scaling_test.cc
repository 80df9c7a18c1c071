// Rope's frequency scaling (compiler/ir/ops/rope.h): transformers' "linear" and "llama3"
// rope_scaling written out by hand for a small head dimension, the attributes kept only when
// scaling is on, and the errors naming the attribute. That scaled rope's specs, kernels and
// graph round-trip agree with its reference is the generic suites' (random_cases.cc draws
// scaling in two thirds of its rope cases).

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/rope.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;

const TensorType kX{DType::f32, {{"tokens", 4}, {"heads", 2}, {"d_head", 8}}};

absl::StatusOr<OperatorPtr> rope(const Attributes& attributes) {
    return make_operator(Rope::kKind, attributes, {kX});
}

const std::vector<double>& frequencies_of(const OperatorPtr& op) {
    return dynamic_cast<const Rope&>(*op).frequencies();
}

TEST(RopeScaling, NoScalingIsThetaToTheMinusTwoIOverD) {
    absl::StatusOr<OperatorPtr> op = rope({{"theta", 500000.0}});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_FALSE((*op)->attributes().values().contains("scaling")); // unchanged descriptions
    const std::vector<double>& frequencies = frequencies_of(*op);
    ASSERT_EQ(frequencies.size(), 4u);
    for (int i = 0; i < 4; ++i) {
        EXPECT_DOUBLE_EQ(frequencies[i], std::pow(500000.0, -2.0 * i / 8.0)) << i;
    }
}

TEST(RopeScaling, LinearDividesEveryFrequency) {
    absl::StatusOr<OperatorPtr> op =
        rope({{"theta", 10000.0}, {"scaling", std::string("linear")}, {"scaling_factor", 4.0}});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<double>& frequencies = frequencies_of(*op);
    for (int i = 0; i < 4; ++i) {
        EXPECT_DOUBLE_EQ(frequencies[i], std::pow(10000.0, -2.0 * i / 8.0) / 4.0) << i;
    }
}

// theta 100, d 8: frequencies 1, 100^-1/4, 100^-1/2, 100^-3/4 have wavelengths 6.28, 19.9, 62.8
// and 199; with L = 64, low 1 and high 4 the bands are w < 16 (kept), 16 <= w <= 64 (blended)
// and w > 64 (divided by the factor 8).
TEST(RopeScaling, Llama3KeepsHighBlendsMiddleAndDividesLowFrequencies) {
    absl::StatusOr<OperatorPtr> op = rope({{"theta", 100.0},
                                           {"scaling", std::string("llama3")},
                                           {"scaling_factor", 8.0},
                                           {"low_freq_factor", 1.0},
                                           {"high_freq_factor", 4.0},
                                           {"original_max_position", int64_t{64}}});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ((*op)->attributes().get_string("scaling").value(), "llama3");
    const std::vector<double>& frequencies = frequencies_of(*op);
    const auto blended = [](double frequency) {
        const double wavelength = 2.0 * std::numbers::pi / frequency;
        const double smooth = (64.0 / wavelength - 1.0) / (4.0 - 1.0);
        return (1.0 - smooth) * frequency / 8.0 + smooth * frequency;
    };
    EXPECT_DOUBLE_EQ(frequencies[0], 1.0);
    EXPECT_DOUBLE_EQ(frequencies[1], blended(std::pow(100.0, -0.25)));
    EXPECT_DOUBLE_EQ(frequencies[2], blended(0.1));
    EXPECT_DOUBLE_EQ(frequencies[3], std::pow(100.0, -0.75) / 8.0);
}

TEST(RopeScaling, ErrorsNameTheAttribute) {
    EXPECT_THAT(
        rope({{"scaling", std::string("yarn")}, {"scaling_factor", 2.0}}).status().message(),
        HasSubstr("rope scaling 'yarn' is unknown"));
    EXPECT_THAT(rope({{"scaling", std::string("linear")}}).status().message(),
                HasSubstr("scaling_factor"));
    EXPECT_THAT(
        rope({{"scaling", std::string("linear")}, {"scaling_factor", -1.0}}).status().message(),
        HasSubstr("scaling_factor must be > 0"));
    EXPECT_THAT(rope({{"scaling_factor", 2.0}}).status().message(),
                HasSubstr("'scaling_factor' needs scaling"));
    EXPECT_THAT(rope({{"scaling", std::string("llama3")},
                      {"scaling_factor", 8.0},
                      {"low_freq_factor", 4.0},
                      {"high_freq_factor", 1.0},
                      {"original_max_position", int64_t{64}}})
                    .status()
                    .message(),
                HasSubstr("0 < low_freq_factor < high_freq_factor"));
}

} // namespace
} // namespace einsummable::ir
