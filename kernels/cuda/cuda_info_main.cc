// einsummable-cuda-info: says which of the libraries the CUDA kernels open at run time load, one
// line each ("cublaslt: loaded <version> from <path>" or "cublaslt: not loaded: <reason>", then
// the same for cudnn), then lists the GPUs the CUDA runtime sees, one per line, or says that
// there are none. Loading the libraries needs no GPU.
//
// Exits 0 on a machine without a driver, GPU or libraries; 1 on an unexpected CUDA error, or
// with --require_libraries when cuBLASLt or cuDNN does not load (scripts/gpu-check uses it);
// 2 on a usage error.
#include <cstdio>
#include <cstring>
#include <string>

#include "compiler/support/status_macros.h"
#include "kernels/cuda/cublaslt_api.h"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/cuda/device_info.h"

namespace {

namespace cuda = einsummable::kernels::cuda;

// Prints the library's line; whether it loaded.
bool print_library(const char* name, const absl::StatusOr<std::string>& loaded) {
    if (loaded.ok()) {
        std::printf("%s: loaded %s\n", name, loaded->c_str());
        return true;
    }
    std::printf("%s: not loaded: %s\n", name, std::string(loaded.status().message()).c_str());
    return false;
}

absl::StatusOr<std::string> cublaslt() {
    EINSUMMABLE_ASSIGN_OR_RETURN(const cuda::CublasLtApi* api, cuda::load_cublaslt());
    return cuda::describe_cublaslt(*api);
}

absl::StatusOr<std::string> cudnn() {
    EINSUMMABLE_ASSIGN_OR_RETURN(const cuda::CudnnLibrary* library, cuda::load_cudnn());
    return library->describe();
}

} // namespace

int main(int argc, char** argv) {
    bool require_libraries = false;
    for (int idx = 1; idx < argc; ++idx) {
        if (std::strcmp(argv[idx], "--require_libraries") == 0) {
            require_libraries = true;
        } else {
            std::fprintf(stderr,
                         "einsummable-cuda-info: unknown argument '%s'\n"
                         "usage: einsummable-cuda-info [--require_libraries]\n"
                         "  --require_libraries  exit 1 when cuBLASLt or cuDNN does not load\n",
                         argv[idx]);
            return 2;
        }
    }
    bool libraries_loaded = print_library("cublaslt", cublaslt());
    libraries_loaded = print_library("cudnn", cudnn()) && libraries_loaded;

    absl::StatusOr<std::vector<cuda::DeviceInfo>> devices = cuda::list_devices();
    if (!devices.ok()) {
        std::fprintf(stderr, "einsummable-cuda-info: %s\n", devices.status().ToString().c_str());
        return 1;
    }
    if (devices->empty()) {
        std::printf("no CUDA device present\n");
    }
    for (const cuda::DeviceInfo& device : *devices) {
        std::printf("%s\n", device.to_string().c_str());
    }
    if (require_libraries && !libraries_loaded) {
        std::fprintf(stderr, "einsummable-cuda-info: --require_libraries: a library did not "
                             "load (above)\n");
        return 1;
    }
    return 0;
}
