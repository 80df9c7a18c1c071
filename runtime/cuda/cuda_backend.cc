#include "runtime/cuda/cuda_backend.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/cuda/device_info.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/cuda/cuda_resident_memory.h"
#include "spdlog/spdlog.h"

namespace einsummable::runtime::cuda {
namespace {

class CudaBackend final : public Backend {
public:
    CudaBackend(std::vector<int> device_list, std::vector<std::vector<bool>> peer_access,
                RankMessages messages)
        : device_list_(std::move(device_list)), peer_access_(std::move(peer_access)),
          messages_(std::move(messages)) {}

    std::string name() const override { return "cuda"; }
    int devices() const override { return static_cast<int>(device_list_.size()); }
    // A sticky CUDA error anywhere in the process (kernels::cuda::is_sticky_cuda_error): the
    // context is lost and every later CUDA call fails with it.
    absl::Status unrecoverable_error() const override { return kernels::cuda::sticky_cuda_error(); }
    // NCCL matches a pair's messages by order: one split graph at a time.
    bool split_runs_take_turns() const override { return messages_.nccl != nullptr; }

    KernelsInfo kernels() const override { return cuda_kernels_info(); }

    using Backend::prepare;
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident) override {
        EINSUMMABLE_RETURN_IF_ERROR(physical::check_exec_graph(graph, devices()));
        std::shared_ptr<CudaResidentMemory> cuda_resident =
            std::dynamic_pointer_cast<CudaResidentMemory>(resident);
        if (resident != nullptr && cuda_resident == nullptr) {
            return absl::InvalidArgumentError(
                "the resident memory was not allocated by a CUDA backend");
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<CudaExecutable> exe,
                                     CudaExecutable::create(graph, device_list_, peer_access_,
                                                            std::move(cuda_resident), messages_));
        spdlog::debug("cuda backend: prepared {} nodes as a CUDA graph of {} ({}), instantiated "
                      "and uploaded in {:.3f} s",
                      graph.nodes.size(), exe->graph_plan().ops.size(), exe->graph_plan().summary(),
                      exe->instantiate_seconds());
        return std::unique_ptr<Executable>(std::move(exe));
    }

    absl::StatusOr<std::shared_ptr<ResidentMemory>>
    allocate_resident(const std::vector<int64_t>& bytes) override {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<CudaResidentMemory> memory,
                                     CudaResidentMemory::allocate(bytes, device_list_));
        return std::shared_ptr<ResidentMemory>(std::move(memory));
    }

private:
    const std::vector<int> device_list_;
    const std::vector<std::vector<bool>> peer_access_; // over every visible GPU
    const RankMessages messages_;                      // empty unless a rank of a cluster
};

} // namespace

KernelsInfo cuda_kernels_info() {
    KernelsInfo info;
    std::vector<std::string> warnings;
    absl::StatusOr<const kernels::cuda::CublasLtApi*> cublaslt = kernels::cuda::load_cublaslt();
    if (cublaslt.ok()) {
        info.description = absl::StrCat("cuBLASLt ", kernels::cuda::describe_cublaslt(**cublaslt));
    } else {
        info.description = "no cuBLASLt";
        warnings.push_back(absl::StrCat("cuBLASLt could not be loaded (",
                                        cublaslt.status().message(),
                                        "): plans with contractions fail to prepare"));
    }
    absl::StatusOr<const kernels::cuda::CudnnLibrary*> cudnn = kernels::cuda::load_cudnn();
    if (cudnn.ok()) {
        absl::StrAppend(&info.description, "; cuDNN ", (*cudnn)->describe(),
                        " for fused attention");
    } else {
        absl::StrAppend(&info.description, "; no cuDNN, attention on the flash kernel");
        warnings.push_back(absl::StrCat(
            "cuDNN could not be loaded (", cudnn.status().message(),
            "): fused attention runs on the own flash kernel instead, which is slower"));
    }
    info.warning = absl::StrJoin(warnings, "; ");
    return info;
}

absl::StatusOr<std::vector<int>> parse_device_list(absl::string_view text) {
    std::vector<int> devices;
    const std::vector<absl::string_view> entries = absl::StrSplit(text, ',');
    for (size_t idx = 0; idx < entries.size(); ++idx) {
        int gpu = 0;
        if (!absl::SimpleAtoi(entries[idx], &gpu) || gpu < 0) {
            return absl::InvalidArgumentError(absl::StrCat(
                "device list '", text, "': entry ", idx + 1, " ('", entries[idx],
                "') is not a GPU ordinal; expected a count such as 4 or a list such as 0,0,1,1"));
        }
        devices.push_back(gpu);
    }
    if (devices.size() == 1) {
        // A single number is a count: "4" is GPUs 0..3.
        const int count = devices[0];
        if (count == 0) {
            return absl::InvalidArgumentError("device list '0': at least one device is needed");
        }
        devices.clear();
        for (int gpu = 0; gpu < count; ++gpu) {
            devices.push_back(gpu);
        }
    }
    return devices;
}

absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<kernels::cuda::DeviceInfo> gpus,
                                 kernels::cuda::list_devices());
    if (gpus.empty()) {
        return absl::FailedPreconditionError(
            "the CUDA backend needs a GPU and none is visible (no driver, no device, or "
            "CUDA_VISIBLE_DEVICES hides them); use --backend=cpu");
    }
    const int visible = static_cast<int>(gpus.size());
    std::vector<int> device_list = options.device_list;
    if (device_list.empty()) {
        for (int gpu = 0; gpu < visible; ++gpu) {
            device_list.push_back(gpu);
        }
    }
    for (size_t idx = 0; idx < device_list.size(); ++idx) {
        if (device_list[idx] < 0 || device_list[idx] >= visible) {
            return absl::InvalidArgumentError(
                absl::StrCat("device ", idx, " is GPU ", device_list[idx], ", but ", visible,
                             " GPU", visible == 1 ? " is" : "s are", " visible"));
        }
    }
    std::vector<std::vector<bool>> peer_access(static_cast<size_t>(visible),
                                               std::vector<bool>(static_cast<size_t>(visible)));
    for (int a = 0; a < visible; ++a) {
        for (int b = 0; b < visible; ++b) {
            int can = 0;
            if (a != b) {
                EINSUMMABLE_RETURN_IF_ERROR(kernels::cuda::cuda_status(
                    cudaDeviceCanAccessPeer(&can, a, b),
                    absl::StrCat("cudaDeviceCanAccessPeer(", a, ", ", b, ")")));
            }
            peer_access[static_cast<size_t>(a)][static_cast<size_t>(b)] = can != 0;
        }
    }
    RankMessages messages;
    messages.transport = options.transport;
    if (options.transport != nullptr && options.rank_transport == RankTransportKind::nccl) {
        EINSUMMABLE_ASSIGN_OR_RETURN(messages.nccl,
                                     NcclComms::create(*options.transport, device_list));
        spdlog::info("cuda backend: rank {} of {} joined {} on GPUs [{}]",
                     options.transport->rank(), options.transport->ranks(),
                     messages.nccl->describe(), absl::StrJoin(messages.nccl->gpus(), ","));
    }
    spdlog::info("cuda backend: {} logical devices on GPUs [{}] of {} visible", device_list.size(),
                 absl::StrJoin(device_list, ","), visible);
    return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(
        std::move(device_list), std::move(peer_access), std::move(messages)));
}

} // namespace einsummable::runtime::cuda
