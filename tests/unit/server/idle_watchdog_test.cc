// server/idle_watchdog.h: a watched call that goes quiet has on_idle run once, after the
// timeout and not before; touching it keeps it alive; a Watch gone is never called.
#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "server/idle_watchdog.h"

namespace einsummable::server {
namespace {

using std::chrono::milliseconds;

TEST(IdleWatchdogTest, AQuietCallIsStoppedOnceAfterTheTimeout) {
    IdleWatchdog watchdog(milliseconds(200));
    std::atomic<int> stopped{0};
    const auto start = std::chrono::steady_clock::now();
    auto watch = watchdog.watch([&] { ++stopped; });
    while (!watch->timed_out() && std::chrono::steady_clock::now() - start < milliseconds(5000)) {
        std::this_thread::sleep_for(milliseconds(5));
    }
    EXPECT_TRUE(watch->timed_out());
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(200));
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(stopped.load(), 1);
}

TEST(IdleWatchdogTest, ACallThatKeepsSendingIsNeverStopped) {
    IdleWatchdog watchdog(milliseconds(200));
    std::atomic<int> stopped{0};
    auto watch = watchdog.watch([&] { ++stopped; });
    for (int message = 0; message < 20; ++message) { // 1 s, a message every 50 ms
        std::this_thread::sleep_for(milliseconds(50));
        watch->touch();
    }
    EXPECT_FALSE(watch->timed_out());
    EXPECT_EQ(stopped.load(), 0);
}

TEST(IdleWatchdogTest, AWatchGoneIsNeverCalled) {
    IdleWatchdog watchdog(milliseconds(50));
    std::atomic<int> stopped{0};
    watchdog.watch([&] { ++stopped; }).reset();
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(stopped.load(), 0);
}

} // namespace
} // namespace einsummable::server
