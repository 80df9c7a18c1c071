#pragma once

#include "absl/status/statusor.h"
#include "runtime/backend_choice.h"

// The CUDA backend as a plugin: libeinsummable_cuda.so, which runtime/backend_choice.cc opens
// with dlopen when a program asks for (or may use) the CUDA backend. The programs themselves
// (einsummabled, einsummable-run) link no CUDA library.
//
// Why a plugin:
//   - Hosts without CUDA. A build with CUDA still runs on the CPU backend on a machine that has
//     no CUDA libraries at all; --backend=auto says why it chose the CPU.
//   - Static TLS. A shared library linked into an executable puts its static TLS into every
//     thread's stack, in every run, CUDA or not; libraries that arrive with dlopen get theirs
//     allocated on demand, in the runs that open them. It once decided whether the daemon
//     served /metrics at all: its HTTP server was then civetweb, whose threads have fixed
//     100 KB stacks, and with the CUDA runtime linked they failed to start. The endpoint now
//     runs on a thread whose stack the daemon sets (server/metrics_http.h); docs/cuda.md,
//     "Why a plugin".
//
// The plugin is built from the same sources as the programs, in the same build, so the C++
// types below cross the boundary as they are; kCudaPluginAbi guards against a stale file.

namespace einsummable::runtime::cuda {

// 2: Backend::prepare takes the ResidentMemory, and Backend::allocate_resident.
// 3: BackendChoice::device_memory_bytes.
// 4: Backend::kernels.
// 5: Backend::prepare with a Cancellation.
// 6: BackendRequest::cuda_rank_transport; the CUDA backend runs a rank's part of a split graph.
// 7: Backend::split_runs_take_turns.
inline constexpr int kCudaPluginAbi = 7;

struct CudaPlugin {
    int abi = kCudaPluginAbi;
    // The CUDA backend for request.devices (empty: one logical device per visible GPU), with the
    // GPUs as discovery saw them and the topology it found. request.backend is "cuda" or "auto"
    // and starts the reason line. FailedPrecondition when no GPU is visible or the driver cannot
    // be asked (auto then falls back to the CPU backend); InvalidArgument naming --devices for
    // a list that names a GPU that is not there.
    absl::StatusOr<BackendChoice> (*choose)(const BackendRequest& request) = nullptr;
};

} // namespace einsummable::runtime::cuda

// The plugin's one exported symbol.
extern "C" const einsummable::runtime::cuda::CudaPlugin* einsummable_cuda_plugin();
