#include "runtime/backend_choice.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/support/status_macros.h"
#include "runtime/cpu/cpu_backend.h"

#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include <dlfcn.h>

#include "runtime/cuda/cuda_plugin.h"
#endif

namespace einsummable::runtime {
namespace {

constexpr int kMaxDevices = 1024;
#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
constexpr const char* kCudaPluginFile = "libeinsummable_cuda.so";
#endif

bool is_list(const std::string& devices) {
    return devices.find(',') != std::string::npos;
}

// --devices as a count (an empty flag is `fallback`).
absl::StatusOr<int> device_count(const std::string& devices, int fallback) {
    if (devices.empty()) {
        return fallback;
    }
    int count = 0;
    if (!absl::SimpleAtoi(devices, &count) || count < 1 || count > kMaxDevices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--devices=", devices, ": expected a count from 1 to ", kMaxDevices,
            " or, for the CUDA backend, a list of GPU ordinals such as 0,0,1,1",
            devices == "0" ? " (a lone number is a count: GPU 0 alone is --devices=1)" : ""));
    }
    return count;
}

absl::StatusOr<BackendChoice> cpu_choice(const BackendRequest& request, std::string why) {
    if (is_list(request.devices)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices=", request.devices,
                         ": a list of GPUs is for the CUDA "
                         "backend; the CPU backend takes a count of virtual devices (",
                         why, ")"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(int devices,
                                 device_count(request.devices, request.default_cpu_devices));
    BackendChoice choice;
    choice.backend = cpu::make_cpu_backend({devices, 1, request.transport});
    choice.reason = absl::StrCat(why, " -> cpu backend with ", devices, " virtual devices");
    return choice;
}

#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
// The CUDA backend plugin (runtime/cuda/cuda_plugin.h), opened once per process:
// $EINSUMMABLE_CUDA_PLUGIN, else lib/libeinsummable_cuda.so beside the program's bin/, else the
// library search path. FailedPrecondition saying what was tried when none opens.
absl::StatusOr<const cuda::CudaPlugin*> open_cuda_plugin() {
    static const absl::StatusOr<const cuda::CudaPlugin*> plugin =
        []() -> absl::StatusOr<const cuda::CudaPlugin*> {
        std::vector<std::string> candidates;
        if (const char* path = std::getenv("EINSUMMABLE_CUDA_PLUGIN"); path && *path) {
            candidates.emplace_back(path);
        } else {
            std::error_code error;
            const std::filesystem::path exe =
                std::filesystem::read_symlink("/proc/self/exe", error);
            if (!error) {
                candidates.push_back(
                    (exe.parent_path().parent_path() / "lib" / kCudaPluginFile).string());
            }
            candidates.emplace_back(kCudaPluginFile);
        }
        std::vector<std::string> failures;
        for (const std::string& candidate : candidates) {
            // RTLD_LOCAL: the plugin's copies of the compiler and its CUDA libraries stay its own.
            void* library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
            if (library == nullptr) {
                const char* message = dlerror();
                failures.push_back(message != nullptr ? message : candidate);
                continue;
            }
            using Entry = const cuda::CudaPlugin* (*)();
            auto entry = reinterpret_cast<Entry>(dlsym(library, "einsummable_cuda_plugin"));
            const cuda::CudaPlugin* found = entry != nullptr ? entry() : nullptr;
            if (found == nullptr || found->abi != cuda::kCudaPluginAbi ||
                found->choose == nullptr) {
                return absl::FailedPreconditionError(absl::StrCat(
                    candidate, " is not this build's CUDA backend plugin (rebuild it)"));
            }
            return found; // never closed: backends it made live until exit
        }
        return absl::FailedPreconditionError(absl::StrCat(
            "the CUDA backend plugin cannot be opened (", absl::StrJoin(failures, "; "), ")"));
    }();
    return plugin;
}
#endif

} // namespace

bool cuda_backend_built() {
#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
    return true;
#else
    return false;
#endif
}

absl::Status check_backend_request(const BackendRequest& request) {
    if (request.backend != "auto" && request.backend != "cpu" && request.backend != "cuda") {
        return absl::InvalidArgumentError(
            absl::StrCat("--backend=", request.backend, ": expected auto, cpu or cuda"));
    }
    if (request.cuda_rank_transport != "nccl" && request.cuda_rank_transport != "mpi") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--cuda_rank_transport=", request.cuda_rank_transport,
            ": expected nccl (GPU to GPU, one GPU per rank) or mpi (through host memory)"));
    }
    if (is_list(request.devices)) {
        if (request.backend == "cpu") {
            return absl::InvalidArgumentError(
                absl::StrCat("--devices=", request.devices,
                             ": a list of GPUs is for the CUDA backend; the CPU backend takes a "
                             "count of virtual devices"));
        }
        for (absl::string_view entry : absl::StrSplit(request.devices, ',')) {
            int gpu = 0;
            if (!absl::SimpleAtoi(entry, &gpu) || gpu < 0) {
                return absl::InvalidArgumentError(absl::StrCat("--devices=", request.devices, ": '",
                                                               entry, "' is not a GPU ordinal"));
            }
        }
        return absl::OkStatus();
    }
    return device_count(request.devices, 1).status();
}

absl::StatusOr<BackendChoice> choose_backend(const BackendRequest& request) {
    EINSUMMABLE_RETURN_IF_ERROR(check_backend_request(request));
    if (request.backend == "cpu") {
        return cpu_choice(request, "--backend=cpu");
    }
#if defined(EINSUMMABLE_WITH_CUDA_BACKEND)
    absl::StatusOr<const cuda::CudaPlugin*> plugin = open_cuda_plugin();
    absl::StatusOr<BackendChoice> cuda =
        plugin.ok() ? (*plugin)->choose(request)
                    : absl::StatusOr<BackendChoice>(absl::Status(
                          plugin.status().code(), absl::StrCat("--backend=", request.backend, ": ",
                                                               plugin.status().message())));
    // auto takes the CPU backend when CUDA cannot run here (no plugin, no driver, no GPU) and
    // says why; a bad --devices is an error either way.
    if (request.backend == "cuda" || !absl::IsFailedPrecondition(cuda.status())) {
        return cuda;
    }
    return cpu_choice(request, std::string(cuda.status().message()));
#else
    if (request.backend == "cuda") {
        return absl::FailedPreconditionError(
            "--backend=cuda: this build has no CUDA backend (nvcc was not found when it was "
            "configured); use --backend=cpu");
    }
    return cpu_choice(request, "--backend=auto: this build has no CUDA backend");
#endif
}

} // namespace einsummable::runtime
