#include "runtime/cuda/cuda_resident_memory.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"

namespace einsummable::runtime::cuda {
namespace {

using kernels::cuda::cuda_status;

// The smallest allocation, and the arenas' alignment (cudaMalloc gives at least this).
constexpr int64_t kMinimumBytes = 256;

absl::Status set_device(int gpu) {
    return cuda_status(cudaSetDevice(gpu), absl::StrCat("cudaSetDevice(", gpu, ")"));
}

} // namespace

absl::StatusOr<std::shared_ptr<CudaResidentMemory>>
CudaResidentMemory::allocate(const std::vector<int64_t>& bytes,
                             const std::vector<int>& gpu_of_device) {
    if (bytes.size() > gpu_of_device.size()) {
        return absl::InvalidArgumentError(absl::StrCat("resident memory for ", bytes.size(),
                                                       " devices; the backend has ",
                                                       gpu_of_device.size()));
    }
    for (size_t device = 0; device < bytes.size(); ++device) {
        if (bytes[device] < 0) {
            return absl::InvalidArgumentError(absl::StrCat("resident memory of ", bytes[device],
                                                           " bytes asked for device ", device));
        }
    }
    // Freed by the destructor whatever step fails.
    std::shared_ptr<CudaResidentMemory> memory(new CudaResidentMemory());
    for (size_t device = 0; device < bytes.size(); ++device) {
        const int gpu = gpu_of_device[device];
        EINSUMMABLE_RETURN_IF_ERROR(set_device(gpu));
        cudaStream_t stream = nullptr;
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                        absl::StrCat("cudaStreamCreate on GPU ", gpu)));
        memory->gpu_of_device_.push_back(gpu);
        memory->streams_.push_back(stream);
        memory->bases_.push_back(nullptr);
        memory->bytes_.push_back(bytes[device]);
        const int64_t allocation = std::max(bytes[device], kMinimumBytes);
        void* base = nullptr;
        const cudaError_t error = cudaMalloc(&base, static_cast<size_t>(allocation));
        if (error != cudaSuccess) {
            cudaGetLastError(); // an allocation failure is not sticky; clear it
            size_t free_bytes = 0;
            size_t total_bytes = 0;
            cudaMemGetInfo(&free_bytes, &total_bytes);
            cudaDeviceProp properties{};
            const std::string name = cudaGetDeviceProperties(&properties, gpu) == cudaSuccess
                                         ? std::string(properties.name)
                                         : std::string("unknown GPU");
            cudaGetLastError();
            const std::string message = absl::StrCat(
                "device ", device, " (GPU ", gpu, ", ", name, "): resident memory of ",
                bytes[device], " bytes; ", free_bytes, " of ", total_bytes, " bytes are free");
            if (error == cudaErrorMemoryAllocation) {
                return absl::ResourceExhaustedError(message);
            }
            return cuda_status(error, absl::StrCat("cudaMalloc for ", message));
        }
        memory->bases_.back() = static_cast<std::byte*>(base);
        // Zeroed, as ResidentMemory promises: a block never written reads zeros.
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaMemsetAsync(base, 0, static_cast<size_t>(allocation), stream),
                        "cudaMemsetAsync of new resident memory"));
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaStreamSynchronize(stream), "zeroing new resident memory"));
    }
    return memory;
}

CudaResidentMemory::~CudaResidentMemory() {
    // Errors here have nowhere to go; each call is still made so nothing leaks.
    for (size_t device = 0; device < gpu_of_device_.size(); ++device) {
        cudaSetDevice(gpu_of_device_[device]);
        if (bases_[device] != nullptr) {
            cudaFree(bases_[device]);
        }
        if (streams_[device] != nullptr) {
            cudaStreamDestroy(streams_[device]);
        }
    }
}

absl::Status CudaResidentMemory::check_range(int device, int64_t offset, size_t bytes) const {
    if (device < 0 || device >= devices()) {
        return absl::InvalidArgumentError(absl::StrCat("no resident memory on device ", device,
                                                       " (it has ", devices(), " devices)"));
    }
    const int64_t size = bytes_[static_cast<size_t>(device)];
    if (offset < 0 || static_cast<int64_t>(bytes) > size - offset) {
        return absl::InvalidArgumentError(
            absl::StrCat("bytes [", offset, ", ", offset + static_cast<int64_t>(bytes),
                         ") outside device ", device, "'s resident memory of ", size, " bytes"));
    }
    return set_device(gpu(device));
}

absl::Status CudaResidentMemory::write(int device, int64_t offset,
                                       absl::Span<const std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_range(device, offset, data.size()));
    if (data.empty()) {
        return absl::OkStatus();
    }
    cudaStream_t stream = streams_[static_cast<size_t>(device)];
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(base(device) + offset, data.data(), data.size(),
                                    cudaMemcpyHostToDevice, stream),
                    absl::StrCat("cudaMemcpyAsync into device ", device, "'s resident memory")));
    return cuda_status(cudaStreamSynchronize(stream),
                       absl::StrCat("writing device ", device, "'s resident memory"));
}

absl::Status CudaResidentMemory::read(int device, int64_t offset,
                                      absl::Span<std::byte> data) const {
    EINSUMMABLE_RETURN_IF_ERROR(check_range(device, offset, data.size()));
    if (data.empty()) {
        return absl::OkStatus();
    }
    cudaStream_t stream = streams_[static_cast<size_t>(device)];
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaMemcpyAsync(data.data(), base(device) + offset, data.size(),
                                    cudaMemcpyDeviceToHost, stream),
                    absl::StrCat("cudaMemcpyAsync out of device ", device, "'s resident memory")));
    return cuda_status(cudaStreamSynchronize(stream),
                       absl::StrCat("reading device ", device, "'s resident memory"));
}

} // namespace einsummable::runtime::cuda
