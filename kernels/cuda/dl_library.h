#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::kernels::cuda {

// The libraries the CUDA backend opens at run time rather than links (cuBLASLt:
// cublaslt_api.h; NCCL: runtime/cuda/nccl_api.h): why each is opened so is said beside it.

// Opens the first of `names` dlopen finds (RTLD_NOW | RTLD_LOCAL: nothing else in the process
// binds to its symbols through us); never closed. FailedPrecondition "<missing>: <each dlerror>"
// when none opens.
absl::StatusOr<void*> open_first_library(const std::vector<std::string>& names,
                                         absl::string_view missing);

// The file that holds `symbol`, from dladdr: "/usr/local/cuda/lib64/libcublasLt.so.13", or "an
// unknown file".
std::string library_file(const void* symbol);

} // namespace einsummable::kernels::cuda
