#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/physical/exec_graph.h"
#include "runtime/backend.h"
#include "runtime/cpu/aligned_arena.h"
#include "runtime/cpu/cpu_resident_memory.h"
#include "runtime/cpu/worker_pool.h"
#include "runtime/transport.h"

namespace einsummable::runtime::cpu {

// The CPU backend's Executable (private to runtime/cpu and its tests; users hold an
// Executable). A run is a dataflow over the ExecGraph: every node has a counter of unfinished
// deps, reset at the start of run(); nodes whose counter is zero go to their device's ready
// queue in the shared WorkerPool, and the worker that finishes a node decrements its
// successors' counters and queues the ones that reach zero. run() sleeps until every node has
// finished or been skipped: after a failure the remaining nodes are still walked through the
// same counters, but not executed, so a failed run ends like any other and leaves no work
// queued.
//
// A rank's part of a split graph (compiler/physical/rank_split.h) also has send and recv nodes:
// a worker starts the message on the transport and returns; the node finishes when the
// transport says it is done, and only then are its successors queued. Messages are exchanged
// even in a failed run (a send sends its buffer as it is), so the other ranks' parts end too.
class CpuExecutable final : public Executable, private NodeRunner {
public:
    // `graph` must have passed check_exec_graph and outlive the executable. `resident` holds
    // the graph's resident buffers (InvalidArgument when it is null or smaller than
    // graph.resident_bytes on some device while the graph has any); null otherwise. Cancelled
    // when `cancellation` is set before or while the arenas are allocated and zeroed (polled
    // per device and per slice zeroed: zeroing is most of the time prepare takes). A graph with
    // send or recv nodes needs a `transport` (InvalidArgument without one, or when a node's peer
    // is not one of its ranks).
    static absl::StatusOr<std::unique_ptr<CpuExecutable>>
    create(const physical::ExecGraph& graph, std::shared_ptr<WorkerPool> pool,
           std::shared_ptr<const CpuResidentMemory> resident = nullptr,
           const support::Cancellation* cancellation = nullptr,
           std::shared_ptr<Transport> transport = nullptr);
    ~CpuExecutable() override;

    absl::Status write_buffer(physical::BufferId buffer, absl::Span<const std::byte> data) override;
    absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) override;
    absl::Status run() override;
    std::vector<std::vector<int64_t>> bytes_moved() const override;
    std::vector<int64_t> allocated_bytes() const override;

    // Device `device`'s arena (for tests: it never moves between runs).
    const std::byte* arena(int device) const { return arenas_[device].get(); }

private:
    CpuExecutable(const physical::ExecGraph& graph, std::shared_ptr<WorkerPool> pool);

    absl::Status check_transfer(physical::BufferId buffer, size_t host_bytes) const;
    std::byte* address(physical::BufferId buffer) const;
    void run_node(int node_idx) override;
    // Starts node node_idx's message; finish() runs when the transport is done with it.
    void start_message(int node_idx);
    // What follows a node's work: queues the successors that became ready, ends the run after
    // the last node.
    void finish(int node_idx);
    void record_failure(int node_idx, const absl::Status& status);

    const physical::ExecGraph& graph_;
    const int devices_;
    std::shared_ptr<WorkerPool> pool_;
    std::shared_ptr<Transport> transport_; // null unless the graph has messages
    std::vector<Arena> arenas_;
    std::vector<std::byte*> arena_bases_; // arenas_[d].get(), as kernels want them
    std::shared_ptr<const CpuResidentMemory> resident_;
    std::vector<std::byte*> resident_bases_; // resident_->base(d); empty without one

    // The dataflow, fixed at creation: successors and dep counts per node (deps deduplicated),
    // and per device the nodes that have no deps.
    std::vector<std::vector<int>> successors_;
    std::vector<int> dep_counts_;
    std::vector<std::vector<WorkItem>> sources_;

    // One run's state.
    std::unique_ptr<std::atomic<int>[]> unfinished_deps_;
    std::atomic<int> unfinished_nodes_{0};
    std::atomic<bool> failed_{false};
    std::mutex mutex_;
    std::condition_variable finished_;
    bool done_ = true;   // guarded by mutex_
    absl::Status error_; // guarded by mutex_; the first failure of the run

    // Bytes moved by copy nodes, [src * devices_ + dst], over all runs.
    std::unique_ptr<std::atomic<int64_t>[]> moved_;
};

} // namespace einsummable::runtime::cpu
