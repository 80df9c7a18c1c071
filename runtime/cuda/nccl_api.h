#pragma once

#include <string>

#include <nccl.h>

#include "absl/status/statusor.h"

namespace einsummable::runtime::cuda {

// NCCL, opened with dlopen on first use rather than linked, like cuBLASLt and cuDNN
// (kernels/cuda/cublaslt_api.h): the library is ~200 MB, only a daemon run over several
// processes on the CUDA backend needs it (docs/cluster.md "CUDA"), and a GPU machine brings
// its own (the pack scripts/gpu-check makes could not carry it).
//
// Every function used is a member of the same name: api.ncclSend(...).
#define EINSUMMABLE_NCCL_FUNCTIONS(X)                                                              \
    X(ncclGetVersion)                                                                              \
    X(ncclGetUniqueId)                                                                             \
    X(ncclCommInitRank)                                                                            \
    X(ncclCommDestroy)                                                                             \
    X(ncclCommAbort)                                                                               \
    X(ncclGetErrorString)                                                                          \
    X(ncclGetLastError)                                                                            \
    X(ncclGroupStart)                                                                              \
    X(ncclGroupEnd)                                                                                \
    X(ncclSend)                                                                                    \
    X(ncclRecv)

struct NcclApi {
#define EINSUMMABLE_NCCL_MEMBER(name) decltype(&::name) name = nullptr;
    EINSUMMABLE_NCCL_FUNCTIONS(EINSUMMABLE_NCCL_MEMBER)
#undef EINSUMMABLE_NCCL_MEMBER
};

// Opens libnccl (libnccl.so.<NCCL_MAJOR>, then libnccl.so) once per process and resolves every
// function. FailedPrecondition naming the library and dlerror() when it is missing or lacks a
// function; the same answer on every later call.
absl::StatusOr<const NcclApi*> load_nccl();

// "2.28.9 from /usr/local/cuda/lib/libnccl.so.2".
std::string describe_nccl(const NcclApi& api);

} // namespace einsummable::runtime::cuda
