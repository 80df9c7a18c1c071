#pragma once

// The launch behind the CUDA embedding kernel (embedding.cc checks the blocks, embedding.cu
// holds the kernel). C++17, as every header shared with .cu files.

#include <cstdint>

#include <cuda_runtime_api.h>

namespace einsummable::kernels::cuda {

// out[t, :] = table[ids[t] - row_begin, :] where row_begin <= ids[t] < row_end, zeros
// elsewhere, for t < tokens: `table` holds rows [row_begin, row_end) of `width` elements of
// `element_bytes` (2, 4 or 8) each, `ids` are int32 (ids_bytes 4) or int64 (8). Rows are moved
// as bits, not converted. An id outside [row_begin, row_end) — in another block's rows, or
// outside the table, which the request's check refused before it ran — reads nothing.
cudaError_t launch_embedding_gather(const void* table, int64_t row_begin, int64_t row_end,
                                    int64_t width, int element_bytes, const void* ids,
                                    int ids_bytes, int64_t tokens, void* out, cudaStream_t stream);

} // namespace einsummable::kernels::cuda
