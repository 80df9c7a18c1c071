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
// Handles are created on first use (a plan without attention never loads cuDNN), always with
// `physical_device` current, and destroyed with the object.
class DeviceLibraries {
public:
    explicit DeviceLibraries(int physical_device) : physical_device_(physical_device) {}
    ~DeviceLibraries();
    DeviceLibraries(const DeviceLibraries&) = delete;
    DeviceLibraries& operator=(const DeviceLibraries&) = delete;

    int physical_device() const { return physical_device_; }

    // The cuBLASLt handle (cublasLtCreate on first call).
    absl::StatusOr<cublasLtHandle_t> cublaslt();

    // The cuDNN handle, as an opaque pointer so that this header does not need cudnn.h
    // (cudnnHandle_t is a pointer type); created by kernels/cuda/attention_cudnn.cc.
    void* cudnn_handle() const { return cudnn_; }
    // Sets the cuDNN handle and the function that destroys it (called by the destructor).
    void set_cudnn_handle(void* handle, void (*destroy)(void*)) {
        cudnn_ = handle;
        destroy_cudnn_ = destroy;
    }

private:
    int physical_device_;
    cublasLtHandle_t cublaslt_ = nullptr;
    void* cudnn_ = nullptr;
    void (*destroy_cudnn_)(void*) = nullptr;
};

} // namespace einsummable::kernels::cuda
