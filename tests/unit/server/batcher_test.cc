// server/batcher: how requests gather into batches (delay, size, busy instances), who runs a
// batch, and what a cancelled request does. The engine's use of it (packing, splitting, exact
// answers) is tested in engine_batching_test.cc. The delay runs on a fake clock that moves only
// when a test says, and tests wait for requests to be queued (Batcher::open_requests) rather
// than sleeping: batches form the same however slowly the machine runs the threads.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher.h"
#include "tests/unit/eventually.h"
#include "tests/unit/fake_clock.h"

namespace einsummable::server {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

using Items = std::vector<std::shared_ptr<Batcher::Item>>;
using testing::eventually;
using testing::FakeClock;

// A Batcher whose delay runs on `clock`.
Batcher batcher_on(const std::shared_ptr<FakeClock>& clock) {
    return Batcher(std::make_shared<CancelWatcher>(std::chrono::milliseconds(20)), clock);
}

// Answers every item with its position in the batch (execute_seconds) and the batch's size
// (batch_size), records the sizes, and says the plan runs `concurrency` batches at once.
struct Recorder {
    std::mutex mutex;
    std::vector<int> sizes;
    int concurrency = 1;

    Batcher::RunBatch run() {
        return [this](Items& batch) {
            {
                std::lock_guard<std::mutex> lock(mutex);
                sizes.push_back(static_cast<int>(batch.size()));
            }
            for (size_t i = 0; i < batch.size(); ++i) {
                v1::ExecuteResponse response;
                response.set_batch_size(static_cast<int>(batch.size()));
                response.set_execute_seconds(static_cast<double>(i));
                batch[i]->result = response;
            }
            return concurrency;
        };
    }
};

Batcher::Settings settings(int max_size, std::chrono::microseconds delay) {
    Batcher::Settings s;
    s.max_size = max_size;
    s.delay = delay;
    return s;
}

TEST(BatcherTest, RequestsWithinTheDelayRunAsOneBatch) {
    auto clock = std::make_shared<FakeClock>();
    Batcher batcher = batcher_on(clock);
    Recorder recorder;
    const v1::ExecuteRequest request;
    std::vector<std::thread> threads;
    std::vector<int> answered(4, 0);
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
            auto item = std::make_shared<Batcher::Item>();
            item->request = &request;
            absl::StatusOr<v1::ExecuteResponse> response = batcher.submit(
                "k", settings(8, std::chrono::seconds(2)), item, recorder.run(), nullptr);
            ASSERT_TRUE(response.ok()) << response.status();
            answered[i] = response->batch_size();
        });
    }
    // (EXPECT, not ASSERT, while the threads run: a failure still ends in their join.)
    EXPECT_TRUE(eventually([&] { return batcher.open_requests("k") == 4; }));
    // Still within the delay: the open batch's leader looks at the clock again (it waits on it
    // again after looking at the time once more) and runs nothing.
    clock->advance(std::chrono::milliseconds(1999));
    const int64_t waits = clock->waits();
    EXPECT_TRUE(eventually([&] { return clock->waits() >= waits + 2; }));
    EXPECT_EQ(batcher.open_requests("k"), 4);
    {
        std::lock_guard<std::mutex> lock(recorder.mutex);
        EXPECT_TRUE(recorder.sizes.empty());
    }
    clock->advance(std::chrono::milliseconds(1));
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_THAT(recorder.sizes, ElementsAre(4));
    EXPECT_THAT(answered, Each(4));
    EXPECT_EQ(batcher.groups(), 0);
}

TEST(BatcherTest, AFullBatchRunsAtOnceAndTheRestWait) {
    // The clock never moves: the delay never passes, so only full batches can run.
    auto clock = std::make_shared<FakeClock>();
    Batcher batcher = batcher_on(clock);
    Recorder recorder;
    const v1::ExecuteRequest request;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&] {
            auto item = std::make_shared<Batcher::Item>();
            item->request = &request;
            EXPECT_TRUE(batcher
                            .submit("k", settings(2, std::chrono::seconds(10)), item,
                                    recorder.run(), nullptr)
                            .ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_THAT(recorder.sizes, ElementsAre(2, 2));
}

TEST(BatcherTest, KeysNeverShareABatch) {
    // The clock never moves: each key's requests run only as a full batch of two.
    auto clock = std::make_shared<FakeClock>();
    Batcher batcher = batcher_on(clock);
    Recorder recorder;
    const v1::ExecuteRequest request;
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] {
            auto item = std::make_shared<Batcher::Item>();
            item->request = &request;
            EXPECT_TRUE(batcher
                            .submit(i % 2 == 0 ? "even" : "odd",
                                    settings(2, std::chrono::seconds(10)), item, recorder.run(),
                                    nullptr)
                            .ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_THAT(recorder.sizes, ElementsAre(2, 2));
}

// One plan instance, held busy by the first batch until release(): requests queued meanwhile
// show how batches form behind it. Records every batch's size.
class BusyInstance {
public:
    explicit BusyInstance(Batcher::Settings settings) : settings_(std::move(settings)) {}

    // Submits one request, whose batch runs at once and holds the instance.
    void start_first() {
        threads_.emplace_back([this] { submit(); });
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return first_running_; });
    }
    // Submits `n` requests behind it and waits until they are queued (and asleep: a request
    // waits, releasing the batcher's lock, in the step that queued it).
    void queue(int n) {
        for (int i = 0; i < n; ++i) {
            threads_.emplace_back([this] { submit(); });
        }
        EXPECT_TRUE(eventually([&] { return batcher_.open_requests("k") == n; }));
    }
    // Frees the instance and waits for every request's answer; the batches' sizes in order.
    std::vector<int> release() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            release_first_ = true;
        }
        changed_.notify_all();
        for (std::thread& thread : threads_) {
            thread.join();
        }
        std::lock_guard<std::mutex> lock(mutex_);
        return sizes_;
    }

private:
    void submit() {
        auto item = std::make_shared<Batcher::Item>();
        item->request = &request_;
        auto run = [this](Items& batch) {
            {
                std::unique_lock<std::mutex> lock(mutex_);
                sizes_.push_back(static_cast<int>(batch.size()));
                if (!first_running_) {
                    first_running_ = true;
                    changed_.notify_all();
                    changed_.wait(lock, [this] { return release_first_; });
                }
            }
            for (const std::shared_ptr<Batcher::Item>& member : batch) {
                member->result = v1::ExecuteResponse();
            }
            return 1;
        };
        EXPECT_TRUE(batcher_.submit("k", settings_, item, run, nullptr).ok());
    }

    Batcher batcher_;
    const Batcher::Settings settings_;
    const v1::ExecuteRequest request_;
    std::mutex mutex_; // guards the three below
    std::condition_variable changed_;
    std::vector<int> sizes_;
    bool first_running_ = false; // the first batch holds the instance
    bool release_first_ = false; // until this is set
    std::vector<std::thread> threads_;
};

// With no delay a request runs at once while an instance is free; while the one instance is
// busy, the requests that arrive gather into the next batch.
TEST(BatcherTest, RequestsGatherWhileEveryInstanceIsBusy) {
    BusyInstance instance(settings(8, std::chrono::microseconds(0)));
    instance.start_first();
    instance.queue(3);
    EXPECT_THAT(instance.release(), ElementsAre(1, 3));
}

// With preferred sizes, a batch that is not full takes the largest preferred size the open
// requests reach and leaves the rest for the next free instance: 7 queued behind a busy
// instance with sizes 1, 2, 4 run as 4, then 2, then 1, never as 7 completed to a larger size.
TEST(BatcherTest, ABatchTakesTheLargestPreferredSizeTheQueueReaches) {
    Batcher::Settings preferred = settings(8, std::chrono::microseconds(0));
    preferred.preferred = {1, 2, 4};
    BusyInstance instance(preferred);
    instance.start_first();
    instance.queue(7);
    EXPECT_THAT(instance.release(), ElementsAre(1, 4, 2, 1));
}

// Requests waiting behind a busy instance sleep: with no queue delay their deadline has passed,
// and waiting for it again and again would spin every waiting thread on the batcher's lock (it
// did, and under load the daemon spent more CPU there than in its kernels).
TEST(BatcherTest, RequestsWaitingForAnInstanceUseNoCpu) {
    BusyInstance instance(settings(8, std::chrono::microseconds(0)));
    instance.start_first();
    instance.queue(6);
    auto cpu_seconds = [] {
        timespec t{};
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    };
    // A real half second to watch them in: the process's CPU time, which other processes on a
    // busy machine do not add to. Every thread sleeps until woken (the busy instance too), so
    // they cost next to nothing; spinning cost the whole half second on each core it got. The
    // bound is generous so that a slow or busy machine never reaches it.
    const double cpu_before = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double cpu = cpu_seconds() - cpu_before;
    EXPECT_THAT(instance.release(), ElementsAre(1, 6));
    EXPECT_LT(cpu, 0.1) << "CPU seconds used in 0.5 s by six waiting requests";
}

TEST(BatcherTest, ACancelledRequestLeavesItsBatchBeforeItStarts) {
    auto clock = std::make_shared<FakeClock>();
    Batcher batcher = batcher_on(clock);
    Recorder recorder;
    const v1::ExecuteRequest request;
    std::atomic<bool> cancel{false};
    std::thread cancelled([&] {
        auto item = std::make_shared<Batcher::Item>();
        item->request = &request;
        absl::StatusOr<v1::ExecuteResponse> response = batcher.submit(
            "k", settings(8, std::chrono::milliseconds(500)), item, recorder.run(),
            [&] { return cancel ? absl::CancelledError("client gone") : absl::OkStatus(); });
        EXPECT_EQ(response.status().code(), absl::StatusCode::kCancelled);
    });
    std::thread stays([&] {
        auto item = std::make_shared<Batcher::Item>();
        item->request = &request;
        absl::StatusOr<v1::ExecuteResponse> response = batcher.submit(
            "k", settings(8, std::chrono::milliseconds(500)), item, recorder.run(), nullptr);
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_EQ(response->batch_size(), 1);
    });
    // The delay cannot pass before the cancellation: the clock moves only after it.
    EXPECT_TRUE(eventually([&] { return batcher.open_requests("k") == 2; }));
    cancel = true;
    cancelled.join();
    EXPECT_EQ(batcher.open_requests("k"), 1);
    clock->advance(std::chrono::milliseconds(500));
    stays.join();
    EXPECT_THAT(recorder.sizes, ElementsAre(1));
    EXPECT_EQ(batcher.groups(), 0);
}

TEST(BatcherTest, AnItemTheBatchLeftUnansweredGetsAnError) {
    // The clock never moves: the two requests run as one full batch.
    auto clock = std::make_shared<FakeClock>();
    Batcher batcher = batcher_on(clock);
    const v1::ExecuteRequest request;
    std::vector<absl::StatusCode> codes(2);
    std::vector<std::thread> threads;
    for (int i = 0; i < 2; ++i) {
        threads.emplace_back([&, i] {
            auto item = std::make_shared<Batcher::Item>();
            item->request = &request;
            item->outputs = {i == 0 ? "answered" : "forgotten"};
            codes[i] = batcher
                           .submit(
                               "k", settings(2, std::chrono::seconds(10)), item,
                               [](Items& batch) {
                                   for (const std::shared_ptr<Batcher::Item>& member : batch) {
                                       if (member->outputs[0] == "answered") {
                                           member->result = v1::ExecuteResponse();
                                       }
                                   }
                                   return 1;
                               },
                               nullptr)
                           .status()
                           .code();
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_THAT(codes, UnorderedElementsAre(absl::StatusCode::kOk, absl::StatusCode::kInternal));
}

} // namespace
} // namespace einsummable::server
