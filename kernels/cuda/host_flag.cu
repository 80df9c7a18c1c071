// The wait of kernels/cuda/host_flag.h.

#include "kernels/cuda/host_flag.h"

namespace einsummable::kernels::cuda {
namespace {

__global__ void wait_host_flag(const volatile uint32_t* flag) {
    while (*flag == 0) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
        __nanosleep(1000);
#endif
    }
}

} // namespace

cudaError_t launch_wait_host_flag(const uint32_t* flag, cudaStream_t stream) {
    wait_host_flag<<<1, 1, 0, stream>>>(flag);
    return cudaGetLastError();
}

} // namespace einsummable::kernels::cuda
