#include <cmath>
#include <limits>

#include "compiler/ir/dtype.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

TEST(DType, SizesNamesAndParsing) {
    EXPECT_EQ(dtype_size(DType::f16), 2);
    EXPECT_EQ(dtype_size(DType::bf16), 2);
    EXPECT_EQ(dtype_size(DType::f32), 4);
    EXPECT_EQ(dtype_size(DType::f64), 8);
    for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
        EXPECT_EQ(*parse_dtype(dtype_name(dtype)), dtype);
    }
    EXPECT_EQ(*parse_dtype("float16"), DType::f16);
    const absl::StatusOr<DType> bad = parse_dtype("int8");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("'int8'"), absl::string_view::npos);
}

TEST(DType, HalfKnownBitPatterns) {
    EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);              // largest finite half
    EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);              // rounds to infinity
    EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001); // smallest subnormal
    EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
    EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00) << "tie rounds to even";
    EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02) << "tie rounds to even";
    EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(std::numeric_limits<float>::quiet_NaN()))));
    EXPECT_EQ(f16_to_float(0x7c00), std::numeric_limits<float>::infinity());
}

TEST(DType, HalfRoundTripsEveryFiniteValue) {
    for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
        const uint16_t half = static_cast<uint16_t>(bits);
        if ((half & 0x7c00u) == 0x7c00u) {
            continue; // inf and nan
        }
        EXPECT_EQ(float_to_f16(f16_to_float(half)), half) << std::hex << bits;
    }
}

TEST(DType, Bfloat16) {
    EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
    EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80) << "tie rounds to even";
    EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82) << "tie rounds to even";
    EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, RoundToDtype) {
    EXPECT_EQ(round_to_dtype(0.1, DType::f64), 0.1);
    EXPECT_EQ(round_to_dtype(0.1, DType::f32), static_cast<double>(0.1f));
    EXPECT_NEAR(round_to_dtype(0.1, DType::f16), 0.1, 1e-4);
    EXPECT_NE(round_to_dtype(0.1, DType::f16), static_cast<double>(0.1f));
    EXPECT_NEAR(round_to_dtype(0.1, DType::bf16), 0.1, 1e-3);
}

} // namespace
} // namespace einsummable::ir
