#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "server/metrics.h"

namespace einsummable::server {

// The threads compiles run on (--compile_threads): a fixed number, taking jobs first in, first
// out, so a burst of distinct compiles queues instead of sharing the cores ever more thinly.
// A job is whatever PlanCache hands it (one plan's creation); it observes its own cancellation,
// so a queued job whose callers all left costs a thread only the moment it takes to see that.
// Thread-safe. The destructor runs the jobs still queued (each sees its cancellation and stops
// at once, as Engine cancels every creation before) and joins the threads.
class CompilePool {
public:
    // threads < 1 is taken as 1. `metrics` may be null.
    CompilePool(int threads, std::shared_ptr<Metrics> metrics);
    CompilePool(const CompilePool&) = delete;
    CompilePool& operator=(const CompilePool&) = delete;
    ~CompilePool();

    void submit(std::function<void()> job);

    int threads() const { return static_cast<int>(threads_.size()); }
    int64_t queued() const;
    int64_t running() const;

private:
    struct Job {
        std::function<void()> run;
        std::chrono::steady_clock::time_point queued_at;
    };
    void work();
    void publish_locked() const; // metrics, under mutex_

    std::shared_ptr<Metrics> metrics_;
    mutable std::mutex mutex_; // guards everything below
    std::condition_variable work_cv_;
    std::deque<Job> queue_;
    int64_t running_ = 0;
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

} // namespace einsummable::server
