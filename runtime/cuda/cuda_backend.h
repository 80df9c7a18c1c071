#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/backend.h"
#include "runtime/cuda/rank_messages.h"
#include "runtime/transport.h"

namespace einsummable::runtime::cuda {

struct CudaBackendOptions {
    // Logical device -> GPU ordinal (after CUDA_VISIBLE_DEVICES). Several logical devices may
    // share a GPU ("virtual devices": 0,0,0,0 runs a 4-device plan on GPU 0), each with its own
    // arena. Empty: one logical device per visible GPU.
    std::vector<int> device_list;
    // A rank of a daemon run over several processes (docs/cluster.md): its transport to the
    // other ranks, and how the messages of the split graphs' parts travel (rank_messages.h).
    // With nccl, making the backend joins every rank's NCCL communicators: every rank makes its
    // backend at start, with the same device list.
    std::shared_ptr<Transport> transport;
    RankTransportKind rank_transport = RankTransportKind::nccl;
};

// The CUDA backend (docs/cuda.md): prepare() allocates one arena per logical device once,
// prepares every kernel (library algorithms chosen then), enables peer access, and builds,
// instantiates and uploads one CUDA graph spanning every device of the plan; run() launches
// that graph and waits for it. allocate_resident() gives a CudaResidentMemory
// (cuda_resident_memory.h) on the same GPUs, whose arenas the graphs of every plan prepared
// with it read in place. FailedPrecondition when no GPU is visible; InvalidArgument naming the
// entry when device_list names a GPU that is not there.
absl::StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& options);

// What runs the CUDA backend's kernels (its Backend::kernels()): the versions and files of
// cuBLASLt and cuDNN, which the kernels open at run time rather than link, or a warning saying
// which did not load, why, and what that costs (without cuDNN, attention runs on the flash
// kernel). Loads both libraries once per process; needs no GPU.
KernelsInfo cuda_kernels_info();

// Parses a device list "0,0,1,1" (or a count "4": devices 0..3). InvalidArgument naming the
// entry otherwise.
absl::StatusOr<std::vector<int>> parse_device_list(absl::string_view text);

} // namespace einsummable::runtime::cuda
