#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace einsummable::server {

// Stops calls that have gone quiet (--upload_idle_timeout_seconds): a client stream that sends
// nothing for `timeout` gets `on_idle` run once (the daemon cancels the call, so its blocked
// Read returns). A thread checks a few times per timeout. Thread-safe.
class IdleWatchdog {
public:
    class Watch;

    explicit IdleWatchdog(std::chrono::milliseconds timeout);
    IdleWatchdog(const IdleWatchdog&) = delete;
    IdleWatchdog& operator=(const IdleWatchdog&) = delete;
    ~IdleWatchdog();

    // Watches one call from now until the returned Watch goes. `on_idle` runs on the
    // watchdog's thread while the Watch exists (so what it captures outlives it).
    std::unique_ptr<Watch> watch(std::function<void()> on_idle);

    std::chrono::milliseconds timeout() const { return timeout_; }

    class Watch {
    public:
        ~Watch();
        // The call made progress (a message arrived).
        void touch();
        // Whether on_idle ran.
        bool timed_out() const { return timed_out_.load(); }

    private:
        friend class IdleWatchdog;
        Watch(IdleWatchdog* watchdog, uint64_t id) : watchdog_(watchdog), id_(id) {}
        IdleWatchdog* watchdog_;
        uint64_t id_;
        std::atomic<int64_t> last_activity_ns_{0};
        std::atomic<bool> timed_out_{false};
    };

private:
    static int64_t now_ns();
    void run();

    const std::chrono::milliseconds timeout_;
    std::mutex mutex_; // guards everything below
    std::condition_variable stop_cv_;
    bool stopping_ = false;
    uint64_t next_id_ = 1;
    struct Entry {
        Watch* watch;
        std::function<void()> on_idle;
    };
    std::map<uint64_t, Entry> watches_;
    std::thread thread_; // last: started once the rest exists
};

} // namespace einsummable::server
