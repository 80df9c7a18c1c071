#include "server/cancel_watcher.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace einsummable::server {

CancelWatcher::CancelWatcher(std::chrono::milliseconds period)
    : period_(std::max(period, std::chrono::milliseconds(1))), thread_([this] { run(); }) {}

CancelWatcher::~CancelWatcher() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

std::unique_ptr<CancelWatcher::Watch> CancelWatcher::watch(std::function<absl::Status()> check) {
    std::unique_ptr<Watch> watch(new Watch(this, std::move(check)));
    std::lock_guard<std::mutex> lock(mutex_);
    watches_.insert(watch.get());
    if (idle_) {
        idle_ = false;
        wake_.notify_one();
    }
    return watch;
}

int64_t CancelWatcher::rounds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rounds_;
}

CancelWatcher::Watch::~Watch() {
    // Waits for a round in progress: the check may be running.
    std::lock_guard<std::mutex> lock(watcher_->mutex_);
    watcher_->watches_.erase(this);
}

absl::Status CancelWatcher::Watch::status() const {
    std::lock_guard<std::mutex> lock(watcher_->mutex_);
    return status_;
}

void CancelWatcher::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stopping_) {
        if (watches_.empty()) {
            idle_ = true;
            wake_.wait(lock, [this] { return stopping_ || !idle_; });
            continue;
        }
        if (wake_.wait_for(lock, period_, [this] { return stopping_; })) {
            break;
        }
        ++rounds_;
        std::vector<std::stop_source> stops;
        for (Watch* watch : watches_) {
            if (watch->stopped_) {
                continue;
            }
            // Under the lock: the Watch, and so its request, still exists. The check is a
            // request's (its gRPC call's deadline and state): short, and taking no lock a
            // waiter holds while it makes or destroys a Watch.
            absl::Status status = watch->check_();
            if (!status.ok()) {
                watch->status_ = std::move(status);
                watch->stopped_ = true;
                stops.push_back(watch->stop_); // shares the stop state, which outlives the Watch
            }
        }
        // The stops' callbacks wake the waiters; they take the waiters' locks (the plan's, the
        // batcher's), which may be held by a thread making or destroying a Watch, so they run
        // without this lock.
        lock.unlock();
        for (std::stop_source& stop : stops) {
            stop.request_stop();
        }
        lock.lock();
    }
}

} // namespace einsummable::server
