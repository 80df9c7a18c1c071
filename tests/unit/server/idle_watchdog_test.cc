// server/idle_watchdog.h: a watched call that goes quiet has on_stall run once, after the
// timeout and not before; touching it keeps it alive; a Watch gone or stopped is never called.
// With a progress rule, a call that keeps sending but too little is stopped as slow after the
// grace, one that sends enough is not, and bytes sent early earn time. Time is a fake clock
// moved one watchdog period at a time, each step waiting until the watchdog's thread has looked
// at the calls at the new time: what the tests say about "after" and "before" holds however the
// machine schedules that thread.
#include <atomic>
#include <chrono>
#include <memory>

#include <gtest/gtest.h>

#include "server/idle_watchdog.h"
#include "tests/unit/eventually.h"
#include "tests/unit/fake_clock.h"

namespace einsummable::server {
namespace {

using std::chrono::milliseconds;
using testing::eventually;
using testing::FakeClock;

// An IdleWatchdog on a FakeClock, and the clock's one way forward.
class SteppedWatchdog {
public:
    explicit SteppedWatchdog(milliseconds timeout, IdleWatchdog::ProgressRule rule = {})
        : clock_(std::make_shared<FakeClock>()), watchdog_(timeout, rule, clock_) {
        // Its thread has read the clock for its first round (it does before it waits), so the
        // first step of a period reaches that round.
        EXPECT_TRUE(eventually([&] { return clock_->waits() > 0; }));
    }

    IdleWatchdog& watchdog() { return watchdog_; }
    milliseconds period() const { return watchdog_.period(); }
    // Fake time since the watchdog started.
    milliseconds elapsed() const { return elapsed_; }

    // Moves the clock on by one period and waits until the watchdog's thread has looked at every
    // call at the new time (that round's on_stall has run).
    void step() {
        const int64_t before = watchdog_.rounds();
        clock_->advance(period());
        elapsed_ += period();
        ASSERT_TRUE(eventually([&] { return watchdog_.rounds() > before; }))
            << "the watchdog's thread did not look at the calls at " << elapsed_.count() << " ms";
    }

    // step()s until `by` (a whole number of periods) has passed.
    void advance(milliseconds by) {
        ASSERT_EQ(by % period(), milliseconds(0)) << "steps are whole periods";
        for (milliseconds moved(0); moved < by; moved += period()) {
            step();
        }
    }

private:
    const std::shared_ptr<FakeClock> clock_;
    IdleWatchdog watchdog_;
    milliseconds elapsed_{0};
};

TEST(IdleWatchdogTest, AQuietCallIsStoppedOnceAfterTheTimeout) {
    SteppedWatchdog stepped(milliseconds(200));
    ASSERT_EQ(stepped.period(), milliseconds(20));
    std::atomic<int> stopped{0};
    auto watch = stepped.watchdog().watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    stepped.advance(milliseconds(180)); // quiet for less than the timeout: not yet
    EXPECT_FALSE(watch->timed_out());
    EXPECT_EQ(stopped.load(), 0);
    stepped.advance(milliseconds(40)); // past it, found within a period
    EXPECT_TRUE(watch->timed_out());
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::idle);
    stepped.advance(milliseconds(300));
    EXPECT_EQ(stopped.load(), 1);
}

TEST(IdleWatchdogTest, ACallThatKeepsSendingIsNeverStopped) {
    SteppedWatchdog stepped(milliseconds(200));
    std::atomic<int> stopped{0};
    auto watch = stepped.watchdog().watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    for (int message = 0; message < 10; ++message) { // 1 s, a message every 100 ms
        stepped.advance(milliseconds(100));
        watch->touch();
    }
    EXPECT_FALSE(watch->timed_out());
    EXPECT_EQ(stopped.load(), 0);
}

TEST(IdleWatchdogTest, AWatchGoneIsNeverCalled) {
    SteppedWatchdog stepped(milliseconds(50));
    std::atomic<int> stopped{0};
    stepped.watchdog().watch([&](const IdleWatchdog::Watch&) { ++stopped; }).reset();
    stepped.advance(milliseconds(300));
    EXPECT_EQ(stopped.load(), 0);
}

TEST(IdleWatchdogTest, AStoppedWatchIsNeverCalled) {
    SteppedWatchdog stepped(milliseconds(50));
    std::atomic<int> stopped{0};
    auto watch = stepped.watchdog().watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    watch->stop();
    stepped.advance(milliseconds(300));
    EXPECT_EQ(stopped.load(), 0);
    EXPECT_FALSE(watch->timed_out());
}

// 4 bytes a period (30 ms) resets a 10 s idle timeout forever; at 1000 bytes a second after a
// 300 ms grace it is cut, as slow, once the grace is over and not before.
TEST(IdleWatchdogTest, ATrickleBelowTheRateIsStoppedAsSlowAfterTheGrace) {
    SteppedWatchdog stepped(milliseconds(10000), {1000, milliseconds(300)});
    ASSERT_EQ(stepped.period(), milliseconds(30));
    std::atomic<int> stopped{0};
    std::atomic<IdleWatchdog::Stall> reason{IdleWatchdog::Stall::none};
    auto watch = stepped.watchdog().watch([&](const IdleWatchdog::Watch& stalled) {
        reason = stalled.stall();
        ++stopped;
    });
    while (!watch->timed_out() && stepped.elapsed() < milliseconds(30000)) {
        stepped.step();
        if (stepped.elapsed() <= milliseconds(300)) {
            ASSERT_FALSE(watch->timed_out())
                << "within the grace, at " << stepped.elapsed().count() << " ms";
        }
        watch->touch(4);
    }
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::slow);
    EXPECT_EQ(reason.load(), IdleWatchdog::Stall::slow);
    // 4 bytes a period fall behind 30 a period from the grace on, a few periods after it.
    EXPECT_GT(stepped.elapsed(), milliseconds(300));
    EXPECT_LE(stepped.elapsed(), milliseconds(450));
    EXPECT_GT(watch->received_bytes(), 0);
    stepped.advance(milliseconds(300));
    EXPECT_EQ(stopped.load(), 1);
}

TEST(IdleWatchdogTest, ACallSendingFasterThanTheRateIsNeverStopped) {
    SteppedWatchdog stepped(milliseconds(10000), {1000, milliseconds(100)});
    ASSERT_EQ(stepped.period(), milliseconds(10));
    std::atomic<int> stopped{0};
    auto watch = stepped.watchdog().watch([&](const IdleWatchdog::Watch&) { ++stopped; });
    // 5000 bytes a second for 1 s: 100 bytes every 20 ms.
    for (int message = 0; message < 50; ++message) {
        stepped.advance(milliseconds(20));
        watch->touch(100);
    }
    EXPECT_FALSE(watch->timed_out());
    EXPECT_EQ(stopped.load(), 0);
}

// 1000 bytes at once at 1000 bytes a second earn a second past the 100 ms grace: silent (the
// idle timeout is long), the call is cut after 1.1 s, not before.
TEST(IdleWatchdogTest, BytesSentEarlyEarnTime) {
    SteppedWatchdog stepped(milliseconds(10000), {1000, milliseconds(100)});
    ASSERT_EQ(stepped.period(), milliseconds(10));
    auto watch = stepped.watchdog().watch([](const IdleWatchdog::Watch&) {});
    watch->touch(1000);
    stepped.advance(milliseconds(1090));
    EXPECT_FALSE(watch->timed_out()) << "cut before the 1.1 s it earned";
    // Found at one of the rounds just past 1.1 s (the boundary itself is a float comparison).
    stepped.advance(milliseconds(20));
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::slow);
}

TEST(IdleWatchdogTest, SilenceIsStillIdleWithARateRule) {
    SteppedWatchdog stepped(milliseconds(200), {1000, milliseconds(5000)});
    auto watch = stepped.watchdog().watch([](const IdleWatchdog::Watch&) {});
    while (!watch->timed_out() && stepped.elapsed() < milliseconds(30000)) {
        stepped.step();
    }
    EXPECT_EQ(watch->stall(), IdleWatchdog::Stall::idle);
    EXPECT_LE(stepped.elapsed(), milliseconds(300)); // the idle timeout, well inside the grace
}

} // namespace
} // namespace einsummable::server
