#pragma once

#include <memory>
#include <string>

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"

namespace einsummable::kernels::cuda {

// The library handles of one logical device of a plan, created once when the runtime prepares
// the device and shared by every kernel prepared for it. Several logical (virtual) devices may
// share one physical GPU; each has its own handles.
//
// Handles are created on first use, always with `physical_device` current, and destroyed with
// the object. cuDNN's are not here: its graphs are built once per process and GPU and used with
// one handle per GPU (attention_cudnn.cc), which only needs `physical_device`.
class DeviceLibraries {
public:
    explicit DeviceLibraries(int physical_device) : physical_device_(physical_device) {}
    ~DeviceLibraries();
    DeviceLibraries(const DeviceLibraries&) = delete;
    DeviceLibraries& operator=(const DeviceLibraries&) = delete;

    int physical_device() const { return physical_device_; }

    // The cuBLASLt handle (cublasLtCreate on first call).
    absl::StatusOr<cublasLtHandle_t> cublaslt();

private:
    int physical_device_;
    cublasLtHandle_t cublaslt_ = nullptr;
};

} // namespace einsummable::kernels::cuda
