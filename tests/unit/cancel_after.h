#pragma once

// Running a long computation while another thread cancels it (compiler/support/cancellation.h),
// for the cancellation tests of each compiler layer and of runtime::Plan.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <utility>

#include "compiler/support/cancellation.h"

namespace einsummable::testing {

struct CancelTiming {
    double total_s = 0.0;        // from the start of `work` to its return
    double after_cancel_s = 0.0; // from cancel() to the return; negative: it returned before
};

// Runs work() on this thread while another thread sleeps `delay` and then sets `cancellation`.
// Returns work()'s result and when it returned.
template <typename Work>
auto run_cancelled_after(support::Cancellation& cancellation, std::chrono::milliseconds delay,
                         Work work) -> std::pair<decltype(work()), CancelTiming> {
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    Clock::time_point cancelled_at;
    std::thread canceller([&] {
        std::this_thread::sleep_for(delay);
        cancelled_at = Clock::now();
        cancellation.cancel();
    });
    auto result = work();
    const Clock::time_point end = Clock::now();
    canceller.join();
    CancelTiming timing;
    timing.total_s = std::chrono::duration<double>(end - start).count();
    timing.after_cancel_s = std::chrono::duration<double>(end - cancelled_at).count();
    return {std::move(result), timing};
}

struct PolledCancel {
    double after_cancel_s = 0.0; // from cancel() to the return; negative: it returned before
    int64_t polls_at_cancel = 0; // cancellation.polls() just after cancel(); 0: never cancelled
    int64_t polls_at_return = 0; // cancellation.polls() when work() returned
};

// Runs work() on this thread while another thread waits until `cancellation` has been polled
// `polls` times (work() is inside its long loops, however slowly the machine runs it) and then
// sets it. Returns work()'s result, and when and after how many polls it returned: a
// computation that stops within one step of its loops polls only a few times after cancel().
template <typename Work>
auto run_cancelled_at_poll(support::Cancellation& cancellation, int64_t polls, Work work)
    -> std::pair<decltype(work()), PolledCancel> {
    using Clock = std::chrono::steady_clock;
    std::atomic<bool> returned{false};
    Clock::time_point cancelled_at;
    PolledCancel out;
    std::thread canceller([&] {
        while (cancellation.polls() < polls) {
            if (returned.load()) {
                return; // work() ended before it polled that often: never cancelled
            }
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
        cancelled_at = Clock::now();
        cancellation.cancel();
        out.polls_at_cancel = cancellation.polls();
    });
    auto result = work();
    const Clock::time_point end = Clock::now();
    out.polls_at_return = cancellation.polls();
    returned = true;
    canceller.join();
    out.after_cancel_s =
        out.polls_at_cancel > 0 ? std::chrono::duration<double>(end - cancelled_at).count() : -1.0;
    return {std::move(result), out};
}

// How long work() takes, in seconds, with its result.
template <typename Work>
auto timed(Work work) -> std::pair<decltype(work()), double> {
    const auto start = std::chrono::steady_clock::now();
    auto result = work();
    return {std::move(result),
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()};
}

// Generous enough for a loaded two-core CI machine; compiles that are cancelled stop within one
// step of their loops (a few milliseconds on the workloads of these tests).
constexpr double kCancelBoundS = 2.0;
constexpr std::chrono::milliseconds kCancelDelay{50};

} // namespace einsummable::testing
