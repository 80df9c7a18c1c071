#include "runtime/cuda/nccl_api.h"

#include <string>

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/dl_library.h"

namespace einsummable::runtime::cuda {
namespace {

absl::StatusOr<const NcclApi*> open_library() {
    const std::string versioned = absl::StrCat("libnccl.so.", NCCL_MAJOR);
    absl::StatusOr<void*> opened = kernels::cuda::open_first_library(
        {versioned, "libnccl.so"}, "NCCL is not installed or not on the library path (it comes "
                                   "with the CUDA toolkit, or from PyPI's nvidia-nccl-cu13)");
    if (!opened.ok()) {
        return opened.status();
    }
    void* library = *opened;
    // Never closed: communicators use it until the process exits.
    auto* api = new NcclApi();
#define EINSUMMABLE_NCCL_RESOLVE(name)                                                             \
    api->name = reinterpret_cast<decltype(api->name)>(dlsym(library, #name));                      \
    if (api->name == nullptr) {                                                                    \
        delete api;                                                                                \
        return absl::FailedPreconditionError(                                                      \
            absl::StrCat(versioned, " has no function " #name " (an NCCL older than 2.9?)"));      \
    }
    EINSUMMABLE_NCCL_FUNCTIONS(EINSUMMABLE_NCCL_RESOLVE)
#undef EINSUMMABLE_NCCL_RESOLVE
    return api;
}

} // namespace

absl::StatusOr<const NcclApi*> load_nccl() {
    static const absl::StatusOr<const NcclApi*> loaded = open_library();
    return loaded;
}

std::string describe_nccl(const NcclApi& api) {
    int version = 0;
    api.ncclGetVersion(&version);
    // major * 10000 + minor * 100 + patch since 2.9, as NCCL_VERSION_CODE.
    return absl::StrCat(version / 10000, ".", version % 10000 / 100, ".", version % 100, " from ",
                        kernels::cuda::library_file(reinterpret_cast<const void*>(api.ncclSend)));
}

} // namespace einsummable::runtime::cuda
