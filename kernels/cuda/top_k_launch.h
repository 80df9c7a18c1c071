#pragma once

// The launches behind the CUDA top_k kernel and its top_k ⊕ (top_k.cc checks the blocks,
// block_ops.cc the aggregate's arguments; top_k.cu holds the kernels). C++17, as every header
// shared with .cu files.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

// The largest k either launch takes (ir::TopK::kMaxK, static_asserted in top_k.cc): a row's k
// pairs live in shared memory.
inline constexpr int64_t kMaxTopK = 1024;

// Per row r < rows of x (`width` elements in `x_dtype`, row-major; f16, bf16, f32 or f64): the
// row's min(width, k) best (value, index) pairs, best first by argmax's rule
// (scalar_math::arg_max_wins: larger, NaN larger than any number, ties to the smaller index),
// each index first_index + its column, then (-inf, vocab) up to k pairs — written to
// out[r · 2k ...] in f32 (f64 for f64 x), as ir::TopK's output. Compared in that dtype. One thread
// block per row: chunks of the row filtered against the row's k-th best so far, the survivors
// sorted and merged into the row's list. 1 <= k <= kMaxTopK, 0 <= width < 2^31.
cudaError_t launch_top_k(ir::DType x_dtype, const void* x, int64_t rows, int64_t width,
                         int64_t first_index, int64_t vocab, int64_t k, void* out,
                         cudaStream_t stream);

// The top_k ⊕ of partial results (ir::merge_top_k folded over the parts, as the CPU backend's
// aggregate_top_k_f32): every part `rows` rows of k (value, index) pairs in `dtype` (f32 or
// f64, the operator's pairs), each row best first; out gets per row the k best of every part's row,
// best first (a stable merge: of two equal pairs, the earlier part's first). 1 <= num_parts <=
// kMaxTopKParts, 1 <= k <= kMaxTopK. out may be parts[0] itself (each row is read whole before
// it is written) but may overlap no other part. One thread block per row.
inline constexpr int kMaxTopKParts = 128;
cudaError_t launch_aggregate_top_k(ir::DType dtype, const void* const* parts, int num_parts,
                                   void* out, int64_t rows, int64_t k, cudaStream_t stream);

} // namespace einsummable::kernels::cuda
