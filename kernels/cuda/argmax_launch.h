#pragma once

// The launches behind the CUDA argmax kernel and its arg_max ⊕ (argmax.cc checks the blocks,
// block_ops.cc the aggregate's arguments; argmax.cu holds the kernels). C++17, as every header
// shared with .cu files.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

// Per row r < rows of x (`width` elements in `dtype`, row-major): out[r] = first_index + the
// position of its first largest element (NaN larger than any number, the first NaN winning),
// as int64, and, when out_stats is not null, out_stats[r] = that element as f32 (a partial
// result of the arg_max ⊕). One warp per row.
cudaError_t launch_argmax(ir::DType dtype, const void* x, int64_t rows, int64_t width,
                          int64_t first_index, int64_t* out, float* out_stats, cudaStream_t stream);

// The arg_max ⊕ of partial results (ir::combine_arg_max): per vector v < vectors, the index of
// the part whose statistic is largest (NaN largest, ties to the smaller index), and its
// statistic when out_stats is not null. 1 <= num_parts <= kMaxArgMaxParts; out and out_stats may
// be parts[0] and stats[0].
inline constexpr int kMaxArgMaxParts = 128;
cudaError_t launch_aggregate_arg_max(const int64_t* const* parts, const float* const* stats,
                                     int num_parts, int64_t* out, float* out_stats, int64_t vectors,
                                     cudaStream_t stream);

} // namespace einsummable::kernels::cuda
