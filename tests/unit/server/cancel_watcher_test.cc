// server/cancel_watcher: a watched request whose check fails has its wait stopped, with the
// check's status; others are left alone; the watcher's thread sleeps while nothing is watched.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "server/cancel_watcher.h"

namespace einsummable::server {
namespace {

TEST(CancelWatcherTest, AFailedCheckStopsThatWaitAlone) {
    CancelWatcher watcher(std::chrono::milliseconds(1));
    std::atomic<bool> gone{false};
    std::atomic<int> stays_checks{0};
    std::unique_ptr<CancelWatcher::Watch> cancelled = watcher.watch(
        [&] { return gone ? absl::CancelledError("client gone") : absl::OkStatus(); });
    std::unique_ptr<CancelWatcher::Watch> stays = watcher.watch([&] {
        ++stays_checks;
        return absl::OkStatus();
    });
    EXPECT_TRUE(cancelled->status().ok());

    // A waiter as the plan's and the batcher's: it sleeps until the stop wakes it.
    std::mutex mutex;
    std::condition_variable_any wake;
    bool woken_by_stop = false;
    std::thread waiter([&] {
        std::unique_lock<std::mutex> lock(mutex);
        woken_by_stop = !wake.wait(lock, cancelled->token(), [] { return false; });
    });
    gone = true;
    waiter.join();
    EXPECT_TRUE(woken_by_stop);
    EXPECT_TRUE(cancelled->token().stop_requested());
    EXPECT_EQ(cancelled->status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(cancelled->status().message(), "client gone");

    // The other request is still watched, and not stopped.
    const int before = stays_checks;
    while (stays_checks == before) {
        std::this_thread::yield();
    }
    EXPECT_FALSE(stays->token().stop_requested());
    EXPECT_TRUE(stays->status().ok());
}

TEST(CancelWatcherTest, TheThreadSleepsWhileNothingIsWatched) {
    CancelWatcher watcher(std::chrono::milliseconds(1));
    {
        std::atomic<int> checks{0};
        std::unique_ptr<CancelWatcher::Watch> watch = watcher.watch([&] {
            ++checks;
            return absl::OkStatus();
        });
        while (checks < 3) {
            std::this_thread::yield();
        }
    }
    // The round that finds no watch is its last until the next watch: none in 100 periods.
    // Real time, but an upper bound: the watch is gone, so at most the round already waiting
    // out its period still counts, and a slow machine makes fewer rounds, never more; only a
    // thread that keeps going round while nothing is watched exceeds it.
    const int64_t idle = watcher.rounds();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_LE(watcher.rounds(), idle + 1);
    // A new watch wakes it again.
    std::atomic<bool> checked{false};
    std::unique_ptr<CancelWatcher::Watch> watch = watcher.watch([&] {
        checked = true;
        return absl::OkStatus();
    });
    while (!checked) {
        std::this_thread::yield();
    }
}

} // namespace
} // namespace einsummable::server
