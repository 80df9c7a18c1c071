#pragma once

#include <string>

#include <cublasLt.h>

#include "absl/status/statusor.h"

namespace einsummable::kernels::cuda {

// cuBLASLt, opened with dlopen on first use rather than linked.
//
// Why: libcublasLt carries ~94 KB of static thread-local storage. A library linked into the
// executable puts its TLS into every thread's stack, so a thread with a small fixed stack (such
// as the 100 KB civetweb gives its threads: it once served the daemon's /metrics) fails
// to start (pthread_create: EINVAL). A library opened with dlopen gets its TLS allocated on
// demand instead. It also means a daemon on the CPU backend never loads cuBLASLt.
// tests/unit/kernels/cuda_kernels_test.cc checks that threads with small stacks still start in a
// process that links the CUDA kernels.
//
// Every function the kernels call is a member of the same name: api.cublasLtMatmul(...).
#define EINSUMMABLE_CUBLASLT_FUNCTIONS(X)                                                          \
    X(cublasLtCreate)                                                                              \
    X(cublasLtDestroy)                                                                             \
    X(cublasLtGetStatusName)                                                                       \
    X(cublasLtGetStatusString)                                                                     \
    X(cublasLtGetVersion)                                                                          \
    X(cublasLtMatmul)                                                                              \
    X(cublasLtMatmulAlgoGetHeuristic)                                                              \
    X(cublasLtMatmulDescCreate)                                                                    \
    X(cublasLtMatmulDescDestroy)                                                                   \
    X(cublasLtMatmulDescSetAttribute)                                                              \
    X(cublasLtMatmulPreferenceCreate)                                                              \
    X(cublasLtMatmulPreferenceDestroy)                                                             \
    X(cublasLtMatmulPreferenceSetAttribute)                                                        \
    X(cublasLtMatrixLayoutCreate)                                                                  \
    X(cublasLtMatrixLayoutDestroy)                                                                 \
    X(cublasLtMatrixLayoutSetAttribute)

struct CublasLtApi {
#define EINSUMMABLE_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
    EINSUMMABLE_CUBLASLT_FUNCTIONS(EINSUMMABLE_CUBLASLT_MEMBER)
#undef EINSUMMABLE_CUBLASLT_MEMBER
};

// Opens libcublasLt (libcublasLt.so.<CUBLAS_VER_MAJOR>, then libcublasLt.so) once per process
// and resolves every function. FailedPrecondition naming the library and dlerror() when it is
// missing or lacks a function; the same answer on every later call.
absl::StatusOr<const CublasLtApi*> load_cublaslt();

// The loaded API, or null when load_cublaslt() has not succeeded (yet).
const CublasLtApi* cublaslt_if_loaded();

// The loaded cuBLASLt's version and file: "13.1.0 from /usr/local/cuda/lib64/libcublasLt.so.13".
std::string describe_cublaslt(const CublasLtApi& api);

} // namespace einsummable::kernels::cuda
