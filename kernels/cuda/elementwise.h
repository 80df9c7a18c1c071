#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"

namespace einsummable::kernels::cuda {

// out[i] = max(in[i], 0) for i in [0, n), on `stream` (0 is the legacy default stream). NaN
// propagates (relu(NaN) is NaN) and -0.0 stays -0.0. in and out are device pointers and may be
// the same buffer. Returns once the kernel is enqueued: errors during execution surface at the
// next synchronisation. n == 0 enqueues nothing; n < 0 or a null pointer is InvalidArgument;
// a failed launch is returned naming the CUDA error. Tests: tests/unit/kernels/cuda_kernels_test.cc
absl::Status relu_f32(const float* device_in, float* device_out, int64_t n, cudaStream_t stream);

} // namespace einsummable::kernels::cuda
