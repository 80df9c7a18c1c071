// The gather of kernels/cuda/embedding.cc (embedding_launch.h).

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/embedding_launch.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int64_t kMaxBlocks = 65535;

// One block per token (grid-strided), its threads across the row's elements.
template <typename Element, typename Id>
__global__ void gather_kernel(const Element* table, int64_t row_begin, int64_t row_end,
                              int64_t width, const Id* ids, int64_t tokens, Element* out) {
    for (int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
        const int64_t id = static_cast<int64_t>(ids[t]);
        const bool inside = id >= row_begin && id < row_end;
        const Element* row = inside ? table + (id - row_begin) * width : nullptr;
        for (int64_t e = threadIdx.x; e < width; e += blockDim.x) {
            out[t * width + e] = inside ? row[e] : Element{0};
        }
    }
}

template <typename Element, typename Id>
cudaError_t launch_typed(const void* table, int64_t row_begin, int64_t row_end, int64_t width,
                         const void* ids, int64_t tokens, void* out, cudaStream_t stream) {
    const auto blocks = static_cast<unsigned>(std::min<int64_t>(tokens, kMaxBlocks));
    gather_kernel<Element, Id><<<blocks, kThreadsPerBlock, 0, stream>>>(
        static_cast<const Element*>(table), row_begin, row_end, width, static_cast<const Id*>(ids),
        tokens, static_cast<Element*>(out));
    return cudaGetLastError();
}

template <typename Element>
cudaError_t launch_for_element(const void* table, int64_t row_begin, int64_t row_end, int64_t width,
                               const void* ids, int ids_bytes, int64_t tokens, void* out,
                               cudaStream_t stream) {
    return ids_bytes == 8 ? launch_typed<Element, int64_t>(table, row_begin, row_end, width, ids,
                                                           tokens, out, stream)
                          : launch_typed<Element, int32_t>(table, row_begin, row_end, width, ids,
                                                           tokens, out, stream);
}

} // namespace

cudaError_t launch_embedding_gather(const void* table, int64_t row_begin, int64_t row_end,
                                    int64_t width, int element_bytes, const void* ids,
                                    int ids_bytes, int64_t tokens, void* out, cudaStream_t stream) {
    if (tokens <= 0 || width <= 0) {
        return cudaSuccess;
    }
    switch (element_bytes) {
    case 2:
        return launch_for_element<uint16_t>(table, row_begin, row_end, width, ids, ids_bytes,
                                            tokens, out, stream);
    case 8:
        return launch_for_element<uint64_t>(table, row_begin, row_end, width, ids, ids_bytes,
                                            tokens, out, stream);
    default:
        return launch_for_element<uint32_t>(table, row_begin, row_end, width, ids, ids_bytes,
                                            tokens, out, stream);
    }
}

} // namespace einsummable::kernels::cuda
