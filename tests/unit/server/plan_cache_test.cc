// server::PlanCache: single-flight creation under concurrent misses, LRU eviction, erasing a
// model's plans, and creations on a CompilePool that stop when every caller has left. The cached
// values are empty CachedPlans: the cache never looks inside.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/plan_cache.h"

namespace einsummable::server {
namespace {

PlanKey key(const std::string& model, int64_t tokens) {
    PlanKey key;
    key.model = model;
    key.graph_fingerprint = "f";
    key.dims = {{"tokens", tokens}};
    key.devices = 2;
    key.planner = "dp";
    key.schedule = "optimized";
    key.topology = "dgx-a100";
    key.version = "test";
    return key;
}

PlanCache::Factory counting(std::atomic<int>& calls, std::chrono::milliseconds delay = {}) {
    return [&calls, delay](const std::shared_ptr<const support::Cancellation>&)
               -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++calls;
        std::this_thread::sleep_for(delay);
        return std::make_shared<CachedPlan>();
    };
}

TEST(PlanCacheTest, ManyConcurrentMissesOnOneKeyCreateOnce) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    std::atomic<int> hits{0};
    constexpr int kThreads = 16;
    std::vector<std::shared_ptr<CachedPlan>> plans(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            absl::StatusOr<PlanCache::Lookup> lookup =
                cache.get_or_create(key("m", 8), counting(calls, std::chrono::milliseconds(200)));
            ASSERT_TRUE(lookup.ok()) << lookup.status();
            plans[t] = lookup->plan;
            hits += lookup->hit ? 1 : 0;
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(calls.load(), 1);
    for (const std::shared_ptr<CachedPlan>& plan : plans) {
        EXPECT_EQ(plan, plans[0]);
    }
    EXPECT_EQ(cache.size(), 1);
    absl::StatusOr<PlanCache::Lookup> again = cache.get_or_create(key("m", 8), counting(calls));
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(again->hit);
    EXPECT_EQ(again->plan, plans[0]);
    EXPECT_EQ(calls.load(), 1);
}

TEST(PlanCacheTest, DifferentKeysCreateConcurrently) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    std::vector<std::thread> threads;
    const auto start = std::chrono::steady_clock::now();
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            ASSERT_TRUE(
                cache
                    .get_or_create(key("m", t + 1), counting(calls, std::chrono::milliseconds(300)))
                    .ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(calls.load(), 4);
    EXPECT_EQ(cache.size(), 4);
    // Not serialised behind one lock: well under 4 x 300 ms.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1100));
}

TEST(PlanCacheTest, AFailureReachesEveryWaiterAndIsNotCached) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    auto failing = [&](const std::shared_ptr<const support::Cancellation>&)
        -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++calls;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        return absl::InvalidArgumentError("no plan");
    };
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 6; ++t) {
        threads.emplace_back([&] {
            absl::StatusOr<PlanCache::Lookup> lookup = cache.get_or_create(key("m", 8), failing);
            if (!lookup.ok() && lookup.status().message() == "no plan") {
                ++failures;
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(failures.load(), 6);
    EXPECT_GE(calls.load(), 1);
    EXPECT_EQ(cache.size(), 0);
    std::atomic<int> good_calls{0};
    absl::StatusOr<PlanCache::Lookup> retry =
        cache.get_or_create(key("m", 8), counting(good_calls));
    ASSERT_TRUE(retry.ok());
    EXPECT_FALSE(retry->hit);
    EXPECT_EQ(good_calls.load(), 1);
}

TEST(PlanCacheTest, AnExceptionInTheFactoryBecomesInternal) {
    PlanCache cache(8);
    absl::StatusOr<PlanCache::Lookup> lookup = cache.get_or_create(
        key("m", 8),
        [](const std::shared_ptr<const support::Cancellation>&)
            -> absl::StatusOr<std::shared_ptr<CachedPlan>> { throw std::runtime_error("boom"); });
    ASSERT_FALSE(lookup.ok());
    EXPECT_EQ(lookup.status().code(), absl::StatusCode::kInternal);
    EXPECT_THAT(std::string(lookup.status().message()), ::testing::HasSubstr("boom"));
}

TEST(PlanCacheTest, EvictsTheLeastRecentlyUsed) {
    PlanCache cache(2);
    std::atomic<int> calls{0};
    auto a = cache.get_or_create(key("m", 1), counting(calls)).value().plan;
    auto b = cache.get_or_create(key("m", 2), counting(calls)).value().plan;
    EXPECT_TRUE(cache.get_or_create(key("m", 1), counting(calls)).value().hit); // 1 is fresher
    auto c = cache.get_or_create(key("m", 3), counting(calls)).value().plan;    // evicts 2
    EXPECT_EQ(cache.size(), 2);
    EXPECT_EQ(calls.load(), 3);
    EXPECT_TRUE(cache.get_or_create(key("m", 1), counting(calls)).value().hit);
    EXPECT_TRUE(cache.get_or_create(key("m", 3), counting(calls)).value().hit);
    PlanCache::Lookup two = cache.get_or_create(key("m", 2), counting(calls)).value();
    EXPECT_FALSE(two.hit);
    EXPECT_NE(two.plan, b); // recompiled; the evicted one lives on where it is still held
    EXPECT_EQ(calls.load(), 4);
    EXPECT_EQ(b.use_count(), 1);
    std::vector<std::shared_ptr<CachedPlan>> entries = cache.entries();
    ASSERT_EQ(entries.size(), 2u);
    EXPECT_EQ(entries[0], two.plan); // most recently used first
}

TEST(PlanCacheTest, ErasesAModelsPlansAndDiscardsItsCreationInFlight) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    ASSERT_TRUE(cache.get_or_create(key("a", 1), counting(calls)).ok());
    ASSERT_TRUE(cache.get_or_create(key("a", 2), counting(calls)).ok());
    ASSERT_TRUE(cache.get_or_create(key("b", 1), counting(calls)).ok());
    EXPECT_EQ(cache.count_for_model("a"), 2);

    std::atomic<bool> started{false};
    std::thread slow([&] {
        auto lookup =
            cache.get_or_create(key("a", 3),
                                [&](const std::shared_ptr<const support::Cancellation>&)
                                    -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
                                    started = true;
                                    std::this_thread::sleep_for(std::chrono::milliseconds(200));
                                    return std::make_shared<CachedPlan>();
                                });
        EXPECT_TRUE(lookup.ok()); // its caller still gets the plan
    });
    while (!started) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    cache.erase_model("a");
    slow.join();
    EXPECT_EQ(cache.count_for_model("a"), 0);
    EXPECT_EQ(cache.count_for_model("b"), 1);
    EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCacheTest, APlanNoLongerWantedIsReturnedButNotCached) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    absl::StatusOr<PlanCache::Lookup> lookup =
        cache.get_or_create(key("m", 1), counting(calls), nullptr, [] { return false; });
    ASSERT_TRUE(lookup.ok());
    EXPECT_NE(lookup->plan, nullptr);
    EXPECT_EQ(cache.size(), 0);
}

TEST(PlanCacheTest, AWaiterStopsWhenItsRequestIsCancelled) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    std::atomic<bool> started{false};
    std::thread leader([&] {
        auto lookup =
            cache.get_or_create(key("m", 1),
                                [&](const std::shared_ptr<const support::Cancellation>&)
                                    -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
                                    started = true;
                                    std::this_thread::sleep_for(std::chrono::milliseconds(500));
                                    ++calls;
                                    return std::make_shared<CachedPlan>();
                                });
        EXPECT_TRUE(lookup.ok());
    });
    while (!started) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<PlanCache::Lookup> waiter = cache.get_or_create(
        key("m", 1), counting(calls), [] { return absl::DeadlineExceededError("too late"); });
    EXPECT_EQ(waiter.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(400));
    leader.join();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(cache.size(), 1);
}

// A creation that runs until its cancellation is set (or `limit` passes): a compile that would
// take long. Counts its starts and its stops by cancellation.
PlanCache::Factory until_cancelled(std::atomic<int>& starts, std::atomic<int>& stopped,
                                   std::chrono::milliseconds limit = std::chrono::seconds(20)) {
    return [&starts, &stopped, limit](const std::shared_ptr<const support::Cancellation>& cancel)
               -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++starts;
        const auto end = std::chrono::steady_clock::now() + limit;
        while (std::chrono::steady_clock::now() < end) {
            if (cancel->cancelled()) {
                ++stopped;
                return absl::CancelledError("stopped");
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
        return std::make_shared<CachedPlan>();
    };
}

PlanCache::CancelCheck deadline_in(std::chrono::milliseconds delay) {
    const auto deadline = std::chrono::steady_clock::now() + delay;
    return [deadline]() -> absl::Status {
        if (std::chrono::steady_clock::now() >= deadline) {
            return absl::DeadlineExceededError("deadline");
        }
        return absl::OkStatus();
    };
}

// Polls `done` for up to five seconds.
bool eventually(const std::function<bool()>& done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < end) {
        if (done()) {
            return true;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return done();
}

TEST(PlanCachePoolTest, ACreationWhoseOnlyCallerLeftStopsAndFreesItsThread) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> starts{0};
    std::atomic<int> stopped{0};
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<PlanCache::Lookup> lookup = cache.get_or_create(
        key("m", 1), until_cancelled(starts, stopped), deadline_in(std::chrono::milliseconds(100)));
    EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDeadlineExceeded);
    // The caller returns at its deadline, not when the creation would have ended (20 s).
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
    EXPECT_TRUE(eventually([&] { return stopped.load() == 1 && pool.running() == 0; }));
    EXPECT_EQ(cache.size(), 0);
    // The key is free again: a patient request creates it anew.
    std::atomic<int> calls{0};
    absl::StatusOr<PlanCache::Lookup> again = cache.get_or_create(key("m", 1), counting(calls));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCachePoolTest, ACreationGoesOnWhileAnotherCallerStillWaits) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> starts{0};
    std::atomic<int> stopped{0};
    absl::StatusOr<PlanCache::Lookup> patient;
    std::thread patient_thread([&] {
        patient = cache.get_or_create(key("m", 1),
                                      until_cancelled(starts, stopped, std::chrono::seconds(1)));
    });
    ASSERT_TRUE(eventually([&] { return starts.load() == 1; }));
    absl::StatusOr<PlanCache::Lookup> impatient = cache.get_or_create(
        key("m", 1), until_cancelled(starts, stopped), deadline_in(std::chrono::milliseconds(50)));
    EXPECT_EQ(impatient.status().code(), absl::StatusCode::kDeadlineExceeded);
    patient_thread.join();
    ASSERT_TRUE(patient.ok()) << patient.status();
    EXPECT_EQ(starts.load(), 1);
    EXPECT_EQ(stopped.load(), 0);
    EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCachePoolTest, QueuedCreationsHonourTheirCallersDeadlinesAndNeverStartOnceAbandoned) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> busy_starts{0};
    std::atomic<int> busy_stopped{0};
    absl::StatusOr<PlanCache::Lookup> busy;
    // Holds the pool's one thread for a second.
    std::thread busy_thread([&] {
        busy = cache.get_or_create(
            key("m", 1), until_cancelled(busy_starts, busy_stopped, std::chrono::seconds(1)));
    });
    ASSERT_TRUE(eventually([&] { return pool.running() == 1; }));
    std::atomic<int> queued_calls{0};
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<PlanCache::Lookup> queued = cache.get_or_create(
        key("m", 2), counting(queued_calls), deadline_in(std::chrono::milliseconds(100)));
    EXPECT_EQ(queued.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(800));
    busy_thread.join();
    ASSERT_TRUE(busy.ok()) << busy.status();
    EXPECT_TRUE(eventually([&] { return pool.queued() == 0 && pool.running() == 0; }));
    EXPECT_EQ(queued_calls.load(), 0); // taken off the queue already cancelled
    EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCachePoolTest, ACreationThatFinishesAfterItsCallersLeftIsNotCached) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<bool> finished{false};
    // Ignores its cancellation, as a step that does not poll would.
    absl::StatusOr<PlanCache::Lookup> lookup = cache.get_or_create(
        key("m", 1),
        [&](const std::shared_ptr<const support::Cancellation>&)
            -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
            std::this_thread::sleep_for(std::chrono::milliseconds(300));
            finished = true;
            return std::make_shared<CachedPlan>();
        },
        deadline_in(std::chrono::milliseconds(50)));
    EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(eventually([&] { return finished.load() && pool.running() == 0; }));
    EXPECT_EQ(cache.size(), 0);
}

TEST(PlanCachePoolTest, OnePoolThreadRunsDistinctCreationsOneAtATime) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> running{0};
    std::atomic<int> most{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            auto lookup =
                cache.get_or_create(key("m", t + 1),
                                    [&](const std::shared_ptr<const support::Cancellation>&)
                                        -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
                                        const int now = ++running;
                                        most = std::max(most.load(), now);
                                        std::this_thread::sleep_for(std::chrono::milliseconds(30));
                                        --running;
                                        return std::make_shared<CachedPlan>();
                                    });
            EXPECT_TRUE(lookup.ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(most.load(), 1);
    EXPECT_EQ(cache.size(), 4);
}

} // namespace
} // namespace einsummable::server
