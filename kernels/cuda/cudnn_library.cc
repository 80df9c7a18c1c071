#include "kernels/cuda/cudnn_library.h"

#include <cstddef>
#include <string>
#include <utility>

#include <dlfcn.h>
#include <link.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
#include <cudnn_version.h>
#endif

namespace einsummable::kernels::cuda {
namespace {

// The file dlopen found for `handle` (the name as given when it has no path of its own).
std::string loaded_path(void* handle, const std::string& name) {
    link_map* map = nullptr;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr &&
        map->l_name[0] != '\0') {
        return map->l_name;
    }
    return name;
}

} // namespace

int64_t CudnnLibrary::major() const {
    // cuDNN 9 counts major * 10000 + minor * 100 + patch; cuDNN 8 and older major * 1000.
    return version >= 90000 ? version / 10000 : version / 1000;
}

std::string CudnnLibrary::version_string() const {
    if (version >= 90000) {
        return absl::StrCat(version / 10000, ".", version % 10000 / 100, ".", version % 100);
    }
    return absl::StrCat(version / 1000, ".", version % 1000 / 100, ".", version % 100);
}

std::string CudnnLibrary::describe() const {
    return absl::StrCat(version_string(), " from ", path);
}

std::vector<std::string> cudnn_library_names() {
#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
    return {absl::StrCat("libcudnn.so.", CUDNN_MAJOR), "libcudnn.so"};
#else
    return {"libcudnn.so"};
#endif
}

absl::StatusOr<CudnnLibrary> open_cudnn(const std::vector<std::string>& names) {
    std::string errors;
    for (const std::string& name : names) {
        // RTLD_LOCAL: nothing else in the process binds to cuDNN's symbols through us; the
        // frontend looks them up on this handle.
        void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) {
            const char* error = dlerror();
            absl::StrAppend(&errors, errors.empty() ? "" : "; ", error != nullptr ? error : name);
            continue;
        }
        CudnnLibrary library;
        library.handle = handle;
        library.path = loaded_path(handle, name);
        using GetVersion = size_t (*)();
        auto get_version = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
        if (get_version == nullptr) {
            dlclose(handle);
            return absl::FailedPreconditionError(
                absl::StrCat(library.path, " has no function cudnnGetVersion (not cuDNN?)"));
        }
        library.version = static_cast<int64_t>(get_version());
        return library;
    }
    return absl::FailedPreconditionError(
        absl::StrCat("cuDNN is not installed or not on the library path: ", errors));
}

absl::StatusOr<const CudnnLibrary*> load_cudnn() {
    static const absl::StatusOr<const CudnnLibrary*> loaded =
        []() -> absl::StatusOr<const CudnnLibrary*> {
#if EINSUMMABLE_HAVE_CUDNN_FRONTEND
        EINSUMMABLE_ASSIGN_OR_RETURN(CudnnLibrary library, open_cudnn(cudnn_library_names()));
        if (library.major() != CUDNN_MAJOR) {
            const std::string describe = library.describe();
            dlclose(library.handle);
            return absl::FailedPreconditionError(
                absl::StrCat("cuDNN ", describe, " is not cuDNN ", CUDNN_MAJOR,
                             ", which this build's cuDNN frontend was compiled against"));
        }
        // Never closed: the frontend and the cached graphs use it until the process exits.
        return new CudnnLibrary(std::move(library));
#else
        return absl::FailedPreconditionError(
            "this build has no cuDNN frontend (cmake/cuda.cmake: run scripts/setup, then "
            "configure again), so it does not use cuDNN");
#endif
    }();
    return loaded;
}

} // namespace einsummable::kernels::cuda
