#pragma once

#include <memory>

#include "runtime/backend.h"
#include "runtime/transport.h"

namespace einsummable::runtime::cpu {

struct CpuBackendOptions {
    int devices = 1;
    // Worker threads per virtual device. BLAS runs single-threaded inside each worker, so p
    // devices use p cores.
    int threads_per_device = 1;
    // A rank's transport to the other ranks of a cluster (runtime/transport.h), which the
    // executables of split graphs' parts send and receive through; null in one process.
    std::shared_ptr<Transport> transport;
};

// The embedded default backend (docs/design.md "Runtime and kernels"): `devices` virtual devices in
// one process, each with its own arena and worker thread(s). A node runs on its device's
// worker once its deps are done; copies are memcpy into the destination device's arena and
// are counted per device pair; kernels are kernels/cpu's f32 kernels, with f16/bf16/f64
// storage converted at the kernel boundary.
// devices and threads_per_device below 1 are taken as 1.
std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options);

} // namespace einsummable::runtime::cpu
