#pragma once

#include <atomic>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace einsummable::support {

// A request, from another thread, that a long computation stop (the daemon sets it when every
// caller waiting for a compile has gone). Never reset. The compiler polls it once per step of
// its long loops — each synthesis candidate, each plan the time objective simulates, each
// exchange program compiled, each operator the logical optimiser enumerates or costs, each
// operator lowered and each buffer the memory plan places — so a cancelled compile returns
// within one step (docs/planner.md, "Cancellation"). Polling never changes a decision.
// Thread-safe: cancel() from any thread, while others poll.
class Cancellation {
public:
    void cancel() noexcept { flag_.store(true, std::memory_order_release); }

    // Whether cancel() was called (or the poll cancel_at_poll() names is reached). Every call is
    // one poll: polls() counts them.
    bool cancelled() const noexcept {
        const int64_t poll = polls_.fetch_add(1, std::memory_order_relaxed) + 1;
        if (flag_.load(std::memory_order_acquire)) {
            return true;
        }
        const int64_t at = cancel_at_.load(std::memory_order_relaxed);
        return at > 0 && poll >= at;
    }

    // For tests: the `poll`th poll from the start (1-based) and every later one see the
    // cancellation set, as if cancel() had been called just before it. Lets a test stop a
    // computation at a point it chooses by counting, not by timing another thread, and check
    // how much work a stage does between polls (polls()). Call before the computation starts.
    void cancel_at_poll(int64_t poll) noexcept {
        cancel_at_.store(poll, std::memory_order_relaxed);
    }

    // How often cancelled() has been called.
    int64_t polls() const noexcept { return polls_.load(std::memory_order_relaxed); }

private:
    std::atomic<bool> flag_{false};
    std::atomic<int64_t> cancel_at_{0}; // 0: no poll is cancelled by count
    mutable std::atomic<int64_t> polls_{0};
};

// Whether `cancellation` (null: never) is set: one poll, a few relaxed atomic operations.
inline bool is_cancelled(const Cancellation* cancellation) noexcept {
    return cancellation != nullptr && cancellation->cancelled();
}

// The status a stopped compile returns: Cancelled, "compile cancelled during <stage>".
inline absl::Status cancelled_error(absl::string_view stage) {
    return absl::CancelledError(absl::StrCat("compile cancelled during ", stage));
}

// OK, or cancelled_error(stage) once `cancellation` (null: never) is set. Where the stage's
// name takes work to build, test is_cancelled() first and build it only then.
inline absl::Status check_cancelled(const Cancellation* cancellation, absl::string_view stage) {
    return is_cancelled(cancellation) ? cancelled_error(stage) : absl::OkStatus();
}

} // namespace einsummable::support
