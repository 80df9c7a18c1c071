// The kernels of kernels/cuda/argmax.cc and of the arg_max ⊕ (argmax_launch.h).

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/argmax_launch.h"
#include "kernels/cuda/device_dtype.cuh"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreadsPerBlock / kWarp;
constexpr int64_t kMaxBlocks = 65535;

// One warp per row (grid-strided): each lane keeps the best of the elements it strides over,
// then the lanes reduce by shuffles under the same rule, so the first largest element wins.
template <typename T>
__global__ void argmax_kernel(const T* x, int64_t rows, int64_t width, int64_t first_index,
                              int64_t* out, float* out_stats) {
    using C = ComputeType<T>;
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
    const int64_t warps = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
    for (int64_t row = warp; row < rows; row += warps) {
        const T* values = x + row * width;
        C best = -static_cast<C>(INFINITY);
        int64_t index = INT64_MAX;
        for (int64_t idx = lane; idx < width; idx += kWarp) {
            const C value = to_compute(values[idx]);
            if (scalar_math::arg_max_wins(value, idx, best, index)) {
                best = value;
                index = idx;
            }
        }
        for (int offset = kWarp / 2; offset > 0; offset /= 2) {
            const C other = __shfl_down_sync(0xffffffffu, best, offset);
            const int64_t other_index = __shfl_down_sync(0xffffffffu, index, offset);
            if (scalar_math::arg_max_wins(other, other_index, best, index)) {
                best = other;
                index = other_index;
            }
        }
        if (lane == 0) {
            // A row of -inf only: no element beat the starting pair; the first one is the answer.
            out[row] = first_index + (index == INT64_MAX ? 0 : index);
            if (out_stats != nullptr) {
                out_stats[row] = static_cast<float>(best);
            }
        }
    }
}

struct ArgMaxParts {
    const int64_t* parts[kMaxArgMaxParts];
    const float* stats[kMaxArgMaxParts];
    int num_parts;
};

__global__ void aggregate_arg_max_kernel(ArgMaxParts in, int64_t* out, float* out_stats,
                                         int64_t vectors) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < vectors;
         v += stride) {
        float best = in.stats[0][v];
        int64_t index = in.parts[0][v];
        for (int part = 1; part < in.num_parts; ++part) {
            if (scalar_math::arg_max_wins(in.stats[part][v], in.parts[part][v], best, index)) {
                best = in.stats[part][v];
                index = in.parts[part][v];
            }
        }
        out[v] = index;
        if (out_stats != nullptr) {
            out_stats[v] = best;
        }
    }
}

} // namespace

cudaError_t launch_argmax(ir::DType dtype, const void* x, int64_t rows, int64_t width,
                          int64_t first_index, int64_t* out, float* out_stats,
                          cudaStream_t stream) {
    if (rows <= 0) {
        return cudaSuccess;
    }
    const auto blocks = static_cast<unsigned>(
        std::min<int64_t>(kMaxBlocks, (rows + kRowsPerBlock - 1) / kRowsPerBlock));
    return dispatch_storage(dtype, [&](auto storage) {
        using T = decltype(storage);
        argmax_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(
            static_cast<const T*>(x), rows, width, first_index, out, out_stats);
        return cudaGetLastError();
    });
}

cudaError_t launch_aggregate_arg_max(const int64_t* const* parts, const float* const* stats,
                                     int num_parts, int64_t* out, float* out_stats, int64_t vectors,
                                     cudaStream_t stream) {
    if (vectors <= 0) {
        return cudaSuccess;
    }
    ArgMaxParts in{};
    for (int part = 0; part < num_parts; ++part) {
        in.parts[part] = parts[part];
        in.stats[part] = stats[part];
    }
    in.num_parts = num_parts;
    const auto blocks = static_cast<unsigned>(
        std::min<int64_t>(kMaxBlocks, (vectors + kThreadsPerBlock - 1) / kThreadsPerBlock));
    aggregate_arg_max_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(in, out, out_stats, vectors);
    return cudaGetLastError();
}

} // namespace einsummable::kernels::cuda
