#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::ir {

// Element types of tensors. f64 exists for reference computations; user graphs use the others.
// i32 and i64 (two's complement) carry token ids and indices: only operators that read integers
// take them (embedding's ids); every arithmetic operator refuses them (make_operator).
enum class DType { f16, bf16, f32, f64, i32, i64 };

// Every dtype, in enum order.
inline constexpr DType kAllDTypes[] = {DType::f16, DType::bf16, DType::f32,
                                       DType::f64, DType::i32,  DType::i64};

int64_t dtype_size(DType dtype);
inline constexpr bool is_integer(DType dtype) {
    return dtype == DType::i32 || dtype == DType::i64;
}
absl::string_view dtype_name(DType dtype);
absl::StatusOr<DType> parse_dtype(absl::string_view name);

// IEEE binary16 and bfloat16 conversions (round to nearest even), for storage at kernel
// boundaries and for rounding reference values to a tensor's dtype.
uint16_t float_to_f16(float value);
float f16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bits);

// The value `value` becomes when stored as `dtype` (an integer dtype rounds to nearest and
// saturates at its range).
double round_to_dtype(double value, DType dtype);

} // namespace einsummable::ir
