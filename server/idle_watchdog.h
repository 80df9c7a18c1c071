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

#include "compiler/support/clock.h"

namespace einsummable::server {

// Stops client streams that stall: one that sends nothing for `timeout`
// (--upload_idle_timeout_seconds), or, when the progress rule is on, one whose data arrives
// slower than a minimum rate (--upload_min_bytes_per_second after
// --upload_rate_grace_seconds). Silence alone cannot bound a stream: a client that sends a few
// bytes every little while resets the idle timer forever and holds its slot, so the rate rule
// bounds it by progress. The stalled stream gets `on_stall` run once with the reason (the daemon
// cancels the call, so its blocked Read returns). A thread checks a few times per timeout, at
// least once a second. Thread-safe.
class IdleWatchdog {
public:
    class Watch;

    // The progress a watched stream must make, as Apache's mod_reqtimeout MinRate does: it may
    // take `grace` plus one second per `min_bytes_per_second` bytes received, so at `t` after it
    // opened it must have sent at least min_bytes_per_second * (t - grace) bytes. A fast start
    // earns time for a slower end, but never more than its size at that rate, and a stream that
    // trickles costs its client at least the rate in bandwidth for as long as it is held.
    struct ProgressRule {
        int64_t min_bytes_per_second = 0; // 0: no rate rule, only the idle timeout
        std::chrono::milliseconds grace{30000};
    };

    enum class Stall {
        none,
        idle, // nothing for `timeout`
        slow, // below the progress rule
    };

    // The idle timeout alone.
    explicit IdleWatchdog(std::chrono::milliseconds timeout);
    // `clock` says how much time passed (the steady clock; tests move a fake one by hand).
    IdleWatchdog(std::chrono::milliseconds timeout, ProgressRule rule,
                 std::shared_ptr<const support::Clock> clock = support::Clock::steady());
    IdleWatchdog(const IdleWatchdog&) = delete;
    IdleWatchdog& operator=(const IdleWatchdog&) = delete;
    ~IdleWatchdog();

    // Watches one call from now until the returned Watch goes or stop()s. `on_stall` runs once,
    // on the watchdog's thread, while the Watch is watched (so what it captures outlives it),
    // given the Watch, whose stall() says why.
    std::unique_ptr<Watch> watch(std::function<void(const Watch&)> on_stall);

    std::chrono::milliseconds timeout() const { return timeout_; }
    const ProgressRule& rule() const { return rule_; }
    // How often the thread looks at the watched calls, on the clock.
    std::chrono::milliseconds period() const { return period_; }
    // Times the thread has looked at the watched calls (tests: after an advance of a fake clock
    // by period(), the next round has seen it).
    int64_t rounds() const;

    class Watch {
    public:
        ~Watch();
        // The call made progress: a message with `bytes` bytes of data arrived.
        void touch(int64_t bytes = 0);
        // From now on on_stall never runs (it is not running either when this returns); the
        // stream ended, and what follows (a commit) must not be cut.
        void stop();
        // Why on_stall ran; none when it did not.
        Stall stall() const { return stall_.load(); }
        bool timed_out() const { return stall() != Stall::none; }
        // Bytes touch() was told of, and the seconds since the watch began.
        int64_t received_bytes() const { return received_bytes_.load(); }
        double seconds() const;

    private:
        friend class IdleWatchdog;
        Watch(IdleWatchdog* watchdog, uint64_t id) : watchdog_(watchdog), id_(id) {}
        IdleWatchdog* watchdog_;
        uint64_t id_;
        int64_t start_ns_ = 0;
        std::atomic<int64_t> last_activity_ns_{0};
        std::atomic<int64_t> received_bytes_{0};
        std::atomic<Stall> stall_{Stall::none};
    };

private:
    int64_t now_ns() const;
    void run();
    // Why `watch` has stalled at `now`, or none.
    Stall check(const Watch& watch, int64_t now) const;

    const std::chrono::milliseconds timeout_;
    const ProgressRule rule_;
    const std::chrono::milliseconds period_;
    const std::shared_ptr<const support::Clock> clock_;
    mutable std::mutex mutex_; // guards everything below
    std::condition_variable stop_cv_;
    bool stopping_ = false;
    int64_t rounds_ = 0;
    uint64_t next_id_ = 1;
    struct Entry {
        Watch* watch;
        std::function<void(const Watch&)> on_stall;
    };
    std::map<uint64_t, Entry> watches_;
    std::thread thread_; // last: started once the rest exists
};

} // namespace einsummable::server
