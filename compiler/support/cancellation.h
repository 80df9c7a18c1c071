#pragma once

#include <atomic>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace einsummable::support {

// A request, from another thread, that a long computation stop (the daemon sets it when every
// caller waiting for a compile has gone). Never reset. The compiler polls it once per step of
// its long loops — each synthesis candidate, each plan the time objective simulates, each
// exchange program compiled, each operator the logical optimiser enumerates or costs — so a
// cancelled compile returns within one step (docs/planner.md, "Cancellation"). Polling never
// changes a decision. Thread-safe: cancel() from any thread, while others poll.
class Cancellation {
public:
    void cancel() noexcept { flag_.store(true, std::memory_order_release); }
    bool cancelled() const noexcept { return flag_.load(std::memory_order_acquire); }

private:
    std::atomic<bool> flag_{false};
};

// Whether `cancellation` (null: never) is set: one atomic load.
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
