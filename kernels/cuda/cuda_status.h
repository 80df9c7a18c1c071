#pragma once

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace einsummable::kernels::cuda {

// Converts a CUDA runtime error into a Status whose message names the call that failed and the
// CUDA error, e.g. "cudaMalloc: cudaErrorMemoryAllocation (out of memory)". cudaSuccess maps
// to OkStatus().
absl::Status cuda_status(cudaError_t error, absl::string_view what);

} // namespace einsummable::kernels::cuda
