#include <algorithm>

#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/elementwise.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill any current GPU several times over; larger inputs are covered by the
// grid-stride loop rather than by more blocks.
constexpr int64_t kMaxBlocks = 8192;

// in and out may alias (in-place relu), so they are not __restrict__.
__global__ void __launch_bounds__(kThreadsPerBlock)
    relu_f32_kernel(const float* in, float* out, int64_t n) {
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += stride) {
        const float x = in[i];
        out[i] = x < 0.0f ? 0.0f : x;
    }
}

} // namespace

absl::Status relu_f32(const float* device_in, float* device_out, int64_t n, cudaStream_t stream) {
    if (n < 0) {
        return absl::InvalidArgumentError("relu_f32: negative element count");
    }
    if (n == 0) {
        return absl::OkStatus();
    }
    if (device_in == nullptr || device_out == nullptr) {
        return absl::InvalidArgumentError("relu_f32: null device pointer");
    }
    const auto blocks =
        static_cast<unsigned>(std::min(kMaxBlocks, (n + kThreadsPerBlock - 1) / kThreadsPerBlock));
    relu_f32_kernel<<<blocks, kThreadsPerBlock, 0, stream>>>(device_in, device_out, n);
    return cuda_status(cudaGetLastError(), "relu_f32 launch");
}

} // namespace einsummable::kernels::cuda
