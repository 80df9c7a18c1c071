// einsummable-cuda-info: lists the GPUs the CUDA runtime sees, one per line, or says that there
// are none. Exits 0 on a machine without a driver or GPU; non-zero only on an unexpected CUDA
// error.
#include <cstdio>

#include "kernels/cuda/device_info.h"

int main() {
    absl::StatusOr<std::vector<einsummable::kernels::cuda::DeviceInfo>> devices =
        einsummable::kernels::cuda::list_devices();
    if (!devices.ok()) {
        std::fprintf(stderr, "einsummable-cuda-info: %s\n", devices.status().ToString().c_str());
        return 1;
    }
    if (devices->empty()) {
        std::printf("no CUDA device present\n");
        return 0;
    }
    for (const einsummable::kernels::cuda::DeviceInfo& device : *devices) {
        std::printf("%s\n", device.to_string().c_str());
    }
    return 0;
}
