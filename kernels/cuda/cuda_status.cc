#include "kernels/cuda/cuda_status.h"

#include <mutex>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cublaslt_api.h"

namespace einsummable::kernels::cuda {
namespace {

// The first sticky error of the process (sticky_cuda_error).
std::mutex sticky_mutex;
absl::Status& first_sticky() {
    static absl::Status* status = new absl::Status();
    return *status;
}

} // namespace

bool is_sticky_cuda_error(cudaError_t error) {
    switch (static_cast<int>(error)) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchTimeout:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorLaunchFailure:
    case cudaErrorExternalDevice:
    case cudaErrorMpsClientTerminated:
    case cudaErrorECCUncorrectable:
    case cudaErrorNvlinkUncorrectable:
    // By value: toolkits before 12.4 / 12.8 do not name them.
    case 226: // cudaErrorContained
    case 721: // cudaErrorTensorMemoryLeak
        return true;
    default:
        return false;
    }
}

absl::Status sticky_cuda_error() {
    std::lock_guard<std::mutex> lock(sticky_mutex);
    return first_sticky();
}

absl::Status cuda_status(cudaError_t error, absl::string_view what) {
    if (error == cudaSuccess) {
        return absl::OkStatus();
    }
    // The error is reported here; clear it from the thread's last-error slot, or the next launch
    // that checks cudaGetLastError() would fail with it (sticky errors stay reported anyway).
    cudaGetLastError();
    std::string message =
        absl::StrCat(what, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")");
    absl::Status status;
    switch (error) {
    case cudaErrorInvalidValue:
        status = absl::InvalidArgumentError(message);
        break;
    case cudaErrorMemoryAllocation:
        status = absl::ResourceExhaustedError(message);
        break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
        status = absl::FailedPreconditionError(message);
        break;
    default:
        status = absl::InternalError(message);
        break;
    }
    if (is_sticky_cuda_error(error)) {
        std::lock_guard<std::mutex> lock(sticky_mutex);
        if (first_sticky().ok()) {
            first_sticky() = status;
        }
    }
    return status;
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
