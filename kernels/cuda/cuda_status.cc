#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublaslt_api.h"

namespace einsummable::kernels::cuda {

absl::Status cuda_status(cudaError_t error, absl::string_view what) {
    if (error == cudaSuccess) {
        return absl::OkStatus();
    }
    // The error is reported here; clear it from the thread's last-error slot, or the next launch
    // that checks cudaGetLastError() would fail with it (sticky errors stay reported anyway).
    cudaGetLastError();
    std::string message =
        absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
    switch (error) {
    case cudaErrorInvalidValue:
        return absl::InvalidArgumentError(message);
    case cudaErrorMemoryAllocation:
        return absl::ResourceExhaustedError(message);
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        return absl::FailedPreconditionError(message);
    default:
        return absl::InternalError(message);
    }
}

absl::Status cublas_status(cublasStatus_t status, absl::string_view what) {
    if (status == CUBLAS_STATUS_SUCCESS) {
        return absl::OkStatus();
    }
    const CublasLtApi* api = cublaslt_if_loaded();
    std::string message = api != nullptr
                              ? absl::StrCat(what, ": ", api->cublasLtGetStatusName(status), " (",
                                             api->cublasLtGetStatusString(status), ")")
                              : absl::StrCat(what, ": cuBLAS status ", static_cast<int>(status));
    switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
        return absl::ResourceExhaustedError(message);
    case CUBLAS_STATUS_INVALID_VALUE:
    case CUBLAS_STATUS_NOT_SUPPORTED:
        return absl::InvalidArgumentError(message);
    default:
        return absl::InternalError(message);
    }
}

} // namespace einsummable::kernels::cuda
