// server/batcher: how requests gather into batches (delay, size, busy instances), who runs a
// batch, and what a cancelled request does. The engine's use of it (packing, splitting, exact
// answers) is tested in engine_batching_test.cc.

#include <atomic>
#include <chrono>
#include <ctime>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/batcher.h"

namespace einsummable::server {
namespace {

using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

using Items = std::vector<std::shared_ptr<Batcher::Item>>;

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
    Batcher batcher;
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
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_THAT(recorder.sizes, ElementsAre(4));
    EXPECT_THAT(answered, Each(4));
    EXPECT_EQ(batcher.groups(), 0);
}

TEST(BatcherTest, AFullBatchRunsAtOnceAndTheRestWait) {
    Batcher batcher;
    Recorder recorder;
    const v1::ExecuteRequest request;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&] {
            auto item = std::make_shared<Batcher::Item>();
            item->request = &request;
            // Ten seconds of delay: only a full batch runs before it.
            EXPECT_TRUE(batcher
                            .submit("k", settings(2, std::chrono::seconds(10)), item,
                                    recorder.run(), nullptr)
                            .ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
    EXPECT_THAT(recorder.sizes, ElementsAre(2, 2));
}

TEST(BatcherTest, KeysNeverShareABatch) {
    Batcher batcher;
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
        while (!first_running_) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        }
    }
    // Submits `n` requests behind it and gives them time to queue.
    void queue(int n) {
        for (int i = 0; i < n; ++i) {
            threads_.emplace_back([this] { submit(); });
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    // Frees the instance and waits for every request's answer; the batches' sizes in order.
    std::vector<int> release() {
        release_first_ = true;
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
                std::lock_guard<std::mutex> lock(mutex_);
                sizes_.push_back(static_cast<int>(batch.size()));
            }
            if (!first_running_.exchange(true)) {
                while (!release_first_) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(1));
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
    std::mutex mutex_;
    std::vector<int> sizes_; // guarded by mutex_
    std::atomic<bool> first_running_{false};
    std::atomic<bool> release_first_{false};
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
    const double cpu_before = cpu_seconds();
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    const double cpu = cpu_seconds() - cpu_before;
    EXPECT_THAT(instance.release(), ElementsAre(1, 6));
    // The busy instance's 1 ms sleeps cost a few milliseconds (the waiting requests sleep until
    // woken); spinning cost the whole half second on each core.
    EXPECT_LT(cpu, 0.1) << "CPU seconds used in 0.5 s by six waiting requests";
}

TEST(BatcherTest, ACancelledRequestLeavesItsBatchBeforeItStarts) {
    Batcher batcher;
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
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    cancel = true;
    cancelled.join();
    stays.join();
    EXPECT_THAT(recorder.sizes, ElementsAre(1));
    EXPECT_EQ(batcher.groups(), 0);
}

TEST(BatcherTest, AnItemTheBatchLeftUnansweredGetsAnError) {
    Batcher batcher;
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
