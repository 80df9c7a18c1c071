#include <bit>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "compiler/ir/dense_block.h"
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

// to_f32 / from_f32 convert whole blocks, eight elements at a time with AVX2 and F16C where the
// CPU has them; every element must be bit for bit the scalar functions' (NaN payloads, signed
// zeros, subnormals, ties, overflow), at every length (the tails) and offset.
TEST(DType, BlockConversionsEqualTheScalarFunctionsBitForBit) {
    for (DType dtype : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dtype));
        const bool half = dtype == DType::f16;
        // Every 16-bit pattern, from offset 0 and from offset 3 (unaligned, other tails).
        std::vector<uint16_t> patterns(0x10000);
        for (uint32_t bits = 0; bits < 0x10000u; ++bits) {
            patterns[bits] = static_cast<uint16_t>(bits);
        }
        for (size_t offset : {size_t{0}, size_t{3}}) {
            const int64_t n = static_cast<int64_t>(patterns.size() - offset);
            std::vector<float> widened(n);
            to_f32(dtype, reinterpret_cast<const std::byte*>(patterns.data() + offset),
                   widened.data(), n);
            for (int64_t idx = 0; idx < n; ++idx) {
                const uint16_t bits = patterns[offset + idx];
                const float expected = half ? f16_to_float(bits) : bf16_to_float(bits);
                ASSERT_EQ(std::bit_cast<uint32_t>(widened[idx]), std::bit_cast<uint32_t>(expected))
                    << std::hex << "pattern 0x" << bits;
            }
        }
        // Floats: every pattern's widening (exact values), halfway points between neighbours
        // (ties), edge values, NaNs with payloads, and seeded random bit patterns.
        const uint32_t seed = 20261206;
        std::cout << "seed " << seed << "\n";
        std::mt19937 rng(seed);
        std::vector<float> values;
        for (uint32_t bits = 0; bits < 0x10000u; bits += 7) {
            const float exact = half ? f16_to_float(static_cast<uint16_t>(bits))
                                     : bf16_to_float(static_cast<uint16_t>(bits));
            values.push_back(exact);
            values.push_back(std::nextafter(exact, std::numeric_limits<float>::infinity()));
        }
        for (float edge : {0.0f,
                           -0.0f,
                           65504.0f,
                           65519.996f,
                           65520.0f,
                           -65520.0f,
                           std::ldexp(1.0f, -24),
                           std::ldexp(1.0f, -25),
                           std::ldexp(3.0f, -26),
                           std::numeric_limits<float>::denorm_min(),
                           std::numeric_limits<float>::max(),
                           -std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(),
                           std::bit_cast<float>(0x7fc00001u),
                           std::bit_cast<float>(0xff800001u),
                           std::bit_cast<float>(0x7f800100u),
                           1.0f + std::ldexp(1.0f, -8),
                           1.0f + std::ldexp(1.0f, -11),
                           1.0f + 3 * std::ldexp(1.0f, -11)}) {
            values.push_back(edge);
        }
        for (int draw = 0; draw < 100000; ++draw) {
            values.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
        }
        for (size_t offset : {size_t{0}, size_t{5}}) {
            const int64_t n = static_cast<int64_t>(values.size() - offset);
            std::vector<uint16_t> narrowed(n);
            from_f32(dtype, values.data() + offset, reinterpret_cast<std::byte*>(narrowed.data()),
                     n);
            for (int64_t idx = 0; idx < n; ++idx) {
                const float value = values[offset + idx];
                const uint16_t expected = half ? float_to_f16(value) : float_to_bf16(value);
                ASSERT_EQ(narrowed[idx], expected)
                    << std::hex << "float bits 0x" << std::bit_cast<uint32_t>(value);
            }
        }
    }
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
