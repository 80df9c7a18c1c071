#pragma once

// A support::Clock (compiler/support/clock.h) that stands still until the test moves it, for
// tests of components that wait for time to pass (the batcher's delay, the upload watchdog's
// timeouts): what they assert about elapsed time then holds however slowly the machine runs
// their threads. Starts at an arbitrary point; advance() is its only way forward.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "compiler/support/clock.h"

namespace einsummable::testing {

class FakeClock final : public support::Clock {
public:
    time_point now() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        return now_;
    }

    void advance(std::chrono::nanoseconds by) {
        std::lock_guard<std::mutex> lock(mutex_);
        now_ += by;
    }

    // A waiter whose deadline is ahead sleeps a real millisecond at a time (or until notified),
    // so that it sees an advance() within a millisecond; one whose deadline has passed returns at
    // once.
    void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                    time_point deadline) const override {
        ++waits_;
        if (now() >= deadline) {
            return;
        }
        cv.wait_for(lock, std::chrono::milliseconds(1));
    }

    // How often wait_until was called: once it has been, a thread that computes its deadline
    // before it waits (as the watchdog's does) has read the clock.
    int64_t waits() const { return waits_.load(); }

private:
    mutable std::atomic<int64_t> waits_{0};
    mutable std::mutex mutex_;
    time_point now_ = time_point(std::chrono::hours(1000));
};

} // namespace einsummable::testing
