#include "kernels/cuda/dl_library.h"

#include <dlfcn.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace einsummable::kernels::cuda {

absl::StatusOr<void*> open_first_library(const std::vector<std::string>& names,
                                         absl::string_view missing) {
    std::string errors;
    for (const std::string& name : names) {
        if (void* library = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL); library != nullptr) {
            return library;
        }
        const char* error = dlerror();
        absl::StrAppend(&errors, errors.empty() ? "" : "; ", error != nullptr ? error : name);
    }
    return absl::FailedPreconditionError(absl::StrCat(missing, ": ", errors));
}

std::string library_file(const void* symbol) {
    Dl_info info;
    if (dladdr(symbol, &info) != 0 && info.dli_fname != nullptr) {
        return info.dli_fname;
    }
    return "an unknown file";
}

} // namespace einsummable::kernels::cuda
