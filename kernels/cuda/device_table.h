#pragma once

#include <cstddef>
#include <string>
#include <utility>

#include <cuda_runtime_api.h>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::kernels::cuda {

// Constant device memory a prepared kernel uploads once, when it is prepared (positions of
// tokens in their sequences, work lists), and reads in every launch; freed with the kernel.
// Uploading allocates, copies and waits for the copy, so it never happens inside enqueue(), and
// when upload() returns the bytes are on the device for a launch on any stream.
class DeviceTable {
public:
    DeviceTable() = default;
    DeviceTable(DeviceTable&& other) noexcept : data_(std::exchange(other.data_, nullptr)) {}
    DeviceTable& operator=(DeviceTable&& other) noexcept {
        std::swap(data_, other.data_);
        return *this;
    }
    DeviceTable(const DeviceTable&) = delete;
    DeviceTable& operator=(const DeviceTable&) = delete;
    ~DeviceTable() {
        if (data_ != nullptr) {
            cudaFree(data_);
        }
    }

    // Copies `bytes` from `host` to new memory on the current device; errors name `what` and the
    // CUDA call.
    static absl::StatusOr<DeviceTable> upload(const void* host, size_t bytes,
                                              absl::string_view what) {
        DeviceTable table;
        if (bytes == 0) {
            return table;
        }
        if (absl::Status status = cuda_status(cudaMalloc(&table.data_, bytes),
                                              absl::StrCat(what, ": cudaMalloc of ", bytes));
            !status.ok()) {
            table.data_ = nullptr;
            return status;
        }
        // Not a plain cudaMemcpy: from pageable memory it may return once the bytes are staged,
        // before the DMA into the table lands, and that DMA runs on the legacy default stream,
        // which the non-blocking streams the kernels launch on (and graph launches) are not
        // ordered after. So the copy goes on this thread's own default stream and is waited
        // for: the host bytes need only outlive this call, and nothing else on the device (other
        // executables' streams, as cudaDeviceSynchronize would) is waited for.
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(
            cudaMemcpyAsync(table.data_, host, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread),
            absl::StrCat(what, ": cudaMemcpyAsync to device")));
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(cudaStreamSynchronize(cudaStreamPerThread),
                                                absl::StrCat(what, ": waiting for the upload")));
        return table;
    }

    template <typename T>
    const T* as() const {
        return static_cast<const T*>(data_);
    }

private:
    void* data_ = nullptr;
};

} // namespace einsummable::kernels::cuda
