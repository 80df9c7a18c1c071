#pragma once

// The launches behind the row-wise CUDA kernels (rowwise.cc prepares them, rowwise.cu holds
// them). C++17 and free of the ir operator headers, which nvcc cannot compile as C++20. Every
// pointer is device memory holding a dense row-major block in `dtype`; the work is enqueued on
// `stream` only, and the result is the launch's error (cudaGetLastError after it).

#include <cstdint>

#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

// A block seen as [outer, length, inner], normalised along the middle axis.
struct RowShape {
    int64_t outer = 1;
    int64_t length = 1;
    int64_t inner = 1;
};

// Softmax along the middle axis of x; y may alias x.
cudaError_t launch_softmax(ir::DType dtype, const void* x, void* y, const RowShape& shape,
                           cudaStream_t stream);

// y = x / sqrt(mean(x²) + eps) · weight over each contiguous row of `length` of x [rows, length].
cudaError_t launch_rmsnorm(ir::DType dtype, const void* x, const void* weight, void* y,
                           int64_t rows, int64_t length, double eps, cudaStream_t stream);

// y = (x − mean) / sqrt(var + eps) · gamma (+ beta when beta is not null), rows as for rmsnorm.
cudaError_t launch_layernorm(ir::DType dtype, const void* x, const void* gamma, const void* beta,
                             void* y, int64_t rows, int64_t length, double eps,
                             cudaStream_t stream);

// Rotate-half RoPE on x [tokens, rows_per_token, 2·half]. `table` is device memory of
// half + tokens doubles: the frequencies theta^(−2i/d), then each token's position in its
// sequence (exact in double). With `positions` (device memory of `tokens` int32, or int64 when
// positions_bytes is 8: ir::Rope's positions input) the positions are read from there at run
// time instead of from the table. Angles and their sines are computed in double, as the CPU
// kernel does, since positions times small frequencies lose too much in f32.
cudaError_t launch_rope(ir::DType dtype, const void* x, void* y, int64_t tokens,
                        int64_t rows_per_token, int64_t half, const double* table,
                        const void* positions, int positions_bytes, cudaStream_t stream);

// The largest `half` launch_rope takes: its sine and cosine table lives in shared memory.
int64_t rope_max_half(ir::DType dtype);

} // namespace einsummable::kernels::cuda
