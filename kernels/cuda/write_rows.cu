// The scatter of kernels/cuda/write_rows.cc (write_rows_launch.h).

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/write_rows_launch.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

// One block per row (grid-strided), its threads across the row's elements.
template <typename Element, typename Slot>
__global__ void scatter_kernel(const Element* rows, int64_t n, int64_t width, const Slot* slots,
                               int64_t row_begin, int64_t row_end, Element* out) {
    for (int64_t i = blockIdx.x; i < n; i += gridDim.x) {
        const int64_t slot = static_cast<int64_t>(slots[i]);
        if (slot < row_begin || slot >= row_end) {
            continue;
        }
        for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
            out[(slot - row_begin) * width + e] = rows[i * width + e];
        }
    }
}

template <typename Element, typename Slot>
cudaError_t launch_typed(const void* rows, int64_t n, int64_t width, const void* slots,
                         int64_t row_begin, int64_t row_end, void* out, cudaStream_t stream) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(n, kMaxBlocks));
    scatter_kernel<Element, Slot><<<blocks, kThreadsPerBlock, 0, stream>>>(
        static_cast<const Element*>(rows), n, width, static_cast<const Slot*>(slots), row_begin,
        row_end, static_cast<Element*>(out));
    return cudaGetLastError();
}

template <typename Element>
cudaError_t launch_for_element(const void* rows, int64_t n, int64_t width, const void* slots,
                               int slots_bytes, int64_t row_begin, int64_t row_end, void* out,
                               cudaStream_t stream) {
    return slots_bytes == 8 ? launch_typed<Element, int64_t>(rows, n, width, slots, row_begin,
                                                             row_end, out, stream)
                            : launch_typed<Element, int32_t>(rows, n, width, slots, row_begin,
                                                             row_end, out, stream);
}

} // namespace

cudaError_t launch_write_rows_scatter(const void* rows, int64_t n, int64_t width, int element_bytes,
                                      const void* slots, int slots_bytes, int64_t row_begin,
                                      int64_t row_end, void* out, cudaStream_t stream) {
    if (n <= 0 || width <= 0) {
        return cudaSuccess;
    }
    switch (element_bytes) {
    case 2:
        return launch_for_element<uint16_t>(rows, n, width, slots, slots_bytes, row_begin, row_end,
                                            out, stream);
    case 8:
        return launch_for_element<uint64_t>(rows, n, width, slots, slots_bytes, row_begin, row_end,
                                            out, stream);
    default:
        return launch_for_element<uint32_t>(rows, n, width, slots, slots_bytes, row_begin, row_end,
                                            out, stream);
    }
}

} // namespace einsummable::kernels::cuda
