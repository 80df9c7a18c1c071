#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/physical/exec_graph.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/cuda/kernel.h"
#include "runtime/backend.h"
#include "runtime/cuda/graph_plan.h"

namespace einsummable::runtime::cuda {

// The CUDA backend's Executable (private to runtime/cuda and its tests). Everything is decided
// and allocated in create(); run() is one cudaGraphLaunch and one synchronisation.
class CudaExecutable final : public Executable {
public:
    // `graph` must have passed check_exec_graph and outlive the executable. gpu_of_device maps
    // its logical devices to GPUs; peer_access is over those GPUs (cudaDeviceCanAccessPeer).
    static absl::StatusOr<std::unique_ptr<CudaExecutable>>
    create(const physical::ExecGraph& graph, std::vector<int> gpu_of_device,
           std::vector<std::vector<bool>> peer_access);
    ~CudaExecutable() override;

    absl::Status write_buffer(physical::BufferId buffer, absl::Span<const std::byte> data) override;
    absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) override;
    absl::Status run() override;
    std::vector<std::vector<int64_t>> bytes_moved() const override;
    std::vector<int64_t> allocated_bytes() const override;

    // The graph's shape ("12 kernel, 3 memcpy, ...") and how long building it took.
    const GraphPlan& graph_plan() const { return plan_; }
    double instantiate_seconds() const { return instantiate_seconds_; }

private:
    explicit CudaExecutable(const physical::ExecGraph& graph) : graph_(graph) {}

    absl::Status allocate();
    absl::Status prepare_kernels();
    absl::Status build_graph();
    absl::Status add_op(int op_idx, const std::vector<cudaGraphNode_t>& deps,
                        cudaGraphNode_t* node);
    // Captures `enqueue`'s work on the device's stream into a child graph node.
    template <typename Enqueue>
    absl::Status add_captured(int device, const std::vector<cudaGraphNode_t>& deps,
                              cudaGraphNode_t* node, Enqueue enqueue);
    std::byte* address(physical::BufferId buffer) const;
    absl::Status check_transfer(physical::BufferId buffer, size_t host_bytes) const;

    const physical::ExecGraph& graph_;
    std::vector<int> gpu_of_device_;
    std::vector<std::vector<bool>> peer_access_;

    // Per logical device.
    std::vector<std::byte*> arenas_; // cudaMalloc'd: arena_bytes, then the scratch region
    std::vector<int64_t> arena_bytes_;
    std::vector<int64_t> scratch_bytes_;
    std::vector<cudaStream_t> streams_; // capture streams; streams_[0] also launches
    std::vector<std::unique_ptr<kernels::cuda::DeviceLibraries>> libraries_;
    std::byte* staging_ = nullptr; // pinned host memory for copies through the host

    // Per ExecGraph node: its prepared kernel (kernel nodes only).
    std::vector<std::unique_ptr<kernels::cuda::PreparedKernel>> kernels_;
    GraphPlan plan_;
    cudaGraph_t cuda_graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    double instantiate_seconds_ = 0.0;

    std::vector<std::vector<int64_t>> moved_; // [src][dst], over all runs
};

} // namespace einsummable::runtime::cuda
