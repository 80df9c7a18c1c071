// server/compile_pool.h: a fixed number of threads, first in first out, metrics of the queue.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/compile_pool.h"
#include "tests/unit/eventually.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

// Jobs that block until the test lets one of them finish, and count themselves as they start
// and end: the test sees the pool's state between two steps instead of timing overlaps.
class GatedJobs {
public:
    std::function<void()> job(int job_idx) {
        return [this, job_idx] {
            std::unique_lock<std::mutex> lock(mutex_);
            order_.push_back(job_idx);
            most_ = std::max(most_, ++running_);
            cv_.notify_all();
            cv_.wait(lock, [&] { return permits_ > 0 || open_; });
            permits_ = std::max(permits_ - 1, 0);
            --running_;
            cv_.notify_all();
        };
    }

    // Waits until `started` jobs have started and `running` of them are running (a generous
    // limit, so that only a bug fails it rather than hangs).
    bool wait_for(size_t started, int running) {
        std::unique_lock<std::mutex> lock(mutex_);
        return cv_.wait_for(lock, std::chrono::seconds(30),
                            [&] { return order_.size() == started && running_ == running; });
    }

    // Lets one waiting job finish.
    void release_one() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            ++permits_;
        }
        cv_.notify_all();
    }

    // Lets every job finish, now and from now on, when the returned object goes: made after the
    // pool, it goes first, so that a test that stops early (a failed ASSERT) does not leave the
    // pool's destructor waiting for a job that waits for the test.
    auto open_on_exit() {
        struct Opener {
            GatedJobs* jobs;
            ~Opener() {
                {
                    std::lock_guard<std::mutex> lock(jobs->mutex_);
                    jobs->open_ = true;
                }
                jobs->cv_.notify_all();
            }
        };
        return Opener{this};
    }

    int most() {
        std::lock_guard<std::mutex> lock(mutex_);
        return most_;
    }

    std::vector<int> order() {
        std::lock_guard<std::mutex> lock(mutex_);
        return order_;
    }

private:
    std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<int> order_; // job indices in the order they started
    int running_ = 0;
    int most_ = 0;
    int permits_ = 0;
    bool open_ = false;
};

TEST(CompilePoolTest, RunsAtMostItsThreadsAtOnceInSubmissionOrder) {
    constexpr int kJobs = 8;
    auto metrics = std::make_shared<Metrics>();
    GatedJobs jobs;
    {
        CompilePool pool(2, metrics);
        const auto opener = jobs.open_on_exit();
        EXPECT_EQ(pool.threads(), 2);
        for (int job_idx = 0; job_idx < kJobs; ++job_idx) {
            pool.submit(jobs.job(job_idx));
        }
        // Each step: both threads are inside a job (fewer once the queue is empty), the rest is
        // queued; then one job finishes, and its thread takes exactly the next one.
        for (int finished = 0; finished < kJobs; ++finished) {
            const int running = std::min(2, kJobs - finished);
            ASSERT_TRUE(jobs.wait_for(static_cast<size_t>(finished + running), running))
                << finished << " finished";
            EXPECT_EQ(pool.queued(), kJobs - finished - running);
            // The pool counts a job done after it returns, so once the queue is empty its count
            // may still include the job that just ended; while jobs remain, the thread that ran
            // it took the next one, and so had counted it done, before the job above started.
            EXPECT_TRUE(testing::eventually([&] { return pool.running() == running; }));
            jobs.release_one();
        }
        // The destructor joins.
    }
    EXPECT_EQ(jobs.most(), 2);
    const std::vector<int> order = jobs.order();
    ASSERT_EQ(order.size(), 8u);
    // Two threads take jobs in order: job i starts no later than job i + 2 would.
    for (size_t idx = 2; idx < order.size(); ++idx) {
        EXPECT_LT(order[idx - 2], order[idx]) << idx;
    }
    const std::string text = metrics->text();
    EXPECT_THAT(text, HasSubstr("einsummable_compile_queue_wait_seconds_count 8"));
    EXPECT_THAT(text, HasSubstr("einsummable_compile_queue_length 0"));
    EXPECT_THAT(text, HasSubstr("einsummable_compiles_running 0"));
}

TEST(CompilePoolTest, QueuedAndRunningAreCounted) {
    GatedJobs jobs;
    CompilePool pool(1, nullptr);
    const auto opener = jobs.open_on_exit();
    pool.submit(jobs.job(0));
    pool.submit([] {});
    pool.submit([] {});
    ASSERT_TRUE(jobs.wait_for(1, 1));
    EXPECT_EQ(pool.running(), 1);
    EXPECT_EQ(pool.queued(), 2);
    jobs.release_one();
    // The pool counts a job done after it returns: nothing tells the test when, so it waits.
    EXPECT_TRUE(testing::eventually([&] { return pool.queued() == 0 && pool.running() == 0; }));
}

} // namespace
} // namespace einsummable::server
