#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace einsummable::kernels::cuda {

// cuDNN, opened with dlopen on first use rather than linked, as cuBLASLt is (cublaslt_api.h).
//
// Why: a program that links libcudnn does not start at all (the loader exits 127) where cuDNN is
// missing or lies off the loader's path (a pip wheel's site-packages/nvidia/cudnn/lib), although
// only fused attention needs it. Opened at run time, a missing cuDNN costs exactly that:
// prepare_cudnn_attention refuses, attention runs on the flash kernel, and the CUDA backend says
// so once (its Backend::kernels() warning). The cuDNN frontend is compiled with
// NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING and finds every cuDNN function with dlsym on the handle
// opened here (attention_cudnn.cc hands it over). dlsym on a null handle searches the whole
// process, so nothing may call into the frontend unless load_cudnn() succeeded.
struct CudnnLibrary {
    void* handle = nullptr; // dlopen's; never closed
    int64_t version = 0;    // cudnnGetVersion(): 91900 for 9.19.0
    std::string path;       // the file the loader opened

    int64_t major() const;
    // "9.19.0".
    std::string version_string() const;
    // "9.19.0 from /usr/local/cuda/lib64/libcudnn.so.9".
    std::string describe() const;
};

// The names load_cudnn() tries, in order: libcudnn.so.<CUDNN_MAJOR of the headers built
// against>, then libcudnn.so.
std::vector<std::string> cudnn_library_names();

// Opens the first of `names` that loads (dlopen, RTLD_NOW | RTLD_LOCAL) and reads its version.
// FailedPrecondition when none loads, naming each with dlerror()'s reason, or when the library
// opened has no cudnnGetVersion. Opens again on every call: load_cudnn() is the one the kernels
// use; this one is for tests.
absl::StatusOr<CudnnLibrary> open_cudnn(const std::vector<std::string>& names);

// open_cudnn(cudnn_library_names()) once per process, the same answer on every later call.
// FailedPrecondition also when the cuDNN found is of another major version than the headers
// (the frontend is compiled against those), or when this build has no cuDNN frontend (nothing
// would use it).
absl::StatusOr<const CudnnLibrary*> load_cudnn();

} // namespace einsummable::kernels::cuda
