#include "kernels/cuda/cublaslt_api.h"

#include <atomic>
#include <string>

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace einsummable::kernels::cuda {
namespace {

std::atomic<const CublasLtApi*> g_loaded{nullptr};

absl::StatusOr<const CublasLtApi*> open_library() {
    const std::string versioned = absl::StrCat("libcublasLt.so.", CUBLAS_VER_MAJOR);
    std::string errors;
    void* library = nullptr;
    for (const std::string& name : {versioned, std::string("libcublasLt.so")}) {
        // RTLD_LOCAL: nothing else in the process binds to these symbols through us.
        library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (library != nullptr) {
            break;
        }
        const char* error = dlerror();
        absl::StrAppend(&errors, errors.empty() ? "" : "; ", error != nullptr ? error : name);
    }
    if (library == nullptr) {
        return absl::FailedPreconditionError(
            absl::StrCat("cuBLASLt is not installed or not on the library path: ", errors));
    }
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
    std::string path = "an unknown file";
    Dl_info info;
    if (dladdr(reinterpret_cast<const void*>(api.cublasLtCreate), &info) != 0 &&
        info.dli_fname != nullptr) {
        path = info.dli_fname;
    }
    return absl::StrCat(version / 10000, ".", version % 10000 / 100, ".", version % 100, " from ",
                        path);
}

} // namespace einsummable::kernels::cuda
