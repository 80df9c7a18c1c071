#include "kernels/cuda/cublaslt_api.h"

#include <atomic>
#include <string>

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/dl_library.h"

namespace einsummable::kernels::cuda {
namespace {

std::atomic<const CublasLtApi*> g_loaded{nullptr};

absl::StatusOr<const CublasLtApi*> open_library() {
    const std::string versioned = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
    absl::StatusOr<void*> opened = open_first_library(
        {versioned, "libcublasLt.so"}, "cuBLASLt is not installed or not on the library path");
    if (!opened.ok()) {
        return opened.status();
    }
    void* library = *opened;
    // Never closed: kernels and handles use it until the process exits.
    auto* api = new CublasLtApi();
#define EINSUMMABLE_CUBLASLT_RESOLVE(name)                                                         \
    api->name = reinterpret_cast<decltype(api->name)>(dlsym(library, #name));                      \
    if (api->name == nullptr) {                                                                    \
        delete api;                                                                                \
        return absl::FailedPreconditionError(                                                      \
            absl::StrCat(versioned, " has no function " #name " (an older cuBLASLt?)"));           \
    }
    EINSUMMABLE_CUBLASLT_FUNCTIONS(EINSUMMABLE_CUBLASLT_RESOLVE)
#undef EINSUMMABLE_CUBLASLT_RESOLVE
    return api;
}

} // namespace

absl::StatusOr<const CublasLtApi*> load_cublaslt() {
    static const absl::StatusOr<const CublasLtApi*> loaded = [] {
        absl::StatusOr<const CublasLtApi*> api = open_library();
        if (api.ok()) {
            g_loaded.store(*api, std::memory_order_release);
        }
        return api;
    }();
    return loaded;
}

const CublasLtApi* cublaslt_if_loaded() {
    return g_loaded.load(std::memory_order_acquire);
}

std::string describe_cublaslt(const CublasLtApi& api) {
    // major * 10000 + minor * 100 + patch, as CUBLAS_VERSION.
    const size_t version = api.cublasLtGetVersion();
    return absl::StrCat(version / 10000, ".", version % 10000 / 100, ".", version % 100, " from ",
                        library_file(reinterpret_cast<const void*>(api.cublasLtCreate)));
}

} // namespace einsummable::kernels::cuda
