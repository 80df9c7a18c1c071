#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace einsummable::kernels::cuda {

// What the CUDA runtime reports about one visible GPU.
struct DeviceInfo {
    int device_idx = 0; // CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES)
    std::string name;
    int compute_capability_major = 0;
    int compute_capability_minor = 0;
    int64_t total_memory_bytes = 0;
    int multiprocessor_count = 0;

    // One line, e.g. "0: NVIDIA H200, sm_90, 139.8 GiB, 132 SMs".
    std::string to_string() const;
};

// The GPUs visible to this process. A machine without a CUDA driver or without a GPU is not an
// error: the list is empty. Any other CUDA failure is returned as a Status naming the error.
absl::StatusOr<std::vector<DeviceInfo>> list_devices();

} // namespace einsummable::kernels::cuda
