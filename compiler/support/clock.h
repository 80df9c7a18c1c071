#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>

namespace einsummable::support {

// Where a component that waits for time to pass reads the time and sleeps: the steady clock in
// the daemon, a FakeClock that a test moves by hand (tests/unit/fake_clock.h), so that what the
// test asserts about elapsed time holds however its threads are scheduled. Thread-safe.
class Clock {
public:
    using time_point = std::chrono::steady_clock::time_point;

    virtual ~Clock() = default;

    virtual time_point now() const = 0;

    // Sleeps on `cv`, `lock` held, until it is notified or this clock reaches `deadline`; may
    // also return before either (as condition_variable::wait_until may): callers look at now()
    // and at what they wait for again.
    virtual void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                            time_point deadline) const = 0;

    // std::chrono::steady_clock, and condition_variable::wait_until on it.
    static std::shared_ptr<const Clock> steady();
};

namespace detail {

class SteadyClock final : public Clock {
public:
    time_point now() const override { return std::chrono::steady_clock::now(); }

    void wait_until(std::condition_variable& cv, std::unique_lock<std::mutex>& lock,
                    time_point deadline) const override {
        cv.wait_until(lock, deadline);
    }
};

} // namespace detail

inline std::shared_ptr<const Clock> Clock::steady() {
    static const std::shared_ptr<const Clock> clock = std::make_shared<detail::SteadyClock>();
    return clock;
}

// Seconds of the steady clock since `start`, for the durations logs and metrics report.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

} // namespace einsummable::support
