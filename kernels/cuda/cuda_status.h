#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace einsummable::kernels::cuda {

// Converts a CUDA runtime error into a Status whose message names the call that failed and the
// CUDA error, e.g. "cudaMalloc: cudaErrorMemoryAllocation (out of memory)". cudaSuccess maps
// to OkStatus(). An error also clears the thread's last-error slot (cudaGetLastError), so that
// a reported failure does not resurface at the next launch's check.
absl::Status cuda_status(cudaError_t error, absl::string_view what);

// The same for cuBLAS and cuBLASLt: "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED".
// CUBLAS_STATUS_ALLOC_FAILED maps to ResourceExhausted, CUBLAS_STATUS_INVALID_VALUE and
// CUBLAS_STATUS_NOT_SUPPORTED to InvalidArgument, everything else to Internal.
absl::Status cublas_status(cublasStatus_t status, absl::string_view what);

} // namespace einsummable::kernels::cuda
