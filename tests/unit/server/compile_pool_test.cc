// server/compile_pool.h: a fixed number of threads, first in first out, metrics of the queue.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/compile_pool.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

TEST(CompilePoolTest, RunsAtMostItsThreadsAtOnceInSubmissionOrder) {
    auto metrics = std::make_shared<Metrics>();
    std::atomic<int> running{0};
    std::atomic<int> most{0};
    std::mutex order_mutex;
    std::vector<int> order;
    {
        CompilePool pool(2, metrics);
        EXPECT_EQ(pool.threads(), 2);
        for (int job_idx = 0; job_idx < 8; ++job_idx) {
            pool.submit([&, job_idx] {
                {
                    std::lock_guard<std::mutex> lock(order_mutex);
                    order.push_back(job_idx);
                }
                const int now = ++running;
                int seen = most.load();
                while (now > seen && !most.compare_exchange_weak(seen, now)) {
                }
                std::this_thread::sleep_for(std::chrono::milliseconds(20));
                --running;
            });
        }
        // The destructor runs what is queued and joins.
    }
    EXPECT_EQ(most.load(), 2);
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
    CompilePool pool(1, nullptr);
    std::atomic<bool> release{false};
    std::atomic<bool> started{false};
    pool.submit([&] {
        started = true;
        while (!release) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    });
    pool.submit([] {});
    pool.submit([] {});
    while (!started) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(pool.running(), 1);
    EXPECT_EQ(pool.queued(), 2);
    release = true;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((pool.queued() > 0 || pool.running() > 0) && std::chrono::steady_clock::now() < end) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_EQ(pool.queued(), 0);
    EXPECT_EQ(pool.running(), 0);
}

} // namespace
} // namespace einsummable::server
