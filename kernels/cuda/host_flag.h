#pragma once

// A GPU waiting for the host without blocking any host thread (host_flag.cu holds the kernel).
// The CUDA backend's messages staged through pinned host memory (runtime/cuda/rank_messages.h)
// use it: a host function starts receiving a message and returns, the transport sets the flag
// when the message is there, and this kernel holds the stream until then. A host function that
// blocked instead would hold CUDA's one callback thread, which the process's other host
// functions (a send the peer waits for, in the same process) also need. C++17.

#include <cstdint>

#include <cuda_runtime_api.h>

namespace einsummable::kernels::cuda {

// Enqueues on `stream` one thread that polls *flag (pinned, mapped host memory: a pointer from
// cudaHostAlloc with cudaHostAllocMapped, valid on the device under unified addressing) until
// it is not 0, sleeping a microsecond between polls where the GPU can. The launch's error.
cudaError_t launch_wait_host_flag(const uint32_t* flag, cudaStream_t stream);

} // namespace einsummable::kernels::cuda
