#pragma once

// Waiting for a condition instead of sleeping for a time that a busy machine may overrun.

#include <chrono>
#include <functional>
#include <thread>

namespace einsummable::testing {

// Polls `done` every millisecond, in real time, until it holds: true; false after `limit`, so
// generous that only a bug reaches it (a test fails then rather than hanging), never a slow
// machine.
inline bool eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (!done()) {
        if (std::chrono::steady_clock::now() > end) {
            return done();
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}

} // namespace einsummable::testing
