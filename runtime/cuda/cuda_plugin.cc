// libeinsummable_cuda.so's entry point (cuda_plugin.h): the CUDA backend chosen from --devices.

#include "runtime/cuda/cuda_plugin.h"

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/device_discovery.h"

namespace einsummable::runtime::cuda {
namespace {

absl::StatusOr<BackendChoice> choose(const BackendRequest& request) {
    const std::string flag = absl::StrCat("--backend=", request.backend);
    absl::StatusOr<GpuAnswers> answers = query_gpus();
    if (!answers.ok()) {
        return absl::FailedPreconditionError(
            absl::StrCat(flag, ": cannot list the GPUs: ", answers.status().message()));
    }
    const size_t gpus = answers->gpus.size();
    if (gpus == 0) {
        return absl::FailedPreconditionError(
            absl::StrCat(flag,
                         ": no GPU is visible (no driver, no device, or "
                         "CUDA_VISIBLE_DEVICES hides them)",
                         request.backend == "cuda" ? "; use --backend=cpu" : ""));
    }
    std::vector<int> device_list;
    if (request.devices.empty()) {
        device_list = one_device_per_gpu(*answers);
    } else {
        absl::StatusOr<std::vector<int>> parsed = parse_device_list(request.devices);
        if (!parsed.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("--devices: ", parsed.status().message()));
        }
        device_list = *std::move(parsed);
    }
    absl::StatusOr<DiscoveredTopology> discovered = topology_from(*answers, device_list);
    if (!discovered.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices=", request.devices, ": ", discovered.status().message()));
    }
    CudaBackendOptions options{device_list};
    if (request.transport != nullptr) {
        EINSUMMABLE_ASSIGN_OR_RETURN(options.rank_transport,
                                     parse_rank_transport(request.cuda_rank_transport));
        options.transport = request.transport;
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, make_cuda_backend(options));
    BackendChoice choice;
    choice.backend = std::move(backend);
    choice.reason =
        absl::StrCat(flag,
                     request.backend == "auto"
                         ? absl::StrCat(": ", gpus, " GPU", gpus == 1 ? "" : "s", " visible")
                         : std::string(),
                     " -> cuda backend on GPUs [", absl::StrJoin(device_list, ","), "]",
                     request.transport != nullptr ? absl::StrCat(", messages between ranks over ",
                                                                 request.cuda_rank_transport)
                                                  : std::string());
    choice.gpus = describe(*answers);
    choice.topology = discovered->topology;
    choice.topology_reason = discovered->explanation;
    // Devices on one GPU share its memory.
    std::map<int, int64_t> devices_on;
    for (const GpuAnswer& gpu : discovered->devices) {
        ++devices_on[gpu.device_idx];
    }
    for (const GpuAnswer& gpu : discovered->devices) {
        const int64_t share = gpu.total_memory_bytes / devices_on[gpu.device_idx];
        if (choice.device_memory_bytes == 0 || share < choice.device_memory_bytes) {
            choice.device_memory_bytes = share;
        }
    }
    return choice;
}

} // namespace
} // namespace einsummable::runtime::cuda

extern "C" const einsummable::runtime::cuda::CudaPlugin* einsummable_cuda_plugin() {
    static const einsummable::runtime::cuda::CudaPlugin plugin{
        einsummable::runtime::cuda::kCudaPluginAbi, &einsummable::runtime::cuda::choose};
    return &plugin;
}
