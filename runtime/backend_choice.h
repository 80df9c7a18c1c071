#pragma once

#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "runtime/backend.h"
#include "runtime/transport.h"

namespace einsummable::runtime {

// The backend a program runs its plans on, chosen from its flags the same way by the daemon
// (--backend, --devices) and einsummable-run, so that both say the same thing about it.
struct BackendRequest {
    std::string backend = "auto"; // auto | cpu | cuda
    // --devices: empty (8 CPU virtual devices, or every visible GPU), a count ("4"), or for
    // the CUDA backend a list of GPU ordinals ("0,0,0,0": four virtual devices on GPU 0).
    std::string devices;
    int default_cpu_devices = 8;
    // A rank of a daemon run over several processes (docs/cluster.md): its transport to the
    // other ranks, which the split graphs' messages travel on (the CUDA backend's as
    // --cuda_rank_transport says: nccl or mpi).
    std::shared_ptr<Transport> transport;
    std::string cuda_rank_transport = "nccl";
};

struct BackendChoice {
    std::shared_ptr<Backend> backend;
    // Why this backend, one line: "auto: 1 GPU visible -> cuda on GPUs [0,0,0,0]".
    std::string reason;
    // CUDA: the GPUs as discovery saw them (names, memory, NVLinks, peer matrix); empty on CPU.
    std::string gpus;
    // CUDA: the topology discovered for the devices and the facts it rests on; unset on CPU.
    std::optional<exprog::Topology> topology;
    std::string topology_reason;
    // CUDA: the bytes one device may hold, from the driver: each GPU's total memory divided
    // among the devices on it (--devices=0,0 gives each half of GPU 0), the smallest over the
    // devices. 0 on CPU, whose virtual devices share the host's memory.
    int64_t device_memory_bytes = 0;
};

// Whether this build has the CUDA backend (nvcc was found when it was configured).
bool cuda_backend_built();

// Checks the flags without touching any hardware: InvalidArgument naming the flag.
absl::Status check_backend_request(const BackendRequest& request);

// Makes the backend. auto takes CUDA when this build has it and a GPU is visible, else the CPU
// backend. --backend=cuda without a GPU (or without CUDA in the build) is FailedPrecondition
// saying so; a device list naming a GPU that is not there is InvalidArgument.
absl::StatusOr<BackendChoice> choose_backend(const BackendRequest& request);

} // namespace einsummable::runtime
