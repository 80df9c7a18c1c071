#include "server/idle_watchdog.h"

#include <algorithm>
#include <utility>

namespace einsummable::server {

IdleWatchdog::IdleWatchdog(std::chrono::milliseconds timeout)
    : timeout_(std::max(timeout, std::chrono::milliseconds(1))), thread_([this] { run(); }) {}

IdleWatchdog::~IdleWatchdog() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    stop_cv_.notify_all();
    thread_.join();
}

int64_t IdleWatchdog::now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

std::unique_ptr<IdleWatchdog::Watch> IdleWatchdog::watch(std::function<void()> on_idle) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t id = next_id_++;
    std::unique_ptr<Watch> watch(new Watch(this, id));
    watch->touch();
    watches_[id] = Entry{watch.get(), std::move(on_idle)};
    return watch;
}

IdleWatchdog::Watch::~Watch() {
    std::lock_guard<std::mutex> lock(watchdog_->mutex_);
    watchdog_->watches_.erase(id_);
}

void IdleWatchdog::Watch::touch() {
    last_activity_ns_.store(now_ns());
}

void IdleWatchdog::run() {
    // A call idle for `timeout` is stopped within a tenth more (at least 10 ms, at most 1 s).
    const auto period =
        std::clamp(timeout_ / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
    const int64_t timeout_ns = std::chrono::nanoseconds(timeout_).count();
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_cv_.wait_for(lock, period, [this] { return stopping_; })) {
        const int64_t now = now_ns();
        for (auto& [id, entry] : watches_) {
            if (!entry.watch->timed_out_.load() &&
                now - entry.watch->last_activity_ns_.load() > timeout_ns) {
                entry.watch->timed_out_.store(true);
                // Under the lock: the Watch, and so the call, still exists.
                entry.on_idle();
            }
        }
    }
}

} // namespace einsummable::server
