// server::PlanCache: single-flight creation under concurrent misses, LRU eviction, erasing a
// model's plans, and creations on a CompilePool that stop when every caller has left. The cached
// values are empty CachedPlans: the cache never looks inside. Creations that must still be
// running when something else happens wait for it (a flag the test sets), and callers' deadlines
// pass when the test says, not after some milliseconds: the order of events the tests assert
// holds however slowly the machine runs their threads.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/plan_cache.h"
#include "tests/unit/eventually.h"

namespace einsummable::server {
namespace {

using testing::eventually;

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

PlanCache::Factory counting(std::atomic<int>& calls) {
    return [&calls](const std::shared_ptr<const support::Cancellation>&)
               -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++calls;
        return std::make_shared<CachedPlan>();
    };
}

// Counts its calls and returns once `go` is set (by the test; a creation that must still be
// running when something else happens), or with an error after eventually()'s limit.
PlanCache::Factory counting_until(std::atomic<int>& calls, const std::atomic<bool>& go) {
    return [&calls, &go](const std::shared_ptr<const support::Cancellation>&)
               -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++calls;
        if (!eventually([&] { return go.load(); })) {
            return absl::InternalError("the test never let the creation end");
        }
        return std::make_shared<CachedPlan>();
    };
}

TEST(PlanCacheTest, ManyConcurrentMissesOnOneKeyCreateOnce) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    std::atomic<int> hits{0};
    constexpr int kThreads = 16;
    // The creation lasts until every thread has come to the cache: they miss together. (One
    // that comes after its end finds the plan cached, which counts as one creation too.)
    std::atomic<int> arrived{0};
    std::atomic<bool> all_arrived{false};
    std::vector<std::shared_ptr<CachedPlan>> plans(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            if (++arrived == kThreads) {
                all_arrived = true;
            }
            absl::StatusOr<PlanCache::Lookup> lookup =
                cache.get_or_create(key("m", 8), counting_until(calls, all_arrived));
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
    // Each creation returns only once all four have started: were they serialised behind one
    // lock, the first would wait for the others in vain and fail.
    std::atomic<bool> all_started{false};
    auto creation = [&](const std::shared_ptr<const support::Cancellation>&)
        -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        if (++calls == 4) {
            all_started = true;
        }
        if (!eventually([&] { return all_started.load(); })) {
            return absl::InternalError("the other creations did not start meanwhile");
        }
        return std::make_shared<CachedPlan>();
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            absl::StatusOr<PlanCache::Lookup> lookup =
                cache.get_or_create(key("m", t + 1), creation);
            EXPECT_TRUE(lookup.ok()) << lookup.status();
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(calls.load(), 4);
    EXPECT_EQ(cache.size(), 4);
}

TEST(PlanCacheTest, AFailureReachesEveryWaiterAndIsNotCached) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    // The first creation lasts until every thread has come to the cache (one that comes after
    // its end starts another, which fails alike).
    std::atomic<int> arrived{0};
    std::atomic<bool> all_arrived{false};
    auto failing = [&](const std::shared_ptr<const support::Cancellation>&)
        -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++calls;
        eventually([&] { return all_arrived.load(); });
        return absl::InvalidArgumentError("no plan");
    };
    std::vector<std::thread> threads;
    std::atomic<int> failures{0};
    for (int t = 0; t < 6; ++t) {
        threads.emplace_back([&] {
            if (++arrived == 6) {
                all_arrived = true;
            }
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

TEST(PlanCacheTest, ATouchedPlanIsFresherWithoutALookup) {
    PlanCache cache(2);
    std::atomic<int> calls{0};
    cache.get_or_create(key("m", 1), counting(calls)).value();
    cache.get_or_create(key("m", 2), counting(calls)).value();
    cache.touch(key("m", 1));                                  // 1 is fresher than 2 now
    cache.touch(key("m", 9));                                  // not cached: nothing happens
    cache.get_or_create(key("m", 3), counting(calls)).value(); // evicts 2
    EXPECT_TRUE(cache.get_or_create(key("m", 1), counting(calls)).value().hit);
    EXPECT_FALSE(cache.get_or_create(key("m", 2), counting(calls)).value().hit);
    EXPECT_EQ(calls.load(), 4);
}

TEST(PlanCacheTest, PinnedPlansAreEvictedLast) {
    PlanCache cache(2);
    std::atomic<int> calls{0};
    cache.get_or_create(key("m", 1), counting(calls)).value();
    cache.pin(key("m", 1));
    cache.get_or_create(key("m", 2), counting(calls)).value();
    cache.get_or_create(key("m", 3), counting(calls)).value(); // evicts 2, the oldest unpinned
    EXPECT_TRUE(cache.get_or_create(key("m", 1), counting(calls)).value().hit);
    EXPECT_TRUE(cache.get_or_create(key("m", 3), counting(calls)).value().hit);
    EXPECT_EQ(cache.size(), 2);
    EXPECT_EQ(cache.pinned(), 1);
    // Every plan pinned: the newest, unpinned, is the one evicted.
    cache.pin(key("m", 3));
    cache.get_or_create(key("m", 4), counting(calls)).value();
    EXPECT_EQ(cache.size(), 2);
    EXPECT_EQ(cache.pinned(), 2);
    cache.erase_model("m");
    EXPECT_EQ(cache.size(), 0);
    EXPECT_EQ(cache.pinned(), 0);
    EXPECT_EQ(calls.load(), 4);
}

TEST(PlanCacheTest, ErasesAModelsPlansAndDiscardsItsCreationInFlight) {
    PlanCache cache(8);
    std::atomic<int> calls{0};
    ASSERT_TRUE(cache.get_or_create(key("a", 1), counting(calls)).ok());
    ASSERT_TRUE(cache.get_or_create(key("a", 2), counting(calls)).ok());
    ASSERT_TRUE(cache.get_or_create(key("b", 1), counting(calls)).ok());
    EXPECT_EQ(cache.count_for_model("a"), 2);

    // A creation of "a" still running when the model is erased.
    std::atomic<int> slow_calls{0};
    std::atomic<bool> erased{false};
    std::thread slow([&] {
        auto lookup = cache.get_or_create(key("a", 3), counting_until(slow_calls, erased));
        EXPECT_TRUE(lookup.ok()) << lookup.status(); // its caller still gets the plan
    });
    EXPECT_TRUE(eventually([&] { return slow_calls.load() == 1; }));
    cache.erase_model("a");
    erased = true;
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
    // The leader's creation lasts until the waiter has returned: a waiter that waited for the
    // creation instead of leaving would wait until eventually()'s limit, and then get the plan.
    std::atomic<bool> waiter_returned{false};
    std::thread leader([&] {
        auto lookup = cache.get_or_create(key("m", 1), counting_until(calls, waiter_returned));
        EXPECT_TRUE(lookup.ok()) << lookup.status();
    });
    EXPECT_TRUE(eventually([&] { return calls.load() == 1; }));
    absl::StatusOr<PlanCache::Lookup> waiter = cache.get_or_create(
        key("m", 1), counting(calls), [] { return absl::DeadlineExceededError("too late"); });
    waiter_returned = true;
    EXPECT_EQ(waiter.status().code(), absl::StatusCode::kDeadlineExceeded);
    leader.join();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(cache.size(), 1);
}

// A creation that runs until its cancellation is set, or until `done` is set (by the test):
// a compile that would take long. Counts its starts and its stops by cancellation; one that is
// neither stopped nor let end fails after eventually()'s limit.
PlanCache::Factory until_cancelled(std::atomic<int>& starts, std::atomic<int>& stopped,
                                   const std::atomic<bool>& done) {
    return [&starts, &stopped, &done](const std::shared_ptr<const support::Cancellation>& cancel)
               -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        ++starts;
        if (!eventually([&] { return done.load() || cancel->cancelled(); })) {
            return absl::InternalError("the creation was neither cancelled nor let end");
        }
        if (!done.load()) {
            ++stopped;
            return absl::CancelledError("stopped");
        }
        return std::make_shared<CachedPlan>();
    };
}

// A caller's cancellation check whose deadline passes once `passed` holds (the test's choice of
// when; the cache looks at it every 50 ms while the caller waits).
PlanCache::CancelCheck deadline_once(std::function<bool()> passed) {
    return [passed = std::move(passed)]() -> absl::Status {
        return passed() ? absl::DeadlineExceededError("deadline") : absl::OkStatus();
    };
}

// A caller whose deadline has passed.
PlanCache::CancelCheck past_deadline() {
    return deadline_once([] { return true; });
}

const std::atomic<bool> kNever{false};

TEST(PlanCachePoolTest, ACreationWhoseOnlyCallerLeftStopsAndFreesItsThread) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> starts{0};
    std::atomic<int> stopped{0};
    // The creation would never end; its caller's deadline passes while it runs. That the caller
    // returns at all shows it did not wait for the creation.
    absl::StatusOr<PlanCache::Lookup> lookup =
        cache.get_or_create(key("m", 1), until_cancelled(starts, stopped, kNever),
                            deadline_once([&] { return starts.load() == 1; }));
    EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDeadlineExceeded);
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
    // The creation runs until the impatient caller has left.
    std::atomic<bool> impatient_left{false};
    absl::StatusOr<PlanCache::Lookup> patient;
    std::thread patient_thread([&] {
        patient =
            cache.get_or_create(key("m", 1), until_cancelled(starts, stopped, impatient_left));
    });
    EXPECT_TRUE(eventually([&] { return starts.load() == 1; }));
    absl::StatusOr<PlanCache::Lookup> impatient =
        cache.get_or_create(key("m", 1), until_cancelled(starts, stopped, kNever), past_deadline());
    impatient_left = true;
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
    // Holds the pool's one thread until the queued caller has returned: that it returns at all
    // shows it left while its creation was queued.
    std::atomic<bool> queued_returned{false};
    absl::StatusOr<PlanCache::Lookup> busy;
    std::thread busy_thread([&] {
        busy = cache.get_or_create(key("m", 1),
                                   until_cancelled(busy_starts, busy_stopped, queued_returned));
    });
    EXPECT_TRUE(eventually([&] { return pool.running() == 1; }));
    std::atomic<int> queued_calls{0};
    absl::StatusOr<PlanCache::Lookup> queued =
        cache.get_or_create(key("m", 2), counting(queued_calls), past_deadline());
    queued_returned = true;
    EXPECT_EQ(queued.status().code(), absl::StatusCode::kDeadlineExceeded);
    busy_thread.join();
    ASSERT_TRUE(busy.ok()) << busy.status();
    EXPECT_TRUE(eventually([&] { return pool.queued() == 0 && pool.running() == 0; }));
    EXPECT_EQ(queued_calls.load(), 0); // taken off the queue already cancelled
    EXPECT_EQ(cache.size(), 1);
}

TEST(PlanCachePoolTest, ACreationThatFinishesAfterItsCallersLeftIsNotCached) {
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    std::atomic<int> calls{0};
    std::atomic<bool> caller_left{false};
    // Ignores its cancellation, as a step that does not poll would, and ends only after its
    // caller has left.
    absl::StatusOr<PlanCache::Lookup> lookup =
        cache.get_or_create(key("m", 1), counting_until(calls, caller_left),
                            deadline_once([&] { return calls.load() == 1; }));
    caller_left = true;
    EXPECT_EQ(lookup.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_TRUE(eventually([&] { return pool.running() == 0 && pool.queued() == 0; }));
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(cache.size(), 0);
}

TEST(PlanCachePoolTest, OnePoolThreadRunsDistinctCreationsOneAtATime) {
    constexpr int kCreations = 4;
    CompilePool pool(1, nullptr);
    PlanCache cache(8, &pool);
    // Each creation counts itself and then waits until the test lets it end: the test sees
    // every step (one creation running, the others queued on the pool) instead of hoping that
    // a sleep inside them would overlap two, were the pool to run them together.
    std::mutex mutex;
    std::condition_variable cv;
    int started = 0;
    int running = 0;
    int most = 0;
    int permits = 0;
    bool open = false; // every creation may end (the test stops early)
    auto creation = [&](const std::shared_ptr<const support::Cancellation>&)
        -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
        std::unique_lock<std::mutex> lock(mutex);
        ++started;
        most = std::max(most, ++running);
        cv.wait(lock, [&] { return permits > 0 || open; });
        permits = std::max(permits - 1, 0);
        --running;
        return std::make_shared<CachedPlan>();
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < kCreations; ++t) {
        threads.emplace_back([&, t] {
            auto lookup = cache.get_or_create(key("m", t + 1), creation);
            EXPECT_TRUE(lookup.ok()) << lookup.status();
        });
    }
    for (int finished = 0; finished < kCreations; ++finished) {
        // One creation runs; every caller that has not had its plan yet waits on the queue.
        const bool one_running = eventually([&] {
            std::lock_guard<std::mutex> lock(mutex);
            return started == finished + 1 && running == 1 &&
                   pool.queued() == kCreations - finished - 1;
        });
        EXPECT_TRUE(one_running) << finished << " finished";
        {
            std::lock_guard<std::mutex> lock(mutex);
            ++permits;
            open = !one_running;
        }
        cv.notify_all();
        if (!one_running) {
            break;
        }
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(most, 1);
    EXPECT_EQ(cache.size(), kCreations);
}

} // namespace
} // namespace einsummable::server
