#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace einsummable::kernels::cuda {

// Converts a CUDA runtime error into a Status whose message names the call that failed and the
// CUDA error, e.g. "cudaMalloc: cudaErrorMemoryAllocation (out of memory)". cudaSuccess maps
// to OkStatus(). An error also clears the thread's last-error slot (cudaGetLastError), so that
// a reported failure does not resurface at the next launch's check. A sticky error
// (is_sticky_cuda_error) is also recorded for the process: sticky_cuda_error().
absl::Status cuda_status(cudaError_t error, absl::string_view what);

// Whether `error` leaves the CUDA context unusable for the rest of the process. The CUDA
// runtime's reference (cudaError) says of these that they leave "the process in an
// inconsistent state and any further CUDA work will return the same error. To continue using
// CUDA, the process must be terminated and relaunched": illegal address, launch timeout,
// device-side assert, hardware stack error, illegal instruction, misaligned address, invalid
// address space, invalid PC, launch failure, tensor memory leak, an error contained by the
// GPU's error containment, an external device's error, and the MPS client terminated by its
// server. Also the uncorrectable ECC and NVLink errors, which the reference does not call
// sticky but after which NVIDIA's guidance (Xid 48, 74) is to end the process and reset the
// GPU. cudaGetLastError() does not clear any of them. Pure.
bool is_sticky_cuda_error(cudaError_t error);

// The first sticky error cuda_status() has converted in this process, as it converted it (naming
// the call); OK while there is none. Every CUDA call of the process fails from then on, so the
// CUDA backend reports it as its unrecoverable error (runtime::Backend::unrecoverable_error).
absl::Status sticky_cuda_error();

// The same for cuBLAS and cuBLASLt: "cublasLtMatmul: CUBLAS_STATUS_NOT_SUPPORTED".
// CUBLAS_STATUS_ALLOC_FAILED maps to ResourceExhausted, CUBLAS_STATUS_INVALID_VALUE and
// CUBLAS_STATUS_NOT_SUPPORTED to InvalidArgument, everything else to Internal.
absl::Status cublas_status(cublasStatus_t status, absl::string_view what);

} // namespace einsummable::kernels::cuda
