#include "server/compile_pool.h"

#include <algorithm>
#include <utility>

namespace einsummable::server {

CompilePool::CompilePool(int threads, std::shared_ptr<Metrics> metrics)
    : metrics_(std::move(metrics)) {
    for (int thread_idx = 0; thread_idx < std::max(threads, 1); ++thread_idx) {
        threads_.emplace_back([this] { work(); });
    }
}

CompilePool::~CompilePool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    work_cv_.notify_all();
    for (std::thread& thread : threads_) {
        thread.join();
    }
}

void CompilePool::submit(std::function<void()> job) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(Job{std::move(job), std::chrono::steady_clock::now()});
        publish_locked();
    }
    work_cv_.notify_one();
}

int64_t CompilePool::queued() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(queue_.size());
}

int64_t CompilePool::running() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return running_;
}

void CompilePool::publish_locked() const {
    if (metrics_) {
        metrics_->compile_queue_length(static_cast<int64_t>(queue_.size()));
        metrics_->compiles_running(running_);
    }
}

void CompilePool::work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        work_cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) {
            return; // stopping, and nothing left to run
        }
        Job job = std::move(queue_.front());
        queue_.pop_front();
        ++running_;
        publish_locked();
        if (metrics_) {
            metrics_->compile_queue_wait(
                std::chrono::duration<double>(std::chrono::steady_clock::now() - job.queued_at)
                    .count());
        }
        lock.unlock();
        job.run();         // PlanCache's jobs catch what they throw
        job.run = nullptr; // release what it captured before taking the lock
        lock.lock();
        --running_;
        publish_locked();
    }
}

} // namespace einsummable::server
