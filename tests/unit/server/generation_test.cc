// server/generation.h on the CPU backend: a bigram model (logits = the row of a table that the
// last token selects) generates the chain of argmaxes greedily, stops at a stop id, samples the
// same tokens from the same seed, batches concurrent generations without changing them, and
// refuses what it cannot run naming the field, the model's tensor or the id's position.
#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "server/generation.h"
#include "tests/unit/server/generation_run.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 7;

// logits [tokens, vocab] = table[ids]: the next token's logits depend on the last token alone.
constexpr char kBigram[] = R"pb(
  inputs {
    name: "ids"
    dtype: I32
    dims { name: "tokens" symbol: "tokens" }
  }
  inputs {
    name: "table"
    dtype: F32
    dims { name: "vocab" fixed: 7 }
    dims { name: "next" fixed: 7 }
  }
  operators { name: "logits" kind: "embedding" inputs: [ "table", "ids" ] }
  saved: "logits"
)pb";

class GenerationTest : public ::testing::Test {
protected:
    void SetUp() override {
        engine_ =
            std::make_unique<Engine>(testing::test_engine_options(),
                                     runtime::cpu::make_cpu_backend({2, 1}), nullptr, metrics_);
        v1::Batching batching;
        batching.set_dimension("tokens");
        batching.set_max_queue_delay_us(2000);
        ASSERT_TRUE(register_bigram("bigram", &batching).ok());
    }

    absl::Status register_bigram(const std::string& name, const v1::Batching* batching) {
        v1::RegisterModelRequest req;
        req.set_model(name);
        absl::StatusOr<v1::GraphDef> graph = graphdef::parse_text(kBigram);
        if (!graph.ok()) {
            return graph.status();
        }
        *req.mutable_graph() = *graph;
        req.add_weights("table");
        if (batching != nullptr) {
            *req.mutable_batching() = *batching;
        }
        absl::Status registered = engine_->register_model(req).status();
        if (!registered.ok()) {
            return registered;
        }
        return testing::upload_f32(*engine_, name, "table", table_, {kVocab, kVocab});
    }

    // The greedy chain from `last`: each next token is its row's argmax.
    std::vector<int64_t> greedy_chain(int64_t last, int count) const {
        std::vector<int64_t> chain;
        for (int i = 0; i < count; ++i) {
            const float* row = table_.data() + last * kVocab;
            last = std::max_element(row, row + kVocab) - row;
            chain.push_back(last);
        }
        return chain;
    }

    using Result = testing::Generated;

    Result run(const v1::GenerateRequest& req, int stop_after = -1) {
        return testing::run_generation(*engine_, req, stop_after);
    }

    static v1::GenerateRequest request(std::vector<int64_t> prompt, int max_tokens,
                                       const std::string& model = "bigram") {
        v1::GenerateRequest req;
        req.set_model(model);
        for (int64_t id : prompt) {
            req.add_prompt_ids(id);
        }
        req.set_max_tokens(max_tokens);
        return req;
    }

    std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
    std::unique_ptr<Engine> engine_;
    std::vector<float> table_ = testing::random_values(kVocab * kVocab, 5);
};

TEST_F(GenerationTest, GreedyFollowsTheArgmaxChainAndSaysWhyItEnded) {
    const Result result = run(request({2, 4}, 10));
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.ids(), greedy_chain(4, 10));
    for (int i = 0; i < 10; ++i) {
        EXPECT_EQ(result.tokens[i].index(), i);
        EXPECT_EQ(result.tokens[i].finish_reason(), i == 9 ? "length" : "");
        EXPECT_GT(result.tokens[i].seconds(), 0.0);
    }
    // Every token counted; the first timed from the start, the other nine from the one before.
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_generated_tokens_total{model=\"bigram\"} 10"));
    EXPECT_THAT(text,
                HasSubstr("einsummable_time_to_first_token_seconds_count{model=\"bigram\"} 1"));
    EXPECT_THAT(text, HasSubstr("einsummable_inter_token_seconds_count{model=\"bigram\"} 9"));
}

TEST_F(GenerationTest, AStopIdEndsTheGenerationAfterItIsStreamed) {
    const std::vector<int64_t> chain = greedy_chain(3, 10);
    v1::GenerateRequest req = request({3}, 10);
    req.add_stop_ids(chain[2]);
    req.add_stop_ids(kVocab + 5); // never produced
    const Result result = run(req);
    ASSERT_TRUE(result.status.ok()) << result.status;
    // The chain may reach the stop id before its third token.
    const size_t first = std::find(chain.begin(), chain.end(), chain[2]) - chain.begin();
    EXPECT_EQ(result.ids(), std::vector<int64_t>(chain.begin(), chain.begin() + first + 1));
    EXPECT_EQ(result.tokens.back().finish_reason(), "stop");
}

TEST_F(GenerationTest, SamplingIsSeededAndTopKOfOneIsGreedy) {
    v1::GenerateRequest req = request({1}, 12);
    req.mutable_sampling()->set_temperature(1.5);
    req.mutable_sampling()->set_seed(99);
    const Result first = run(req);
    const Result again = run(req);
    ASSERT_TRUE(first.status.ok()) << first.status;
    EXPECT_EQ(first.ids(), again.ids());
    EXPECT_NE(first.ids(), greedy_chain(1, 12)); // seed 99 leaves the chain somewhere
    req.mutable_sampling()->set_top_k(1);
    EXPECT_EQ(run(req).ids(), greedy_chain(1, 12));
}

TEST_F(GenerationTest, ConcurrentGenerationsBatchWithoutChangingTheirTokens) {
    std::vector<Result> results(4);
    std::vector<std::thread> threads;
    for (int i = 0; i < 4; ++i) {
        threads.emplace_back([&, i] { results[i] = run(request({i, (i + 3) % kVocab}, 8)); });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(results[i].status.ok()) << results[i].status;
        EXPECT_EQ(results[i].ids(), greedy_chain((i + 3) % kVocab, 8)) << "generation " << i;
    }
}

TEST_F(GenerationTest, WhatCannotRunIsRefusedNamingTheCulprit) {
    EXPECT_THAT(run(request({}, 4)).status.message(), HasSubstr("prompt_ids is empty"));
    EXPECT_THAT(run(request({1}, kMaxGenerateTokens + 1)).status.message(),
                HasSubstr("max_tokens is 4097"));
    v1::GenerateRequest hot = request({1}, 4);
    hot.mutable_sampling()->set_temperature(-1.0);
    EXPECT_THAT(run(hot).status.message(), HasSubstr("sampling.temperature"));
    EXPECT_EQ(run(request({1}, 4, "nope")).status.code(), absl::StatusCode::kNotFound);
    // An id outside the table: the embedding's check names it and its position.
    const Result outside = run(request({1, kVocab + 2}, 4));
    EXPECT_EQ(outside.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(outside.status.message(), HasSubstr("9"));
    EXPECT_THAT(outside.status.message(), HasSubstr("position 1"));
    // An id past int32 would wrap into a valid id of the i32 input: refused by name.
    EXPECT_THAT(run(request({1, (int64_t{1} << 32) + 3}, 4)).status.message(),
                HasSubstr("prompt_ids[1] = 4294967299 does not fit the model's i32 input 'ids'"));
    // A model without batching, and one whose input is not token ids.
    ASSERT_TRUE(register_bigram("plain", nullptr).ok());
    EXPECT_THAT(run(request({1}, 4, "plain")).status.message(), HasSubstr("has no batching"));
    v1::RegisterModelRequest ffn;
    ffn.set_model("ffn");
    *ffn.mutable_graph() = *graphdef::parse_text(testing::kFfn);
    ffn.add_weights("w1");
    ffn.add_weights("w2");
    ffn.mutable_batching()->set_dimension("tokens");
    ASSERT_TRUE(engine_->register_model(ffn).ok());
    EXPECT_THAT(run(request({1}, 4, "ffn")).status.message(),
                HasSubstr("input 'x' is f32 of rank 2; Generate feeds token ids"));
}

TEST_F(GenerationTest, AClientThatGoesAwayEndsTheGeneration) {
    const Result result = run(request({2}, 10), /*stop_after=*/3);
    EXPECT_EQ(result.status.code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(result.tokens.size(), 3u);
    absl::Status cancelled = generate(
        *engine_, request({2}, 10), [] { return absl::CancelledError("deadline"); },
        [](const v1::GenerateResponse&) { return true; });
    EXPECT_EQ(cancelled.code(), absl::StatusCode::kCancelled);
}

} // namespace
} // namespace einsummable::server
