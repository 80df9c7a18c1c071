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
#include "runtime/cuda/cuda_resident_memory.h"
#include "runtime/cuda/graph_plan.h"
#include "runtime/cuda/rank_messages.h"

namespace einsummable::runtime::cuda {

// The CUDA backend's Executable (private to runtime/cuda and its tests). Everything is decided
// and allocated in create(); run() is one cudaGraphLaunch and one synchronisation.
class CudaExecutable final : public Executable {
public:
    // `graph` must have passed check_exec_graph and outlive the executable. gpu_of_device maps
    // its logical devices to GPUs; peer_access is over those GPUs (cudaDeviceCanAccessPeer).
    // `resident` holds the graph's resident buffers (kept alive by the executable; may be null
    // when the graph has none): InvalidArgument, before anything touches a GPU, when the graph
    // has resident buffers and it is null, smaller than graph.resident_bytes on a device, or
    // on another GPU than gpu_of_device says. A rank's part of a graph split over processes
    // (send and recv nodes) needs `messages` (rank_messages.h): InvalidArgument without a
    // transport.
    static absl::StatusOr<std::unique_ptr<CudaExecutable>>
    create(const physical::ExecGraph& graph, std::vector<int> gpu_of_device,
           std::vector<std::vector<bool>> peer_access,
           std::shared_ptr<CudaResidentMemory> resident = nullptr, RankMessages messages = {});
    ~CudaExecutable() override;

    // InvalidArgument for a resident buffer: the plans sharing it read it, so it is written
    // through the ResidentMemory. read_buffer reads resident buffers where they lie.
    absl::Status write_buffer(physical::BufferId buffer, absl::Span<const std::byte> data) override;
    absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) override;
    absl::Status run() override;
    std::vector<std::vector<int64_t>> bytes_moved() const override;
    std::vector<int64_t> allocated_bytes() const override;

    // The same work without the graph: every op issued in order on its logical device's
    // stream, waiting on events for deps on other devices. For the GPU check (graph replay
    // against eager launches) and for finding a failing kernel, which a graph launch cannot
    // name: an error here names the ExecGraph node. Not concurrent with run().
    absl::Status run_eager();

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
    // Enqueues op `op_idx`'s work (copy, kernel, library call) on `stream`: what the graph's
    // node for it does, for capture (add_op) and for run_eager alike.
    absl::Status enqueue_op(int op_idx, cudaStream_t stream) const;
    // run_eager's parts: one event per op (all or none), and every op issued on its stream.
    absl::Status create_events();
    absl::Status issue_eager();
    void count_moved();
    std::byte* address(physical::BufferId buffer) const;
    // Where a buffer that carries log-sum-exp statistics (Buffer::stats) keeps them.
    float* stats_address(physical::BufferId buffer) const;
    std::byte* range_address(const MemoryRange& range) const;
    absl::Status check_transfer(physical::BufferId buffer, size_t host_bytes) const;

    const physical::ExecGraph& graph_;
    std::vector<int> gpu_of_device_;
    std::vector<std::vector<bool>> peer_access_;

    // Per logical device.
    std::vector<std::byte*> arenas_; // cudaMalloc'd: arena_bytes, then the scratch region
    std::vector<int64_t> arena_bytes_;
    std::vector<int64_t> scratch_bytes_;
    // The resident arenas the graph's resident buffers lie in (null when it has none); shared
    // with the other executables of the model. Released after the graph that holds its
    // addresses (members outlive the destructor's body).
    std::shared_ptr<CudaResidentMemory> resident_;
    std::vector<cudaStream_t> streams_; // capture streams; streams_[0] also launches
    std::vector<std::unique_ptr<kernels::cuda::DeviceLibraries>> libraries_;
    std::byte* staging_ = nullptr; // pinned host memory for copies through the host
    // A rank's messages: how they travel, and on the host path their state (reset first by the
    // destructor: sends in flight read staging_). slot_of_op_: per op, its message slot or -1.
    RankMessages messages_;
    std::unique_ptr<StagedMessages> staged_;
    std::vector<int> slot_of_op_;

    // Per ExecGraph node: its prepared kernel (kernel nodes only).
    std::vector<std::unique_ptr<kernels::cuda::PreparedKernel>> kernels_;
    GraphPlan plan_;
    cudaGraph_t cuda_graph_ = nullptr;
    cudaGraphExec_t exec_ = nullptr;
    double instantiate_seconds_ = 0.0;

    std::vector<cudaEvent_t> events_;         // per op, created by the first run_eager()
    std::vector<std::vector<int64_t>> moved_; // [src][dst], over all runs
};

} // namespace einsummable::runtime::cuda
