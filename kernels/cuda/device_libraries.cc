#include "kernels/cuda/device_libraries.h"

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::kernels::cuda {

DeviceLibraries::~DeviceLibraries() {
    if (cublaslt_ == nullptr) {
        return;
    }
    int current = 0;
    const bool restore = cudaGetDevice(&current) == cudaSuccess;
    cudaSetDevice(physical_device_);
    cublaslt_if_loaded()->cublasLtDestroy(cublaslt_);
    if (restore) {
        cudaSetDevice(current);
    }
}

absl::StatusOr<cublasLtHandle_t> DeviceLibraries::cublaslt() {
    if (cublaslt_ == nullptr) {
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaSetDevice(physical_device_),
                        absl::StrCat("cudaSetDevice(", physical_device_, ")")));
        EINSUMMABLE_ASSIGN_OR_RETURN(const CublasLtApi* api, load_cublaslt());
        if (absl::Status status = cublas_status(api->cublasLtCreate(&cublaslt_), "cublasLtCreate");
            !status.ok()) {
            cublaslt_ = nullptr;
            return status;
        }
    }
    return cublaslt_;
}

} // namespace einsummable::kernels::cuda
