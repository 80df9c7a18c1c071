// Dynamic batching in server::Engine (docs/server.md, "Dynamic batching"): registration checks
// that a graph batches along its dimension, concurrent requests packed into one execution and
// split back with the answers they get alone, bit for bit, preferred sizes completed with idle
// requests, sequence ends, and the metrics. The batcher's own rules: batcher_test.cc.
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "server/engine.h"
#include "tests/unit/eventually.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

using testing::as_bytes;
using testing::as_floats;
using testing::kFf;
using testing::kFfn;
using testing::kModel;
using testing::random_values;
using testing::reference;

class EngineBatchingTest : public ::testing::Test {
protected:
    void SetUp() override { start_engine(); }

    // The engine on 2 CPU devices, with fresh metrics; a test may start it again with another
    // plan cache size.
    void start_engine(int64_t plan_cache_entries = EngineSettings().plan_cache_entries) {
        EngineOptions options;
        options.version = "test";
        options.topology = runtime::default_topology(2);
        options.synthesis_iterations = 50;
        options.instances_per_plan = 2;
        options.plan_cache_entries = plan_cache_entries;
        engine_.reset();
        metrics_ = std::make_shared<Metrics>();
        engine_ = std::make_unique<Engine>(options, runtime::cpu::make_cpu_backend({2, 1}), nullptr,
                                           metrics_);
    }

    absl::Status register_model(const std::string& name, const std::string& graph,
                                const v1::Batching* batching,
                                std::vector<std::string> weights = {"w1", "w2"}) {
        v1::RegisterModelRequest req;
        req.set_model(name);
        absl::StatusOr<v1::GraphDef> graph_def = graphdef::parse_text(graph);
        if (!graph_def.ok()) {
            return graph_def.status();
        }
        *req.mutable_graph() = *graph_def;
        for (const std::string& weight : weights) {
            req.add_weights(weight);
        }
        if (batching != nullptr) {
            *req.mutable_batching() = *batching;
        }
        return engine_->register_model(req).status();
    }

    // The small FFN as `name`, batching along tokens, with its weights.
    void register_ffn(const std::string& name, const v1::Batching& batching) {
        ASSERT_TRUE(register_model(name, kFfn, &batching).ok());
        ASSERT_TRUE(testing::upload_f32(*engine_, name, "w1", w1_, {kModel, kFf}).ok());
        ASSERT_TRUE(testing::upload_f32(*engine_, name, "w2", w2_, {kFf, kModel}).ok());
    }

    static v1::ExecuteRequest request(const std::string& model, int tokens,
                                      const std::vector<float>& x) {
        return testing::ffn_execute_request(model, tokens, x);
    }

    static v1::Batching batching(std::vector<int> preferred, int64_t delay_us) {
        v1::Batching wire;
        wire.set_dimension("tokens");
        for (int size : preferred) {
            wire.add_preferred_batch_size(size);
        }
        wire.set_max_queue_delay_us(delay_us);
        return wire;
    }

    std::unique_ptr<Engine> engine_;
    std::shared_ptr<Metrics> metrics_;
    std::vector<float> w1_ = random_values(kModel * kFf, 1);
    std::vector<float> w2_ = random_values(kFf * kModel, 2);
};

TEST_F(EngineBatchingTest, ConcurrentRequestsRunAsOneBatchWithTheirAnswersAlone) {
    // "ffn" gathers requests for a second and completes a batch to 4; "alone" runs each one
    // by itself (no delay, one at a time here).
    register_ffn("ffn", batching({4}, 1'000'000));
    register_ffn("alone", batching({}, 0));
    constexpr int kTokens = 3;
    constexpr int kRequests = 3;
    std::vector<std::vector<float>> xs;
    for (int i = 0; i < kRequests; ++i) {
        xs.push_back(random_values(kTokens * kModel, 10 + i));
    }
    std::vector<absl::StatusOr<v1::ExecuteResponse>> batched(kRequests,
                                                             absl::UnknownError("not run"));
    std::vector<std::thread> threads;
    for (int i = 0; i < kRequests; ++i) {
        threads.emplace_back(
            [&, i] { batched[i] = engine_->execute(request("ffn", kTokens, xs[i])); });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int i = 0; i < kRequests; ++i) {
        ASSERT_TRUE(batched[i].ok()) << batched[i].status();
        EXPECT_EQ(batched[i]->batch_size(), kRequests);
        EXPECT_EQ(batched[i]->batch_padding(), 1);
        ASSERT_EQ(batched[i]->outputs_size(), 1);
        const v1::Tensor& y = batched[i]->outputs(0).tensor();
        EXPECT_THAT(y.shape(), ::testing::ElementsAre(kTokens, kModel));

        absl::StatusOr<v1::ExecuteResponse> alone =
            engine_->execute(request("alone", kTokens, xs[i]));
        ASSERT_TRUE(alone.ok()) << alone.status();
        EXPECT_EQ(alone->batch_size(), 1);
        EXPECT_EQ(alone->batch_padding(), 0);
        EXPECT_EQ(alone->outputs(0).tensor().data(), y.data())
            << "request " << i << ": the batch's answer differs from the request's alone";
        const std::vector<float> got = as_floats(y.data());
        const std::vector<float> want = reference(xs[i], w1_, w2_, kTokens);
        for (size_t e = 0; e < want.size(); ++e) {
            EXPECT_NEAR(got[e], want[e], 1e-5) << "request " << i << " element " << e;
        }
    }
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_batch_size_count{model=\"ffn\"} 1"));
    EXPECT_THAT(text, HasSubstr("einsummable_batch_size_sum{model=\"ffn\"} 3"));
    EXPECT_THAT(text, HasSubstr("einsummable_batch_queue_seconds_count{model=\"ffn\"} 3"));
}

TEST_F(EngineBatchingTest, RequestsOfOtherShapesOrEndsNeverShareABatch) {
    register_ffn("ffn", batching({}, 300'000));
    const std::vector<float> x3 = random_values(3 * kModel, 1);
    const std::vector<float> x2 = random_values(2 * kModel, 2);
    v1::ExecuteRequest two_sequences = request("ffn", 3, x3);
    two_sequences.add_sequence_ends(1);
    two_sequences.add_sequence_ends(3);
    std::vector<absl::StatusOr<v1::ExecuteResponse>> responses(3, absl::UnknownError("not run"));
    std::thread a([&] { responses[0] = engine_->execute(request("ffn", 3, x3)); });
    std::thread b([&] { responses[1] = engine_->execute(request("ffn", 2, x2)); });
    std::thread c([&] { responses[2] = engine_->execute(two_sequences); });
    a.join();
    b.join();
    c.join();
    for (const absl::StatusOr<v1::ExecuteResponse>& response : responses) {
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_EQ(response->batch_size(), 1);
    }
    // The FFN has no attention: a request's ends change no row of its answer.
    EXPECT_EQ(responses[0]->outputs(0).tensor().data(), responses[2]->outputs(0).tensor().data());
}

TEST_F(EngineBatchingTest, PlansAreKeyedByTheirSequencesAndBatchInvariant) {
    register_ffn("ffn", batching({}, 0));
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 8;
    for (int64_t end : {2, 4, 6, 8}) {
        compile.add_sequence_ends(end);
    }
    absl::StatusOr<v1::CompileResponse> compiled = engine_->compile(compile);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_THAT(compiled->plan_key(), HasSubstr(" sequences=2*4"));

    v1::ExplainRequest explain;
    explain.set_model("ffn");
    (*explain.mutable_dims())["tokens"] = 8;
    absl::StatusOr<v1::ExplainResponse> explained = engine_->explain(explain);
    ASSERT_TRUE(explained.ok()) << explained.status();
    EXPECT_THAT(explained->text(), HasSubstr(" sequences=8"));
    EXPECT_THAT(explained->text(), HasSubstr("batch-invariant"));

    v1::ListModelsResponse models = engine_->list_models();
    ASSERT_EQ(models.models_size(), 1);
    EXPECT_EQ(models.models(0).batching().dimension(), "tokens");
    EXPECT_EQ(models.models(0).batching().max_batch_size(), BatchSpec::kDefaultMaxSize);
}

TEST_F(EngineBatchingTest, BadSequenceEndsAreRefusedNamingTheEntry) {
    register_ffn("ffn", batching({}, 0));
    const std::vector<float> x = random_values(4 * kModel, 1);
    auto with_ends = [&](std::vector<int64_t> ends) {
        v1::ExecuteRequest req = request("ffn", 4, x);
        for (int64_t end : ends) {
            req.add_sequence_ends(end);
        }
        return engine_->execute(req).status();
    };
    EXPECT_THAT(with_ends({2, 2, 4}).message(),
                HasSubstr("sequence_ends: entry 1 (2) must be greater than entry 0 (2)"));
    EXPECT_THAT(with_ends({0, 4}).message(),
                HasSubstr("sequence_ends: entry 0 (0) must be greater than 0"));
    EXPECT_THAT(with_ends({2, 5}).message(),
                HasSubstr("entry 1 (5) must be greater than entry 0 (2) and at most 'tokens' = 4"));
    EXPECT_THAT(with_ends({1, 3}).message(), HasSubstr("the last entry (3) must be 'tokens' = 4"));
    EXPECT_TRUE(with_ends({1, 4}).ok());

    ASSERT_TRUE(register_model("plain", kFfn, nullptr).ok());
    v1::ExecuteRequest plain = request("plain", 4, x);
    plain.set_model("plain");
    plain.add_sequence_ends(4);
    const absl::Status status = engine_->execute(plain).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("model 'plain' has no batching"));
}

// A bad request fails alone; the ones batched with it are answered.
TEST_F(EngineBatchingTest, ABadRequestFailsAloneBeforeItJoinsABatch) {
    register_ffn("ffn", batching({}, 300'000));
    const std::vector<float> x = random_values(3 * kModel, 1);
    v1::ExecuteRequest bad = request("ffn", 3, x);
    bad.mutable_inputs(0)->mutable_tensor()->set_data("short");
    absl::StatusOr<v1::ExecuteResponse> good = absl::UnknownError("not run");
    absl::Status failed;
    std::thread a([&] { good = engine_->execute(request("ffn", 3, x)); });
    std::thread b([&] { failed = engine_->execute(bad).status(); });
    a.join();
    b.join();
    ASSERT_TRUE(good.ok()) << good.status();
    EXPECT_EQ(good->batch_size(), 1);
    EXPECT_EQ(failed.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(failed.message(), HasSubstr("input 'x'"));
}

// Graphs that cannot batch along the declared dimension, refused at registration naming why.
TEST_F(EngineBatchingTest, TokenBucketsPadRequestsAndCutTheirAnswers) {
    v1::Batching wire = batching({}, 0);
    wire.mutable_buckets()->add_sizes(4);
    wire.mutable_buckets()->add_sizes(8);
    wire.mutable_buckets()->set_skip_warm_up(true); // every plan made on the request path
    register_ffn("bucketed", wire);
    const std::vector<v1::Batching> listed = [&] {
        std::vector<v1::Batching> out;
        const v1::ListModelsResponse models = engine_->list_models();
        for (const v1::ModelInfo& info : models.models()) {
            out.push_back(info.batching());
        }
        return out;
    }();
    ASSERT_EQ(listed.size(), 1u);
    EXPECT_THAT(listed[0].buckets().sizes(), ::testing::ElementsAre(4, 8));
    // 3 → 4 (the plan laying the weights out), 4 as it is, 5, 6 and 7 → 8 (6 and 7 rebuilt
    // from 5's plan), 9 above the largest bucket.
    for (int tokens : {3, 4, 5, 6, 7, 9}) {
        const std::vector<float> x = random_values(tokens * kModel, 30 + tokens);
        v1::ExecuteRequest req = request("bucketed", tokens, x);
        req.clear_dims(); // the input's shape binds tokens
        absl::StatusOr<v1::ExecuteResponse> got = engine_->execute(req);
        ASSERT_TRUE(got.ok()) << got.status();
        const v1::Tensor& y = got->outputs(0).tensor();
        EXPECT_THAT(y.shape(), ::testing::ElementsAre(tokens, kModel));
        const std::vector<float> values = as_floats(y.data());
        const std::vector<float> want = reference(x, w1_, w2_, tokens);
        ASSERT_EQ(values.size(), want.size());
        for (size_t e = 0; e < want.size(); ++e) {
            EXPECT_NEAR(values[e], want[e], 1e-5) << tokens << " tokens, element " << e;
        }
    }
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_bucket_tokens_total{model=\"bucketed\"} 34"));
    EXPECT_THAT(text, HasSubstr("einsummable_bucket_padding_tokens_total{model=\"bucketed\"} 7"));
    EXPECT_THAT(text, HasSubstr("einsummable_bucket_plan_rebuilds_total 2"));
}

TEST_F(EngineBatchingTest, TokenBucketsAreCheckedAtRegistration) {
    auto refused = [&](const v1::TokenBuckets& buckets) {
        v1::Batching wire = batching({}, 0);
        *wire.mutable_buckets() = buckets;
        const absl::Status status = register_model("m", kFfn, &wire);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
        return std::string(status.message());
    };
    v1::TokenBuckets decreasing;
    decreasing.add_sizes(8);
    decreasing.add_sizes(4);
    EXPECT_EQ(
        refused(decreasing),
        "model 'm': batching.buckets.sizes: 4 must be greater than 8 and at most 1099511627776");
    v1::TokenBuckets both = decreasing;
    both.set_growth(2);
    EXPECT_EQ(
        refused(both),
        "model 'm': batching.buckets: give sizes, or min_tokens, max_tokens and growth, not both");
    v1::TokenBuckets flat;
    flat.set_growth(1);
    EXPECT_EQ(refused(flat),
              "model 'm': batching.buckets.growth: 1 must be above 1 and at most 16 (0 = 1.25)");
    v1::TokenBuckets upside_down;
    upside_down.set_min_tokens(64);
    upside_down.set_max_tokens(32);
    EXPECT_THAT(refused(upside_down), HasSubstr("min_tokens 64 and max_tokens 32"));

    // The default: 16 to 4096, each 1.25 times the last rounded up; a growth of 1.5 rounds up
    // and ends at max_tokens.
    v1::Batching wire = batching({}, 0);
    wire.mutable_buckets()->set_skip_warm_up(true);
    ASSERT_TRUE(register_model("default", kFfn, &wire).ok());
    v1::TokenBuckets growth;
    growth.set_min_tokens(10);
    growth.set_max_tokens(30);
    growth.set_growth(1.5);
    growth.set_skip_warm_up(true);
    *wire.mutable_buckets() = growth;
    ASSERT_TRUE(register_model("growth", kFfn, &wire).ok());
    std::map<std::string, std::vector<int64_t>> sizes;
    const v1::ListModelsResponse models = engine_->list_models();
    for (const v1::ModelInfo& info : models.models()) {
        const auto& listed = info.batching().buckets().sizes();
        sizes[info.model()] = std::vector<int64_t>(listed.begin(), listed.end());
    }
    EXPECT_THAT(sizes["default"],
                ::testing::ElementsAre(16, 20, 25, 32, 40, 50, 63, 79, 99, 124, 155, 194, 243, 304,
                                       380, 475, 594, 743, 929, 1162, 1453, 1817, 2272, 2840, 3550,
                                       4096));
    EXPECT_THAT(sizes["growth"], ::testing::ElementsAre(10, 15, 23, 30));
}

// The model's state of warm-up as ListModels gives it.
v1::WarmUp warm_up_of(const Engine& engine, const std::string& model) {
    const v1::ListModelsResponse models = engine.list_models();
    for (const v1::ModelInfo& info : models.models()) {
        if (info.model() == model) {
            return info.warm_up();
        }
    }
    return v1::WarmUp();
}

TEST_F(EngineBatchingTest, BucketPlansCompileInTheBackgroundAndServeEveryLength) {
    v1::Batching wire = batching({}, 0);
    for (int64_t size : {4, 8, 16}) {
        wire.mutable_buckets()->add_sizes(size);
    }
    register_ffn("warm", wire);
    ASSERT_TRUE(einsummable::testing::eventually(
        [&] { return warm_up_of(*engine_, "warm").state() == v1::WarmUp::WARM_UP_DONE; },
        std::chrono::minutes(5)));
    const v1::WarmUp warm_up = warm_up_of(*engine_, "warm");
    EXPECT_THAT(warm_up.ready(), ::testing::ElementsAre(4, 8, 16));
    EXPECT_THAT(warm_up.pending(), ::testing::IsEmpty());
    EXPECT_EQ(engine_->server_info().warm_up_pending(), 0);
    // One plan per bucket, and bucket 4's again with two sequences: its first plan laid the
    // weights out, and the plans that read them resident are rebuilt from the second.
    EXPECT_EQ(engine_->compiles(), 4);
    // Every length up to the largest bucket: rebuilt from its bucket's plan, none compiled.
    for (int tokens : {1, 3, 4, 5, 11, 16}) {
        const std::vector<float> x = random_values(tokens * kModel, 50 + tokens);
        v1::ExecuteRequest req = request("warm", tokens, x);
        absl::StatusOr<v1::ExecuteResponse> got = engine_->execute(req);
        ASSERT_TRUE(got.ok()) << got.status();
        const std::vector<float> values = as_floats(got->outputs(0).tensor().data());
        const std::vector<float> want = reference(x, w1_, w2_, tokens);
        ASSERT_EQ(values.size(), want.size());
        for (size_t e = 0; e < want.size(); ++e) {
            EXPECT_NEAR(values[e], want[e], 1e-5) << tokens << " tokens, element " << e;
        }
    }
    EXPECT_EQ(engine_->compiles(), 4);
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_request_path_compiles_total 0"));
    EXPECT_THAT(text, HasSubstr("einsummable_warm_up_buckets{model=\"warm\",state=\"ready\"} 3"));
    EXPECT_THAT(text, HasSubstr("einsummable_warm_up_buckets{model=\"warm\",state=\"pending\"} 0"));
}

TEST_F(EngineBatchingTest, ARequestDuringWarmUpIsAnsweredWithoutACompileOfItsOwn) {
    v1::Batching wire = batching({}, 0);
    for (int64_t size : {4, 8, 16, 32}) {
        wire.mutable_buckets()->add_sizes(size);
    }
    register_ffn("warming", wire);
    // At once, while the warm-up runs: the request runs on a ready bucket that holds it, or waits
    // for (or makes) its own bucket's plan; its answer is the same.
    const std::vector<float> x = random_values(3 * kModel, 77);
    absl::StatusOr<v1::ExecuteResponse> got = engine_->execute(request("warming", 3, x));
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<float> values = as_floats(got->outputs(0).tensor().data());
    const std::vector<float> want = reference(x, w1_, w2_, 3);
    for (size_t e = 0; e < want.size(); ++e) {
        EXPECT_NEAR(values[e], want[e], 1e-5) << "element " << e;
    }
    ASSERT_TRUE(einsummable::testing::eventually(
        [&] { return warm_up_of(*engine_, "warming").state() == v1::WarmUp::WARM_UP_DONE; },
        std::chrono::minutes(5)));
    // One plan per bucket (and bucket 4's of two sequences) however the request met the
    // warm-up: it made bucket 4's plans itself at most, which the warm-up then found.
    EXPECT_EQ(engine_->compiles(), 5);
}

TEST_F(EngineBatchingTest, UnregisteringAModelStopsItsWarmUp) {
    v1::Batching wire = batching({}, 0);
    wire.mutable_buckets(); // the default: 16 to 4096, 26 plans
    register_ffn("brief", wire);
    const int64_t compiled_before = engine_->compiles();
    v1::UnregisterModelRequest unregister;
    unregister.set_model("brief");
    ASSERT_TRUE(engine_->unregister_model(unregister).ok());
    ASSERT_TRUE(einsummable::testing::eventually(
        [&] { return engine_->server_info().warm_up_pending() == 0; }));
    // At most the compile in flight at the unregister finished; nothing after it started.
    EXPECT_LE(engine_->compiles(), compiled_before + 1);
    EXPECT_THAT(metrics_->text(), ::testing::Not(HasSubstr("model=\"brief\"")));
}

TEST_F(EngineBatchingTest, AWarmUpStopsWhenThePlanCacheIsFull) {
    start_engine(/*plan_cache_entries=*/3);
    v1::Batching wire = batching({}, 0);
    for (int64_t size : {4, 8, 16}) {
        wire.mutable_buckets()->add_sizes(size);
    }
    register_ffn("crowded", wire);
    ASSERT_TRUE(einsummable::testing::eventually(
        [&] { return warm_up_of(*engine_, "crowded").state() == v1::WarmUp::WARM_UP_STOPPED; },
        std::chrono::minutes(5)));
    const v1::WarmUp warm_up = warm_up_of(*engine_, "crowded");
    EXPECT_THAT(warm_up.ready(), ::testing::ElementsAre(4, 8));
    EXPECT_THAT(warm_up.failed(), ::testing::ElementsAre(16));
    EXPECT_EQ(warm_up.message(), "stopped at bucket 16: the plan cache is full of bucket plans "
                                 "(--plan_cache_entries=3)");
    // Bucket 16 compiles when a request needs it (a request's plan is cached, then evicted: every
    // other plan is pinned).
    const std::vector<float> x = random_values(12 * kModel, 78);
    absl::StatusOr<v1::ExecuteResponse> got = engine_->execute(request("crowded", 12, x));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(engine_->compiles(), 4);
}

TEST_F(EngineBatchingTest, RegistrationRefusesWhatCannotBatch) {
    auto refused = [&](const std::string& graph, const v1::Batching& wire,
                       std::vector<std::string> weights = {}) {
        const absl::Status status = register_model("m", graph, &wire, weights);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
        return std::string(status.message());
    };
    v1::Batching other = batching({}, 0);
    other.set_dimension("batch");
    EXPECT_THAT(refused(kFfn, other, {"w1", "w2"}),
                HasSubstr("batching.dimension: 'batch' is not a symbol of the graph (symbols: "
                          "tokens)"));
    v1::Batching too_many = batching({2, 16}, 0);
    too_many.set_max_batch_size(8);
    EXPECT_THAT(refused(kFfn, too_many, {"w1", "w2"}),
                HasSubstr("batching.preferred_batch_size: 16 is larger than "
                          "batching.max_batch_size 8"));

    constexpr char kTokensSecond[] = R"pb(
      inputs {
        name: "x"
        dtype: F32
        dims { name: "d" fixed: 4 }
        dims { name: "tokens" symbol: "tokens" }
      }
      operators {
        name: "y"
        kind: "einsum"
        attributes {
          key: "equation"
          value { string_value: "ij->ji" }
        }
        inputs: "x"
      }
      saved: "y"
    )pb";
    EXPECT_THAT(refused(kTokensSecond, batching({}, 0)),
                HasSubstr("input 'x' must have the batch dimension 'tokens' first"));

    constexpr char kGram[] = R"pb(
      inputs {
        name: "x"
        dtype: F32
        dims { name: "tokens" symbol: "tokens" }
        dims { name: "d" fixed: 4 }
      }
      operators {
        name: "gram"
        kind: "einsum"
        attributes {
          key: "equation"
          value { string_value: "ti,tj->ij" }
        }
        inputs: [ "x", "x" ]
      }
      saved: "gram"
    )pb";
    EXPECT_THAT(refused(kGram, batching({}, 0)), HasSubstr("operator 'gram'"));

    constexpr char kOwnEnds[] = R"pb(
      inputs {
        name: "x"
        dtype: F32
        dims { name: "tokens" symbol: "tokens" }
        dims { name: "heads" fixed: 2 }
        dims { name: "d_head" fixed: 4 }
      }
      operators {
        name: "r"
        kind: "rope"
        attributes {
          key: "sequence_ends"
          value { int_list { values: [ 4 ] } }
        }
        inputs: "x"
      }
      saved: "r"
    )pb";
    EXPECT_THAT(refused(kOwnEnds, batching({}, 0)),
                HasSubstr("operator 'r' gives sequence_ends of its own"));

    constexpr char kWeightsOnly[] = R"pb(
      inputs {
        name: "x"
        dtype: F32
        dims { name: "tokens" symbol: "tokens" }
        dims { name: "d" fixed: 4 }
      }
      inputs {
        name: "w"
        dtype: F32
        dims { name: "d" fixed: 4 }
        dims { name: "e" fixed: 4 }
      }
      operators {
        name: "y"
        kind: "einsum"
        attributes {
          key: "equation"
          value { string_value: "ij,jk->ik" }
        }
        inputs: [ "x", "w" ]
      }
      operators {
        name: "wt"
        kind: "einsum"
        attributes {
          key: "equation"
          value { string_value: "ij->ji" }
        }
        inputs: "w"
      }
      saved: [ "y", "wt" ]
    )pb";
    EXPECT_THAT(refused(kWeightsOnly, batching({}, 0), {"w"}),
                HasSubstr("saved tensor 'wt' does not depend on the requests"));
    EXPECT_TRUE(engine_->list_models().models().empty());
}

} // namespace
} // namespace einsummable::server
