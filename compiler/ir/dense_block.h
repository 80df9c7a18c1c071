#pragma once

#include <cstddef>
#include <cstdint>

#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"

namespace einsummable::ir {

// Dense row-major blocks of bytes in host memory. A block's shape is its box's shape.

// Copies the elements of `region` from the block `src` (covering src_box) into the block `dst`
// (covering dst_box); region must lie inside both boxes. Element size in bytes, any dtype.
void copy_region(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
                 const Box& region, int64_t element_bytes);

// Storage conversions at the kernel boundary (f16/bf16 round to nearest even; f64 narrows;
// f32 is a plain copy; integers convert exactly below 2^24, and from f32 round to nearest,
// saturating).
void to_f32(DType dtype, const std::byte* src, float* dst, int64_t n);
void from_f32(DType dtype, const float* src, std::byte* dst, int64_t n);

} // namespace einsummable::ir
