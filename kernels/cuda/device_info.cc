#include "kernels/cuda/device_info.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::kernels::cuda {
namespace {

// cudaGetDeviceCount errors that mean "this machine has no usable GPU" rather than "something
// broke": no device, no driver (libcuda missing or too old for this runtime), a stub libcuda
// from the toolkit instead of the real driver, or a driver that is present but not usable.
bool means_no_usable_device(cudaError_t error) {
    switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorSystemDriverMismatch:
    case cudaErrorCompatNotSupportedOnDevice:
    case cudaErrorSystemNotReady:
        return true;
    default:
        return false;
    }
}

} // namespace

std::string DeviceInfo::to_string() const {
    constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;
    return absl::StrFormat("%d: %s, sm_%d%d, %.1f GiB, %d SMs", device_idx, name,
                           compute_capability_major, compute_capability_minor,
                           static_cast<double>(total_memory_bytes) / kBytesPerGiB,
                           multiprocessor_count);
}

absl::StatusOr<std::vector<DeviceInfo>> list_devices() {
    int device_count = 0;
    cudaError_t error = cudaGetDeviceCount(&device_count);
    if (error != cudaSuccess) {
        // Clear the error so later runtime calls in this thread do not report it again.
        cudaGetLastError();
        if (means_no_usable_device(error)) {
            return std::vector<DeviceInfo>{};
        }
        return cuda_status(error, "cudaGetDeviceCount");
    }

    std::vector<DeviceInfo> devices;
    devices.reserve(device_count);
    for (int device_idx = 0; device_idx < device_count; ++device_idx) {
        cudaDeviceProp properties{};
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaGetDeviceProperties(&properties, device_idx),
                        absl::StrCat("cudaGetDeviceProperties(", device_idx, ")")));
        DeviceInfo info;
        info.device_idx = device_idx;
        info.name = properties.name;
        info.compute_capability_major = properties.major;
        info.compute_capability_minor = properties.minor;
        info.total_memory_bytes = static_cast<int64_t>(properties.totalGlobalMem);
        info.multiprocessor_count = properties.multiProcessorCount;
        devices.push_back(std::move(info));
    }
    return devices;
}

} // namespace einsummable::kernels::cuda
