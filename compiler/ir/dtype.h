#pragma once

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::ir {

// Element types of tensors. f64 exists for reference computations; user graphs use the others.
enum class DType { f16, bf16, f32, f64 };

int64_t dtype_size(DType dtype);
absl::string_view dtype_name(DType dtype);
absl::StatusOr<DType> parse_dtype(absl::string_view name);

// IEEE binary16 and bfloat16 conversions (round to nearest even), for storage at kernel
// boundaries and for rounding reference values to a tensor's dtype.
uint16_t float_to_f16(float value);
float f16_to_float(uint16_t bits);
uint16_t float_to_bf16(float value);
float bf16_to_float(uint16_t bits);

// The value `value` becomes when stored as `dtype`.
double round_to_dtype(double value, DType dtype);

} // namespace einsummable::ir
