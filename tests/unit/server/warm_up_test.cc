// server::WarmUp with a stand-in compile: which models warm up, smallest bucket first across
// models, the bucket a request runs at while a model warms, failures, the stop on
// ResourceExhausted, and unregistering or stopping while a bucket compiles. The engine's use of
// it (real compiles, answers, metrics): engine_batching_test.cc.
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "proto/graph_def.h"
#include "server/model_store.h"
#include "server/warm_up.h"
#include "tests/unit/eventually.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using einsummable::testing::eventually;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A compile that records its calls and returns what `results` says for a bucket (OK when
// absent). A bucket in `held` waits until released, or until its cancel check fails, whose
// status it then returns.
class FakeCompile {
public:
    WarmUp::CompileBucket function() {
        return [this](const std::shared_ptr<const Model>& model, int64_t bucket,
                      const WarmUp::CancelCheck& cancelled) -> absl::Status {
            std::unique_lock<std::mutex> lock(mutex_);
            calls_.push_back(absl::StrCat(model->name(), ":", bucket));
            changed_.notify_all();
            while (held_.count(bucket) != 0) {
                lock.unlock();
                if (absl::Status status = cancelled(); !status.ok()) {
                    return status;
                }
                lock.lock();
                changed_.wait_for(lock, std::chrono::milliseconds(1));
            }
            auto result = results_.find(bucket);
            return result == results_.end() ? absl::OkStatus() : result->second;
        };
    }
    void hold(int64_t bucket) {
        std::lock_guard<std::mutex> lock(mutex_);
        held_.insert(bucket);
    }
    void release(int64_t bucket) {
        std::lock_guard<std::mutex> lock(mutex_);
        held_.erase(bucket);
        changed_.notify_all();
    }
    void fail(int64_t bucket, absl::Status status) {
        std::lock_guard<std::mutex> lock(mutex_);
        results_[bucket] = std::move(status);
    }
    std::vector<std::string> calls() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return calls_;
    }

private:
    mutable std::mutex mutex_;
    std::condition_variable changed_;
    std::set<int64_t> held_;
    std::map<int64_t, absl::Status> results_;
    std::vector<std::string> calls_;
};

class WarmUpTest : public ::testing::Test {
protected:
    // The small FFN batching along tokens, with `buckets` (none: no buckets).
    std::shared_ptr<const Model> model(const std::string& name, std::vector<int64_t> buckets,
                                       bool skip = false) {
        v1::Batching batching;
        batching.set_dimension("tokens");
        if (!buckets.empty()) {
            for (int64_t size : buckets) {
                batching.mutable_buckets()->add_sizes(size);
            }
            batching.mutable_buckets()->set_skip_warm_up(skip);
        }
        absl::StatusOr<v1::GraphDef> graph = graphdef::parse_text(testing::kFfn);
        EXPECT_TRUE(graph.ok()) << graph.status();
        absl::StatusOr<std::shared_ptr<const Model>> registered =
            store_.register_model(name, *graph, {"w1", "w2"}, &batching);
        EXPECT_TRUE(registered.ok()) << registered.status();
        return *registered;
    }

    bool done(const WarmUp& warm_up, const Model& model) {
        return warm_up.info(model.id()).state() != v1::WarmUp::WARM_UP_RUNNING;
    }

    ModelStore store_{ModelStoreLimits{1 << 20, 100}};
    FakeCompile compile_;
};

TEST_F(WarmUpTest, OnlyModelsWithBucketsWhoseOnlySymbolIsTheirsWarmUp) {
    EXPECT_TRUE(WarmUp::wanted(*model("buckets", {4, 8})));
    EXPECT_FALSE(WarmUp::wanted(*model("none", {})));
    EXPECT_FALSE(WarmUp::wanted(*model("skipped", {4, 8}, /*skip=*/true)));
    WarmUp warm_up(compile_.function(), nullptr);
    warm_up.add(*store_.find("none"));
    warm_up.add(*store_.find("skipped"));
    EXPECT_EQ(warm_up.info((*store_.find("none"))->id()).state(), v1::WarmUp::WARM_UP_NONE);
    EXPECT_EQ(warm_up.pending(), 0);
    warm_up.stop();
    EXPECT_THAT(compile_.calls(), IsEmpty());
}

TEST_F(WarmUpTest, SmallestBucketFirstAcrossModels) {
    auto metrics = std::make_shared<Metrics>();
    WarmUp warm_up(compile_.function(), metrics);
    compile_.hold(4);
    std::shared_ptr<const Model> a = model("a", {4, 16});
    warm_up.add(a);
    ASSERT_TRUE(eventually([&] { return compile_.calls().size() == 1; }));
    std::shared_ptr<const Model> b = model("b", {8});
    warm_up.add(b);
    EXPECT_EQ(warm_up.pending(), 3);
    const v1::WarmUp running = warm_up.info(a->id());
    EXPECT_EQ(running.state(), v1::WarmUp::WARM_UP_RUNNING);
    EXPECT_THAT(running.pending(), ElementsAre(4, 16));
    EXPECT_THAT(metrics->text(),
                HasSubstr("einsummable_warm_up_buckets{model=\"a\",state=\"pending\"} 2"));
    compile_.release(4);
    ASSERT_TRUE(eventually([&] { return done(warm_up, *a) && done(warm_up, *b); }));
    EXPECT_THAT(compile_.calls(), ElementsAre("a:4", "b:8", "a:16"));
    const v1::WarmUp finished = warm_up.info(a->id());
    EXPECT_EQ(finished.state(), v1::WarmUp::WARM_UP_DONE);
    EXPECT_THAT(finished.ready(), ElementsAre(4, 16));
    EXPECT_THAT(finished.pending(), IsEmpty());
    EXPECT_EQ(warm_up.pending(), 0);
    EXPECT_THAT(metrics->text(),
                HasSubstr("einsummable_warm_up_buckets{model=\"a\",state=\"ready\"} 2"));
}

TEST_F(WarmUpTest, ARequestWhoseBucketIsNotReadyRunsOnTheSmallestReadyLargerOne) {
    WarmUp warm_up(compile_.function(), nullptr);
    compile_.fail(4, absl::InternalError("kernel exploded"));
    compile_.hold(32);
    std::shared_ptr<const Model> m = model("m", {4, 8, 16, 32});
    warm_up.add(m);
    ASSERT_TRUE(eventually([&] { return compile_.calls().size() == 4; }));
    // 4 failed, 8 and 16 ready, 32 compiling.
    EXPECT_EQ(warm_up.serving_bucket(*m, 4), 8);
    EXPECT_EQ(warm_up.serving_bucket(*m, 8), 8);
    EXPECT_EQ(warm_up.serving_bucket(*m, 16), 16);
    EXPECT_EQ(warm_up.serving_bucket(*m, 32), std::nullopt); // waits for its own
    const v1::WarmUp info = warm_up.info(m->id());
    EXPECT_EQ(info.state(), v1::WarmUp::WARM_UP_RUNNING);
    EXPECT_THAT(info.ready(), ElementsAre(8, 16));
    EXPECT_THAT(info.pending(), ElementsAre(32));
    EXPECT_THAT(info.failed(), ElementsAre(4));
    EXPECT_THAT(info.message(), HasSubstr("bucket 4: INTERNAL: kernel exploded"));
    compile_.release(32);
    ASSERT_TRUE(eventually([&] { return done(warm_up, *m); }));
    EXPECT_EQ(warm_up.info(m->id()).state(), v1::WarmUp::WARM_UP_DONE);
    // Warm: every request at its own bucket, the failed one compiling when a request needs it.
    EXPECT_EQ(warm_up.serving_bucket(*m, 4), 4);
}

TEST_F(WarmUpTest, ResourceExhaustedStopsTheModelsWarmUp) {
    WarmUp warm_up(compile_.function(), nullptr);
    compile_.fail(8, absl::ResourceExhaustedError("the plan cache is full"));
    std::shared_ptr<const Model> m = model("m", {4, 8, 16, 32});
    warm_up.add(m);
    ASSERT_TRUE(eventually([&] { return done(warm_up, *m); }));
    EXPECT_THAT(compile_.calls(), ElementsAre("m:4", "m:8"));
    const v1::WarmUp info = warm_up.info(m->id());
    EXPECT_EQ(info.state(), v1::WarmUp::WARM_UP_STOPPED);
    EXPECT_THAT(info.ready(), ElementsAre(4));
    EXPECT_THAT(info.failed(), ElementsAre(8));
    EXPECT_EQ(info.message(), "stopped at bucket 8: the plan cache is full; buckets 16,32 compile "
                              "when a request needs them");
    EXPECT_EQ(warm_up.serving_bucket(*m, 16), 16);
    EXPECT_EQ(warm_up.pending(), 0);
}

TEST_F(WarmUpTest, RemovingAModelCancelsItsCompileAndDropsItsBuckets) {
    WarmUp warm_up(compile_.function(), nullptr);
    compile_.hold(4);
    std::shared_ptr<const Model> m = model("m", {4, 8, 16});
    std::shared_ptr<const Model> other = model("other", {8});
    warm_up.add(m);
    ASSERT_TRUE(eventually([&] { return compile_.calls().size() == 1; }));
    warm_up.add(other);
    warm_up.remove(m->id()); // returns while the compile still runs
    EXPECT_EQ(warm_up.info(m->id()).state(), v1::WarmUp::WARM_UP_NONE);
    ASSERT_TRUE(eventually([&] { return done(warm_up, *other); }));
    EXPECT_EQ(warm_up.pending(), 0);
    // 4 stopped by its cancel check; 8 and 16 of m never compiled.
    EXPECT_THAT(compile_.calls(), ElementsAre("m:4", "other:8"));
}

TEST_F(WarmUpTest, StopCancelsTheCompileInFlight) {
    WarmUp warm_up(compile_.function(), nullptr);
    compile_.hold(4);
    std::shared_ptr<const Model> m = model("m", {4, 8});
    warm_up.add(m);
    ASSERT_TRUE(eventually([&] { return compile_.calls().size() == 1; }));
    warm_up.stop(); // returns once the held compile saw its cancel check fail
    EXPECT_THAT(compile_.calls(), ElementsAre("m:4"));
    warm_up.add(model("later", {4}));
    EXPECT_EQ(warm_up.pending(), 0);
}

} // namespace
} // namespace einsummable::server
