#include "server/idle_watchdog.h"

#include <algorithm>
#include <utility>

namespace einsummable::server {
namespace {

// A stall is found within a tenth of the timeout, or of the grace where shorter (at least
// 10 ms, at most 1 s), of happening.
std::chrono::milliseconds period_for(std::chrono::milliseconds timeout,
                                     const IdleWatchdog::ProgressRule& rule) {
    const std::chrono::milliseconds shortest =
        rule.min_bytes_per_second > 0 ? std::min(timeout, rule.grace) : timeout;
    return std::clamp(shortest / 10, std::chrono::milliseconds(10),
                      std::chrono::milliseconds(1000));
}

} // namespace

IdleWatchdog::IdleWatchdog(std::chrono::milliseconds timeout)
    : IdleWatchdog(timeout, ProgressRule{}) {}

IdleWatchdog::IdleWatchdog(std::chrono::milliseconds timeout, ProgressRule rule,
                           std::shared_ptr<const support::Clock> clock)
    : timeout_(std::max(timeout, std::chrono::milliseconds(1))),
      rule_{std::max<int64_t>(rule.min_bytes_per_second, 0),
            std::max(rule.grace, std::chrono::milliseconds(0))},
      period_(period_for(timeout_, rule_)), clock_(std::move(clock)), thread_([this] { run(); }) {}

IdleWatchdog::~IdleWatchdog() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    stop_cv_.notify_all();
    thread_.join();
}

int64_t IdleWatchdog::now_ns() const {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_->now().time_since_epoch())
        .count();
}

int64_t IdleWatchdog::rounds() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return rounds_;
}

std::unique_ptr<IdleWatchdog::Watch>
IdleWatchdog::watch(std::function<void(const Watch&)> on_stall) {
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t id = next_id_++;
    std::unique_ptr<Watch> watch(new Watch(this, id));
    watch->start_ns_ = now_ns();
    watch->last_activity_ns_.store(watch->start_ns_);
    watches_[id] = Entry{watch.get(), std::move(on_stall)};
    return watch;
}

IdleWatchdog::Watch::~Watch() {
    stop();
}

void IdleWatchdog::Watch::stop() {
    std::lock_guard<std::mutex> lock(watchdog_->mutex_);
    watchdog_->watches_.erase(id_);
}

void IdleWatchdog::Watch::touch(int64_t bytes) {
    received_bytes_.fetch_add(bytes);
    last_activity_ns_.store(watchdog_->now_ns());
}

double IdleWatchdog::Watch::seconds() const {
    return static_cast<double>(watchdog_->now_ns() - start_ns_) * 1e-9;
}

IdleWatchdog::Stall IdleWatchdog::check(const Watch& watch, int64_t now) const {
    if (now - watch.last_activity_ns_.load() > std::chrono::nanoseconds(timeout_).count()) {
        return Stall::idle;
    }
    if (rule_.min_bytes_per_second > 0) {
        // Seconds past the grace; the bytes owed by now are the rate times those.
        const double late = static_cast<double>(now - watch.start_ns_) * 1e-9 -
                            std::chrono::duration<double>(rule_.grace).count();
        if (late > 0 && static_cast<double>(watch.received_bytes_.load()) <
                            static_cast<double>(rule_.min_bytes_per_second) * late) {
            return Stall::slow;
        }
    }
    return Stall::none;
}

void IdleWatchdog::run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        const support::Clock::time_point next = clock_->now() + period_;
        while (!stopping_ && clock_->now() < next) {
            clock_->wait_until(stop_cv_, lock, next);
        }
        if (stopping_) {
            return;
        }
        const int64_t now = now_ns();
        for (auto& [id, entry] : watches_) {
            if (entry.watch->stall_.load() != Stall::none) {
                continue;
            }
            const Stall stall = check(*entry.watch, now);
            if (stall != Stall::none) {
                entry.watch->stall_.store(stall);
                // Under the lock: the Watch, and so the call, still exists.
                entry.on_stall(*entry.watch);
            }
        }
        ++rounds_;
    }
}

} // namespace einsummable::server
