#pragma once

// The scatter behind kernels/cuda/write_rows.cc (write_rows.cu holds the kernel). C++17 and free
// of the ir operator headers, which nvcc cannot compile as C++20.

#include <cstdint>

#include <cuda_runtime_api.h>

namespace einsummable::kernels::cuda {

// out[slot - row_begin, :] = rows[i, :] for every i < n whose slot (slots: int32, or int64 when
// slots_bytes is 8) lies in [row_begin, row_end); rows of `width` elements of `element_bytes`
// (2, 4 or 8) each, moved as bits. Slots outside the range write nothing (the operator refuses
// a slot written twice, so the rows never race).
cudaError_t launch_write_rows_scatter(const void* rows, int64_t n, int64_t width, int element_bytes,
                                      const void* slots, int slots_bytes, int64_t row_begin,
                                      int64_t row_end, void* out, cudaStream_t stream);

} // namespace einsummable::kernels::cuda
