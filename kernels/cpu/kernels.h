#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"

namespace einsummable::kernels::cpu {

// The CPU runtime's kernels (runtime/cpu): f32 compute on dense row-major blocks. A block's
// shape is its box's shape; absolute positions (RoPE, causal masks, sequence ends) come from
// the boxes in `function`. Nothing here allocates per call in steady state: temporaries live in
// thread-local scratch that only grows.

// Runs `op` on one function spec. inputs[i] holds function.inputs[i], outputs[j] receives
// function.outputs[j] (every element written). Every registered operator kind is supported:
//   einsum  — contractions (two operands, join mul, agg sum) through cblas_sgemm, one call
//             per batch element, packing operands only when they are not already [b, m, k] /
//             [b, k, n] or a transpose of it; other einsums (unary/binary scalar joins with
//             broadcasting, reductions with sum/max/min, transposes) through strided loops;
//   softmax, rmsnorm, layernorm, rope, split_heads, merge_heads;
//   attention — flash-style (key tiles, online softmax), GQA, causal, packed sequences.
// InvalidArgument naming the operator for an unsupported kind or a block count mismatch.
absl::Status run_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                     absl::Span<const float* const> inputs, absl::Span<float* const> outputs);

// out[i] = parts[0][i] ⊕ parts[1][i] ⊕ ... for i < n (n >= 1 part; out may alias no part).
void aggregate_f32(ir::AggOp op, absl::Span<const float* const> parts, float* out, int64_t n);

// Copies the elements of `region` from the block `src` (covering src_box) into the block `dst`
// (covering dst_box); region must lie inside both boxes. Element size in bytes, any dtype.
void copy_region(const std::byte* src, const ir::Box& src_box, std::byte* dst,
                 const ir::Box& dst_box, const ir::Box& region, int64_t element_bytes);

// Storage conversions at the kernel boundary (f16/bf16 round to nearest even; f64 narrows;
// f32 is a plain copy).
void to_f32(ir::DType dtype, const std::byte* src, float* dst, int64_t n);
void from_f32(ir::DType dtype, const float* src, std::byte* dst, int64_t n);

} // namespace einsummable::kernels::cpu
