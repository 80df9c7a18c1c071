#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>

#include "absl/status/status.h"

namespace einsummable::server {

// Looks at the cancellation of requests that wait (for a plan instance, for their batch) on
// their behalf, so that a waiting request sleeps until its turn. gRPC's synchronous API says a
// call was cancelled only when asked (ServerContext::IsCancelled), so something must ask: one
// thread calls every watched request's check every `period` and, the first time a check fails,
// requests a stop of that request's wait (its stop_token), whose stop_callback wakes that
// request alone. The thread sleeps while nothing is watched. So while requests wait, the daemon
// wakes 1/period times a second however many wait; when each waiting request woke itself to
// ask, 31 waiters cost ~2000 wake-ups a second (bench/serving, "waiting"). Thread-safe.
//
// The stop's callbacks run on the watcher's thread without its lock, and may take the waiter's
// own lock; so a waiter may make, ask and destroy its Watch while holding its lock, but must
// not destroy a stop_callback on the token while holding a lock that callback takes.
class CancelWatcher {
public:
    class Watch;

    explicit CancelWatcher(std::chrono::milliseconds period);
    CancelWatcher(const CancelWatcher&) = delete;
    CancelWatcher& operator=(const CancelWatcher&) = delete;
    ~CancelWatcher();

    // Watches `check` (a request's: non-OK once it should stop) from the next period until the
    // returned Watch goes. `check` runs on the watcher's thread, only while the Watch exists, and
    // no more once it failed.
    std::unique_ptr<Watch> watch(std::function<absl::Status()> check);

    std::chrono::milliseconds period() const { return period_; }
    // Times the thread looked at the watched requests (tests).
    int64_t rounds() const;

    class Watch {
    public:
        ~Watch();
        // Stop requested once the check failed (just after status() says why).
        std::stop_token token() const { return stop_.get_token(); }
        // The check's failure once the stop was requested; OK before.
        absl::Status status() const;

    private:
        friend class CancelWatcher;
        Watch(CancelWatcher* watcher, std::function<absl::Status()> check)
            : watcher_(watcher), check_(std::move(check)) {}
        CancelWatcher* watcher_;
        const std::function<absl::Status()> check_;
        std::stop_source stop_;
        bool stopped_ = false; // guarded by watcher_->mutex_: the check failed
        absl::Status status_;  // guarded by watcher_->mutex_
    };

private:
    void run();

    const std::chrono::milliseconds period_;
    mutable std::mutex mutex_; // guards everything below
    std::condition_variable wake_;
    bool stopping_ = false;
    // The thread sleeps until a watch arrives (only then is it notified: while it goes round,
    // a new watch waits for the next round rather than waking it).
    bool idle_ = true;
    int64_t rounds_ = 0;
    std::set<Watch*> watches_;
    std::thread thread_; // last: started once the rest exists
};

} // namespace einsummable::server
