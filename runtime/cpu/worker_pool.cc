#include "runtime/cpu/worker_pool.h"

namespace einsummable::runtime::cpu {

WorkerPool::WorkerPool(int devices, int threads_per_device) {
    for (int d = 0; d < devices; ++d) {
        queues_.push_back(std::make_unique<DeviceQueue>());
    }
    for (int d = 0; d < devices; ++d) {
        for (int t = 0; t < threads_per_device; ++t) {
            threads_.emplace_back([this, queue = queues_[d].get()] { serve(*queue); });
        }
    }
}

WorkerPool::~WorkerPool() {
    for (const std::unique_ptr<DeviceQueue>& queue : queues_) {
        std::lock_guard<std::mutex> lock(queue->mutex);
        queue->stopping = true;
        queue->ready.notify_all();
    }
    for (std::thread& thread : threads_) {
        thread.join();
    }
}

void WorkerPool::submit(int device, absl::Span<const WorkItem> items) {
    if (items.empty()) {
        return;
    }
    DeviceQueue& queue = *queues_[device];
    std::lock_guard<std::mutex> lock(queue.mutex);
    queue.items.insert(queue.items.end(), items.begin(), items.end());
    if (items.size() == 1) {
        queue.ready.notify_one();
    } else {
        queue.ready.notify_all();
    }
}

void WorkerPool::serve(DeviceQueue& queue) {
    std::unique_lock<std::mutex> lock(queue.mutex);
    while (true) {
        queue.ready.wait(lock, [&] { return queue.stopping || !queue.items.empty(); });
        if (queue.items.empty()) {
            return; // stopping, nothing left
        }
        const WorkItem item = queue.items.front();
        queue.items.pop_front();
        lock.unlock();
        item.runner->run_node(item.node_idx);
        lock.lock();
    }
}

} // namespace einsummable::runtime::cpu
