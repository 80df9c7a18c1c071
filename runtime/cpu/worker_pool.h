#pragma once

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/types/span.h"

namespace einsummable::runtime::cpu {

// What a worker runs: node `node_idx` of whoever submitted it (one executable's run).
class NodeRunner {
public:
    virtual void run_node(int node_idx) = 0;

protected:
    ~NodeRunner() = default;
};

struct WorkItem {
    NodeRunner* runner = nullptr;
    int node_idx = -1;
};

// The virtual devices' worker threads: per device a FIFO ready queue (mutex + condition
// variable) served by `threads_per_device` threads. Threads are started once, here, and serve
// every executable of the backend for its whole life; items never migrate between devices.
class WorkerPool {
public:
    WorkerPool(int devices, int threads_per_device);
    ~WorkerPool(); // finishes queued items, then joins
    WorkerPool(const WorkerPool&) = delete;
    WorkerPool& operator=(const WorkerPool&) = delete;

    int devices() const { return static_cast<int>(queues_.size()); }
    // Queues items for `device`'s workers, waking as many as there are items.
    void submit(int device, absl::Span<const WorkItem> items);

private:
    struct DeviceQueue {
        std::mutex mutex;
        std::condition_variable ready;
        std::deque<WorkItem> items;
        bool stopping = false;
    };

    void serve(DeviceQueue& queue);

    std::vector<std::unique_ptr<DeviceQueue>> queues_;
    std::vector<std::thread> threads_;
};

} // namespace einsummable::runtime::cpu
