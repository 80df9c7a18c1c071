// server/idle_watchdog.h: a watched call that goes quiet has on_stall run once, after the
// timeout and not before; touching it keeps it alive; a Watch gone or stopped is never called.
// With a progress rule, a call that keeps sending but too little is stopped as slow after the
// grace, one that sends enough is not, and bytes sent early earn time.
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
    auto watch = watchdog.watch([&](const IdleWatchdog::Watch&) { ++stopped; });
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
    auto watch = watchdog.watch([&](const IdleWatchdog::Watch&) { ++stopped; });
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
    watchdog.watch([&](const IdleWatchdog::Watch&) { ++stopped; }).reset();
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(stopped.load(), 0);
}

TEST(IdleWatchdogTest, AStoppedWatchIsNeverCalled) {
    IdleWatchdog watchdog(milliseconds(50));
    std::atomic<int> stopped{0};
    auto watch = watchdog.watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    watch->stop();
    std::this_thread::sleep_for(milliseconds(300));
    EXPECT_EQ(stopped.load(), 0);
    EXPECT_FALSE(watch->timed_out());
}

// Polls until `watch` stalls or `limit` passes.
void wait_for_stall(const IdleWatchdog::Watch& watch, milliseconds limit) {
    const auto start = std::chrono::steady_clock::now();
    while (!watch.timed_out() && std::chrono::steady_clock::now() - start < limit) {
        std::this_thread::sleep_for(milliseconds(5));
    }
}

// 4 bytes every 20 ms resets a 10 s idle timeout forever; at 1000 bytes a second after a
// 300 ms grace it is cut, as slow, once the grace is over and not before.
TEST(IdleWatchdogTest, ATrickleBelowTheRateIsStoppedAsSlowAfterTheGrace) {
    IdleWatchdog watchdog(milliseconds(10000), {1000, milliseconds(300)});
    std::atomic<int> stopped{0};
    std::atomic<IdleWatchdog::Stall> reason{IdleWatchdog::Stall::none};
    const auto start = std::chrono::steady_clock::now();
    auto watch = watchdog.watch([&](const IdleWatchdog::Watch& stalled) {
        reason = stalled.stall();
        ++stopped;
    });
    while (!watch->timed_out() &&
           std::chrono::steady_clock::now() - start < std::chrono::seconds(30)) {
        std::this_thread::sleep_for(milliseconds(20));
        watch->touch(4);
    }
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::slow);
    EXPECT_EQ(reason.load(), IdleWatchdog::Stall::slow);
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(300));
    EXPECT_GT(watch->received_bytes(), 0);
    std::this_thread::sleep_for(milliseconds(100));
    EXPECT_EQ(stopped.load(), 1);
}

TEST(IdleWatchdogTest, ACallSendingFasterThanTheRateIsNeverStopped) {
    IdleWatchdog watchdog(milliseconds(10000), {1000, milliseconds(100)});
    std::atomic<int> stopped{0};
    auto watch = watchdog.watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    // 4000 bytes a second for 1 s: each sleep may take four times as long and still keep up.
    for (int message = 0; message < 40; ++message) {
        std::this_thread::sleep_for(milliseconds(25));
        watch->touch(100);
    }
    EXPECT_FALSE(watch->timed_out());
    EXPECT_EQ(stopped.load(), 0);
}

// 1000 bytes at once at 1000 bytes a second earn a second past the 100 ms grace: silent (the
// idle timeout is long), the call is cut after 1.1 s, not before.
TEST(IdleWatchdogTest, BytesSentEarlyEarnTime) {
    IdleWatchdog watchdog(milliseconds(10000), {1000, milliseconds(100)});
    auto watch = watchdog.watch([](const IdleWatchdog::Watch&) {});
    const auto start = std::chrono::steady_clock::now();
    watch->touch(1000);
    wait_for_stall(*watch, milliseconds(30000));
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::slow);
    EXPECT_GE(std::chrono::steady_clock::now() - start, milliseconds(1100));
}

TEST(IdleWatchdogTest, SilenceIsStillIdleWithARateRule) {
    IdleWatchdog watchdog(milliseconds(200), {1000, milliseconds(5000)});
    auto watch = watchdog.watch([](const IdleWatchdog::Watch&) {});
    wait_for_stall(*watch, milliseconds(30000));
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::idle);
}

} // namespace
} // namespace einsummable::server
