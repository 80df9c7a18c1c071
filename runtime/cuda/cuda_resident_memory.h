#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/backend.h"

namespace einsummable::runtime::cuda {

// The CUDA backend's ResidentMemory (docs/cuda.md "Resident buffers"; private to runtime/cuda
// and its tests): one cudaMalloc'd, zeroed arena per logical device, on the GPU that device
// maps to, freed when the last executable reading it and its owner are gone. Executables take
// the arenas' addresses into their CUDA graphs once, at prepare, so the arenas never move.
class CudaResidentMemory final : public ResidentMemory {
public:
    // bytes[d] bytes on GPU gpu_of_device[d] for every d < bytes.size() (bytes.size() <=
    // gpu_of_device.size()). InvalidArgument for a negative size; ResourceExhausted naming the
    // device, its GPU and the bytes free when one does not fit (nothing stays allocated then).
    static absl::StatusOr<std::shared_ptr<CudaResidentMemory>>
    allocate(const std::vector<int64_t>& bytes, const std::vector<int>& gpu_of_device);
    ~CudaResidentMemory() override;
    CudaResidentMemory(const CudaResidentMemory&) = delete;
    CudaResidentMemory& operator=(const CudaResidentMemory&) = delete;

    // Synchronous: the bytes are on the device (or the host) when these return, so a run
    // launched afterwards on any stream sees them.
    absl::Status write(int device, int64_t offset, absl::Span<const std::byte> data) override;
    absl::Status read(int device, int64_t offset, absl::Span<std::byte> data) const override;
    // What was asked for per device (a zero-byte arena still holds one small allocation, so
    // that it has an address).
    std::vector<int64_t> allocated_bytes() const override { return bytes_; }

    // The logical devices it has arenas for, the GPU each is on, and the arena's device address.
    int devices() const { return static_cast<int>(bytes_.size()); }
    int gpu(int device) const { return gpu_of_device_[static_cast<size_t>(device)]; }
    std::byte* base(int device) const { return bases_[static_cast<size_t>(device)]; }

private:
    CudaResidentMemory() = default;
    // InvalidArgument unless [offset, offset + bytes) lies inside `device`'s arena; then makes
    // the device's GPU current.
    absl::Status check_range(int device, int64_t offset, size_t bytes) const;

    std::vector<int64_t> bytes_;
    std::vector<int> gpu_of_device_;
    std::vector<std::byte*> bases_;
    // Per device: the stream its copies go through. Not the legacy default stream: a copy from
    // pageable memory there may return before the bytes arrive, and the executables' streams,
    // which are non-blocking, would not wait for it.
    std::vector<cudaStream_t> streams_;
};

} // namespace einsummable::runtime::cuda
