#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace einsummable::kernels::cuda {

absl::Status cuda_status(cudaError_t error, absl::string_view what) {
    if (error == cudaSuccess) {
        return absl::OkStatus();
    }
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

} // namespace einsummable::kernels::cuda
