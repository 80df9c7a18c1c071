#include "compiler/ir/dtype.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"

namespace einsummable::ir {

int64_t dtype_size(DType dtype) {
    switch (dtype) {
    case DType::f16:
    case DType::bf16:
        return 2;
    case DType::f32:
    case DType::i32:
        return 4;
    case DType::f64:
    case DType::i64:
        return 8;
    }
    return 0;
}

absl::string_view dtype_name(DType dtype) {
    switch (dtype) {
    case DType::f16:
        return "f16";
    case DType::bf16:
        return "bf16";
    case DType::f32:
        return "f32";
    case DType::f64:
        return "f64";
    case DType::i32:
        return "i32";
    case DType::i64:
        return "i64";
    }
    return "?";
}

absl::StatusOr<DType> parse_dtype(absl::string_view name) {
    for (DType dtype : kAllDTypes) {
        if (name == dtype_name(dtype)) {
            return dtype;
        }
    }
    if (name == "float16" || name == "half") {
        return DType::f16;
    }
    if (name == "bfloat16") {
        return DType::bf16;
    }
    if (name == "float32" || name == "float") {
        return DType::f32;
    }
    if (name == "float64" || name == "double") {
        return DType::f64;
    }
    if (name == "int32") {
        return DType::i32;
    }
    if (name == "int64") {
        return DType::i64;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown dtype '", name, "' (expected f16, bf16, f32, f64, i32 or i64)"));
}

uint16_t float_to_f16(float value) {
    const uint32_t f = std::bit_cast<uint32_t>(value);
    const uint32_t sign = (f >> 16) & 0x8000u;
    const uint32_t abs = f & 0x7fffffffu;
    if (abs >= 0x7f800000u) { // inf or nan
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    }
    if (abs >= 0x477ff000u) { // rounds to >= 65520: overflow to inf
        return static_cast<uint16_t>(sign | 0x7c00u);
    }
    if (abs < 0x38800000u) { // below the smallest normal half: subnormal or zero
        // Scale so the half subnormal unit (2^-24) becomes 1, then round to nearest even.
        const float scaled = std::bit_cast<float>(abs) * 16777216.0f; // 2^24
        return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(scaled)));
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits.
    uint32_t half = (abs - 0x38000000u) >> 13;
    const uint32_t rest = abs & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) {
        ++half;
    }
    return static_cast<uint16_t>(sign | half);
}

float f16_to_float(uint16_t bits) {
    const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
    const uint32_t exponent = (bits >> 10) & 0x1fu;
    const uint32_t mantissa = bits & 0x3ffu;
    if (exponent == 0) {
        const float magnitude = static_cast<float>(mantissa) / 16777216.0f; // m * 2^-24
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31) {
        return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
    }
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

uint16_t float_to_bf16(float value) {
    const uint32_t f = std::bit_cast<uint32_t>(value);
    if ((f & 0x7fffffffu) > 0x7f800000u) { // keep nan a (quiet) nan
        return static_cast<uint16_t>((f >> 16) | 0x40u);
    }
    const uint32_t rounding = 0x7fffu + ((f >> 16) & 1u);
    return static_cast<uint16_t>((f + rounding) >> 16);
}

float bf16_to_float(uint16_t bits) {
    return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

namespace {

// Nearest integer of type Int, saturating at its range; NaN becomes 0 (as a cast would not
// define it).
template <typename Int>
double round_to_integer(double value) {
    if (std::isnan(value)) {
        return 0.0;
    }
    const double lo = static_cast<double>(std::numeric_limits<Int>::min());
    const double hi = static_cast<double>(std::numeric_limits<Int>::max());
    return std::clamp(std::nearbyint(value), lo, hi);
}

} // namespace

double round_to_dtype(double value, DType dtype) {
    switch (dtype) {
    case DType::f16:
        return f16_to_float(float_to_f16(static_cast<float>(value)));
    case DType::bf16:
        return bf16_to_float(float_to_bf16(static_cast<float>(value)));
    case DType::f32:
        return static_cast<float>(value);
    case DType::f64:
        return value;
    case DType::i32:
        return round_to_integer<int32_t>(value);
    case DType::i64:
        return round_to_integer<int64_t>(value);
    }
    return value;
}

} // namespace einsummable::ir
