// server/generation_pool.h on the CPU backend: a tiny attention language model (embedding, q/k/v
// projections, RoPE, grouped-query causal attention, logits) generates on key/value caches the
// same tokens as the loop that recomputes the whole sequence every step — greedy and sampled,
// alone and many at once, more generations than slots (the rest wait for one), on several
// device counts — and a generation that fills its slot ends with "length", a cancelled one frees
// its slot, a prompt longer than a slot is refused.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
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

constexpr int kVocab = 11;
constexpr int64_t kPageSize = 4; // tokens per page of the pools' caches

// logits [tokens, vocab] of one attention layer over embedded ids, 2 query heads sharing 1 kv
// head of 4.
constexpr char kTinyLm[] = R"pb(
  inputs {
    name: "ids"
    dtype: I32
    dims { name: "tokens" symbol: "tokens" }
  }
  inputs {
    name: "table"
    dtype: F32
    dims { name: "vocab" fixed: 11 }
    dims { name: "d" fixed: 8 }
  }
  inputs {
    name: "wq"
    dtype: F32
    dims { name: "d" fixed: 8 }
    dims { name: "q_out" fixed: 8 }
  }
  inputs {
    name: "wk"
    dtype: F32
    dims { name: "d" fixed: 8 }
    dims { name: "kv_out" fixed: 4 }
  }
  inputs {
    name: "wv"
    dtype: F32
    dims { name: "d" fixed: 8 }
    dims { name: "kv_out" fixed: 4 }
  }
  inputs {
    name: "wo"
    dtype: F32
    dims { name: "q_out" fixed: 8 }
    dims { name: "vocab" fixed: 11 }
  }
  operators { name: "h" kind: "embedding" inputs: [ "table", "ids" ] }
  operators {
    name: "q"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "h", "wq" ]
  }
  operators {
    name: "k"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "h", "wk" ]
  }
  operators {
    name: "v"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "h", "wv" ]
  }
  operators {
    name: "q_heads"
    kind: "split_heads"
    attributes {
      key: "heads"
      value { int_value: 2 }
    }
    attributes {
      key: "heads_name"
      value { string_value: "heads_q" }
    }
    attributes {
      key: "head_dim_name"
      value { string_value: "d_head" }
    }
    inputs: [ "q" ]
  }
  operators {
    name: "k_heads"
    kind: "split_heads"
    attributes {
      key: "heads"
      value { int_value: 1 }
    }
    attributes {
      key: "heads_name"
      value { string_value: "heads_kv" }
    }
    attributes {
      key: "head_dim_name"
      value { string_value: "d_head" }
    }
    inputs: [ "k" ]
  }
  operators {
    name: "v_heads"
    kind: "split_heads"
    attributes {
      key: "heads"
      value { int_value: 1 }
    }
    attributes {
      key: "heads_name"
      value { string_value: "heads_kv" }
    }
    attributes {
      key: "head_dim_name"
      value { string_value: "d_head" }
    }
    inputs: [ "v" ]
  }
  operators { name: "q_rope" kind: "rope" inputs: [ "q_heads" ] }
  operators { name: "k_rope" kind: "rope" inputs: [ "k_heads" ] }
  operators {
    name: "attn"
    kind: "attention"
    attributes {
      key: "causal"
      value { bool_value: true }
    }
    inputs: [ "q_rope", "k_rope", "v_heads" ]
  }
  operators {
    name: "merged"
    kind: "merge_heads"
    attributes {
      key: "dim_name"
      value { string_value: "q_out" }
    }
    inputs: [ "attn" ]
  }
  operators {
    name: "logits"
    kind: "einsum"
    attributes {
      key: "equation"
      value { string_value: "ij,jk->ik" }
    }
    inputs: [ "merged", "wo" ]
  }
  saved: "logits"
)pb";

// The model's weights and their shapes.
const std::vector<std::pair<std::string, std::vector<int64_t>>> kWeights = {
    {"table", {kVocab, 8}}, {"wq", {8, 8}}, {"wk", {8, 4}}, {"wv", {8, 4}}, {"wo", {8, kVocab}}};

using Result = testing::Generated;

v1::GenerateRequest request(std::vector<int64_t> prompt, int max_tokens, uint64_t seed = 0,
                            int32_t top_k = 0) {
    v1::GenerateRequest req;
    req.set_model("lm");
    for (int64_t id : prompt) {
        req.add_prompt_ids(id);
    }
    req.set_max_tokens(max_tokens);
    if (seed != 0) {
        req.mutable_sampling()->set_temperature(1.0);
        req.mutable_sampling()->set_seed(seed);
        req.mutable_sampling()->set_top_k(top_k);
    }
    return req;
}

// An engine serving the tiny model with `slots` generations at once of up to `capacity` tokens
// (0 slots: the recomputing loop), their caches in pages of 4 tokens, on `devices` CPU devices.
class Server {
public:
    // `skip`: a weight not uploaded (upload() gives it later); `buckets`: the model's token
    // buckets; `cache_tokens`: the caches' tokens in all (0: slots × capacity); `prefill_plans`:
    // the prefill plans the pool keeps; `top_k`: the pairs per row its steps pick on the devices.
    Server(int64_t slots, int64_t capacity, int devices = 2, const std::string& skip = "",
           const std::vector<int64_t>& buckets = {}, int64_t cache_tokens = 0,
           int64_t prefill_plans = 16, int64_t top_k = 64) {
        EngineOptions options = testing::test_engine_options();
        options.generation_slots = slots;
        options.generation_capacity = capacity;
        options.generation_page_size = kPageSize;
        options.generation_cache_tokens = cache_tokens;
        options.generation_prefill_plans = prefill_plans;
        options.generation_top_k = top_k;
        options.topology = runtime::default_topology(devices);
        engine_ = std::make_unique<Engine>(options, runtime::cpu::make_cpu_backend({devices, 1}),
                                           nullptr, metrics_);
        v1::RegisterModelRequest req;
        req.set_model("lm");
        *req.mutable_graph() = *graphdef::parse_text(kTinyLm);
        for (const auto& [weight, shape] : kWeights) {
            req.add_weights(weight);
        }
        req.mutable_batching()->set_dimension("tokens");
        for (int64_t size : buckets) {
            req.mutable_batching()->mutable_buckets()->add_sizes(size);
            req.mutable_batching()->mutable_buckets()->set_skip_warm_up(true);
        }
        const auto registered = engine_->register_model(req);
        EXPECT_TRUE(registered.ok()) << registered.status();
        for (const auto& [weight, shape] : kWeights) {
            if (weight != skip) {
                upload(weight);
            }
        }
    }

    // The same values for `name` whenever it is uploaded.
    void upload(const std::string& name) {
        for (size_t w = 0; w < kWeights.size(); ++w) {
            const auto& [weight, shape] = kWeights[w];
            if (weight == name) {
                const absl::Status uploaded =
                    testing::upload_f32(*engine_, "lm", name,
                                        testing::random_values(shape[0] * shape[1], 11 + w), shape);
                EXPECT_TRUE(uploaded.ok()) << uploaded;
            }
        }
    }

    // `values` for weight `name`, of its shape.
    void upload_values(const std::string& name, const std::vector<float>& values) {
        for (const auto& [weight, shape] : kWeights) {
            if (weight == name) {
                const absl::Status uploaded =
                    testing::upload_f32(*engine_, "lm", name, values, shape);
                EXPECT_TRUE(uploaded.ok()) << uploaded;
            }
        }
    }

    Result run(const v1::GenerateRequest& req, int stop_after = -1) {
        return testing::run_generation(*engine_, req, stop_after);
    }

    // The pool of the model at the default options (made by a first generation).
    std::shared_ptr<GenerationPool> pool() {
        absl::StatusOr<std::shared_ptr<const Model>> model = engine_->find_model("lm");
        EXPECT_TRUE(model.ok());
        absl::StatusOr<GenerationInterface> interface = generation_interface(**model);
        EXPECT_TRUE(interface.ok());
        absl::StatusOr<std::shared_ptr<GenerationPool>> pool =
            engine_->generation_pools().find_or_create(*engine_, *model, *interface, {});
        EXPECT_TRUE(pool.ok()) << pool.status();
        return pool.ok() ? *pool : nullptr;
    }

    // Waits (up to 10 s) for the pool's slots and pages to empty: the stepping thread frees a
    // cancelled generation's slot and pages at its next round. The slots and pages in use then.
    std::pair<int64_t, int64_t> in_use_after_settling() {
        std::shared_ptr<GenerationPool> p = pool();
        for (int i = 0; i < 1000 && (p->slots_in_use() > 0 || p->pages_in_use() > 0); ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return {p->slots_in_use(), p->pages_in_use()};
    }

    Metrics& metrics() { return *metrics_; }

    // The logits [ids, vocab] of one Execute of the model on `ids`, and the resident memory its
    // plan read.
    std::pair<std::vector<float>, const runtime::ResidentWeights*>
    execute(const std::vector<int32_t>& ids) {
        v1::ExecuteRequest req;
        req.set_model("lm");
        v1::NamedTensor* input = req.add_inputs();
        input->set_name("ids");
        input->mutable_tensor()->set_dtype(v1::I32);
        input->mutable_tensor()->add_shape(static_cast<int64_t>(ids.size()));
        input->mutable_tensor()->set_data(
            std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
        req.add_outputs("logits");
        absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(req);
        EXPECT_TRUE(resp.ok()) << resp.status();
        if (!resp.ok()) {
            return {};
        }
        const runtime::ResidentWeights* resident = nullptr;
        for (const std::shared_ptr<CachedPlan>& entry : engine_->plan_cache().entries()) {
            if (entry->key.model == "lm" && entry->plan != nullptr) {
                resident = entry->plan->resident().get();
            }
        }
        return {testing::as_floats(resp->outputs(0).tensor().data()), resident};
    }
    v1::GetServerInfoResponse server_info() const { return engine_->server_info(); }

private:
    std::shared_ptr<Metrics> metrics_ = std::make_shared<Metrics>();
    std::unique_ptr<Engine> engine_;
};

const std::vector<std::vector<int64_t>> kPrompts = {
    {1}, {3, 7}, {2, 9, 4, 4, 10}, {5, 5, 5}, {0, 8, 6, 1, 2, 3, 9}, {10, 1}};

TEST(GenerationPool, TokensOnCachesEqualThoseOfTheRecomputingLoop) {
    Server recompute(0, 0);
    for (int devices : {1, 2, 4}) {
        Server cached(4, 32, devices);
        for (size_t i = 0; i < kPrompts.size(); ++i) {
            for (uint64_t seed : {uint64_t{0}, uint64_t{40 + i}}) {
                const Result expected = recompute.run(request(kPrompts[i], 12, seed));
                const Result got = cached.run(request(kPrompts[i], 12, seed));
                ASSERT_TRUE(expected.status.ok()) << expected.status;
                ASSERT_TRUE(got.status.ok()) << got.status;
                EXPECT_EQ(got.ids(), expected.ids())
                    << "prompt " << i << " seed " << seed << " on " << devices << " devices";
                EXPECT_EQ(got.tokens.back().finish_reason(), "length");
            }
        }
        EXPECT_EQ(cached.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
    }
}

// Top-k sampling reads the step's top_k pairs (k = the vocabulary's 11 here) — or, when the
// pool's k is below the request's, rows of logits — and either way gives the recomputing loop's
// tokens, which sample from whole rows.
TEST(GenerationPool, TopKSamplingFromTheStepsPairsEqualsSamplingFromRows) {
    Server recompute(0, 0);
    for (int64_t pool_k : {int64_t{64}, int64_t{2}}) {
        Server cached(4, 32, 2, "", {}, 0, 16, pool_k);
        for (size_t i = 0; i < kPrompts.size(); ++i) {
            for (int32_t top_k : {1, 3, 11}) {
                const uint64_t seed = 70 + i;
                const Result expected = recompute.run(request(kPrompts[i], 10, seed, top_k));
                const Result got = cached.run(request(kPrompts[i], 10, seed, top_k));
                ASSERT_TRUE(expected.status.ok()) << expected.status;
                ASSERT_TRUE(got.status.ok()) << got.status;
                EXPECT_EQ(got.ids(), expected.ids())
                    << "prompt " << i << ", top_k " << top_k << ", the pool's k " << pool_k;
            }
        }
        std::shared_ptr<GenerationPool> pool = cached.pool();
        const int64_t tokens = static_cast<int64_t>(kPrompts.size()) * 3 * 10;
        if (pool_k == 64) {
            EXPECT_EQ(pool->tokens_sampled_from_pairs(), tokens);
            EXPECT_EQ(pool->tokens_sampled_from_rows(), 0);
        } else { // top_k 1 from pairs; 3 and 11 are more than the pool's 2
            EXPECT_EQ(pool->tokens_sampled_from_pairs(), tokens / 3);
            EXPECT_EQ(pool->tokens_sampled_from_rows(), 2 * tokens / 3);
        }
    }
}

// The pool made before any Execute lays out the model's weights with its caches, for the
// model's Execute plans too: the weights are on the devices once. Made after an Execute laid
// them out alone, it keeps a copy of its own; either way its tokens are the same.
TEST(GenerationPool, SharesTheModelsWeightsWhenItLaysThemOut) {
    const std::vector<int32_t> ids = {3, 1, 4, 1, 5};
    Server pool_first(4, 32);
    const Result first = pool_first.run(request({2, 7}, 8));
    ASSERT_TRUE(first.status.ok()) << first.status;
    EXPECT_TRUE(pool_first.pool()->shares_weights());
    const auto [logits, resident] = pool_first.execute(ids);
    EXPECT_EQ(resident, pool_first.pool()->resident().get());

    Server execute_first(4, 32);
    const auto [expected, own] = execute_first.execute(ids);
    ASSERT_EQ(logits.size(), expected.size());
    for (size_t i = 0; i < logits.size(); ++i) {
        EXPECT_NEAR(logits[i], expected[i], 1e-5 * (1.0 + std::abs(expected[i]))) << i;
    }
    EXPECT_EQ(execute_first.run(request({2, 7}, 8)).ids(), first.ids());
    EXPECT_FALSE(execute_first.pool()->shares_weights());
    EXPECT_NE(execute_first.pool()->resident().get(), own);
}

TEST(GenerationPool, MoreGenerationsThanSlotsWaitAndEachEqualsItselfAlone) {
    Server alone(4, 32);
    Server together(3, 32);
    constexpr int kGenerations = 10;
    std::vector<Result> expected(kGenerations);
    for (int g = 0; g < kGenerations; ++g) {
        expected[g] = alone.run(request(kPrompts[g % kPrompts.size()], 6 + g, g % 2 ? 7 + g : 0));
    }
    std::vector<Result> results(kGenerations);
    std::vector<std::thread> threads;
    for (int g = 0; g < kGenerations; ++g) {
        threads.emplace_back([&, g] {
            results[g] =
                together.run(request(kPrompts[g % kPrompts.size()], 6 + g, g % 2 ? 7 + g : 0));
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int g = 0; g < kGenerations; ++g) {
        ASSERT_TRUE(results[g].status.ok()) << results[g].status;
        EXPECT_EQ(results[g].ids(), expected[g].ids()) << "generation " << g;
    }
    EXPECT_EQ(together.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
    const std::string text = together.metrics().text();
    EXPECT_THAT(text, HasSubstr("einsummable_generation_slots{model=\"lm\",state=\"free\"} 3"));
    EXPECT_THAT(text, HasSubstr("einsummable_decode_batch_size_count{model=\"lm\"}"));
    EXPECT_THAT(text, HasSubstr("einsummable_generation_pages{model=\"lm\",state=\"free\"} 24"));
    EXPECT_THAT(text, HasSubstr("einsummable_generation_pages{model=\"lm\",state=\"in_use\"} 0"));
    const v1::GetServerInfoResponse info = together.server_info();
    EXPECT_EQ(info.generation_slots(), 3);
    EXPECT_EQ(info.generation_capacity(), 32);
    EXPECT_EQ(info.generation_slots_in_use(), 0);
    EXPECT_EQ(info.generation_page_size(), kPageSize);
    EXPECT_EQ(info.generation_pages(), 3 * 32 / kPageSize);
    EXPECT_EQ(info.generation_pages_in_use(), 0);
    // The pool's device memory (its weights' copy, the caches, its plans' arenas) is counted.
    const std::vector<int64_t> pool_bytes = together.pool()->device_bytes();
    ASSERT_EQ(pool_bytes.size(), 2u);
    ASSERT_EQ(info.device_memory_bytes_size(), 2);
    for (int d = 0; d < 2; ++d) {
        EXPECT_GT(pool_bytes[d], 0) << "device " << d;
        EXPECT_GE(info.device_memory_bytes(d), pool_bytes[d]) << "device " << d;
    }
}

TEST(GenerationPool, AFullSlotEndsTheGenerationAndALongPromptIsRefused) {
    Server server(2, 8);
    // A prompt of 5 leaves 3 rows: the first token comes from the prefill and three decode
    // steps fill the slot, so four tokens, the last ending it.
    const Result full = server.run(request({1, 2, 3, 4, 5}, 20));
    ASSERT_TRUE(full.status.ok()) << full.status;
    ASSERT_EQ(full.tokens.size(), 4u);
    EXPECT_EQ(full.tokens.back().finish_reason(), "length");
    Server recompute(0, 0);
    EXPECT_EQ(full.ids(), recompute.run(request({1, 2, 3, 4, 5}, 4)).ids());

    const Result long_prompt = server.run(request({1, 2, 3, 4, 5, 6, 7, 8, 9}, 2));
    EXPECT_EQ(long_prompt.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(long_prompt.status.message(),
                HasSubstr("the prompt has 9 tokens, more than a generation's capacity of 8"));
    // An id outside the vocabulary ends that generation alone, named by position.
    const Result outside = server.run(request({1, kVocab + 3}, 2));
    EXPECT_EQ(outside.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(outside.status.message(), HasSubstr("position 1"));
    EXPECT_TRUE(server.run(request({1, 2}, 3)).status.ok());
    EXPECT_EQ(server.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
}

// A Generate before every weight is uploaded fails naming the weight; the pool is made by the
// first one after the upload (the failure is not remembered), and its tokens are the model's.
TEST(GenerationPool, AWeightNotUploadedYetIsNamedAndNotRemembered) {
    Server server(2, 16, 2, "wo");
    const Result early = server.run(request({1, 2}, 4));
    EXPECT_EQ(early.status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(early.status.message(), HasSubstr("weight 'wo' has not been uploaded"));
    server.upload("wo");
    const Result later = server.run(request({1, 2}, 4));
    ASSERT_TRUE(later.status.ok()) << later.status;
    Server recompute(0, 0);
    EXPECT_EQ(later.ids(), recompute.run(request({1, 2}, 4)).ids());
}

// Greedy tokens come from the step plan's argmax (ir::add_greedy_choice), sampled ones from its
// logits. A model whose logits hold NaN (here the output projection's columns for tokens 4 and
// 7) has no token to give: greedy and sampled generations fail naming the first NaN's id, on
// caches as in the recomputing loop, and the pool goes on serving once the weight is fixed.
TEST(GenerationPool, ANanLogitFailsTheGenerationNamingTheToken) {
    std::vector<float> wo = testing::random_values(8 * kVocab, 15);
    for (int row = 0; row < 8; ++row) {
        wo[row * kVocab + 4] = std::nanf("");
        wo[row * kVocab + 7] = std::nanf("");
    }
    for (int64_t slots : {int64_t{0}, int64_t{2}}) {
        Server server(slots, 16);
        server.upload_values("wo", wo);
        for (uint64_t seed : {uint64_t{0}, uint64_t{5}}) {
            const Result broken = server.run(request({1, 2}, 4, seed));
            EXPECT_EQ(broken.status.code(), absl::StatusCode::kInvalidArgument)
                << slots << " slots, seed " << seed;
            EXPECT_THAT(broken.status.message(), HasSubstr("the logit of token 4 is NaN"));
            EXPECT_TRUE(broken.tokens.empty());
        }
        server.upload("wo");
        Server recompute(0, 0);
        const Result fixed = server.run(request({1, 2}, 4));
        ASSERT_TRUE(fixed.status.ok()) << fixed.status;
        EXPECT_EQ(fixed.ids(), recompute.run(request({1, 2}, 4)).ids());
        if (slots > 0) {
            EXPECT_EQ(server.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
        }
    }
}

// Prompts are padded to the model's token buckets (the same plans' shapes as its Executes),
// above the largest bucket run at their own length, and without buckets to powers of two; the
// tokens are the recomputing loop's either way.
TEST(GenerationPool, PrefillsArePaddedToTheModelsTokenBuckets) {
    Server recompute(0, 0);
    Server bucketed(2, 16, 2, "", {3, 6});
    Server plain(2, 16);
    for (const std::vector<int64_t>& prompt :
         {std::vector<int64_t>{1, 2}, {3, 7, 1}, {2, 9, 4, 4}, {0, 8, 6, 1, 2, 3, 9}}) {
        const Result expected = recompute.run(request(prompt, 5));
        ASSERT_TRUE(expected.status.ok()) << expected.status;
        for (Server* server : {&bucketed, &plain}) {
            const Result got = server->run(request(prompt, 5));
            ASSERT_TRUE(got.status.ok()) << got.status;
            EXPECT_EQ(got.ids(), expected.ids()) << "prompt of " << prompt.size();
        }
    }
    EXPECT_EQ(bucketed.pool()->prefill_lengths(), (std::vector<int64_t>{3, 6, 7}));
    EXPECT_EQ(plain.pool()->prefill_lengths(), (std::vector<int64_t>{2, 4, 8}));
}

// Pages bound the generations at once: with 4 pages of 4 tokens, generations of a 2-token
// prompt and 6 tokens reserve 2 pages each, so no decode step of four slots advances more than
// two of them; the others wait for pages and still equal themselves alone. A generation that
// needs more pages than the pool holds is refused, naming its pages and the pool's.
TEST(GenerationPool, PagesBoundTheGenerationsAtOnceAndTooLargeOnesAreRefused) {
    Server alone(1, 16);
    Server paged(4, 16, 2, "", {}, 4 * kPageSize);
    constexpr int kGenerations = 6;
    std::vector<Result> results(kGenerations);
    std::vector<std::thread> threads;
    for (int g = 0; g < kGenerations; ++g) {
        threads.emplace_back([&, g] { results[g] = paged.run(request({g % kVocab, 3}, 6)); });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int g = 0; g < kGenerations; ++g) {
        ASSERT_TRUE(results[g].status.ok()) << results[g].status;
        EXPECT_EQ(results[g].ids(), alone.run(request({g % kVocab, 3}, 6)).ids())
            << "generation " << g;
    }
    EXPECT_EQ(paged.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
    const std::string text = paged.metrics().text();
    // Every decode step advanced at most two generations (the histogram's le="2" bucket holds
    // every step).
    const std::string steps = "einsummable_decode_batch_size_count{model=\"lm\"} ";
    const size_t at = text.find(steps);
    ASSERT_NE(at, std::string::npos) << text;
    const std::string count =
        text.substr(at + steps.size(), text.find('\n', at) - at - steps.size());
    EXPECT_THAT(text, HasSubstr(absl::StrCat(
                          "einsummable_decode_batch_size_bucket{model=\"lm\",le=\"2\"} ", count)));
    EXPECT_THAT(text, HasSubstr("einsummable_generation_pages{model=\"lm\",state=\"free\"} 4"));

    // 2 + 14 tokens: 4 pages fit; with 16 tokens' worth of max_tokens the capacity caps it.
    EXPECT_TRUE(paged.run(request({1, 2}, 14)).status.ok());
    EXPECT_TRUE(paged.run(request({1, 2}, 100)).status.ok());
    Server small(4, 16, 2, "", {}, 3 * kPageSize);
    const Result refused = small.run(request({1, 2}, 14));
    EXPECT_EQ(refused.status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status.message(),
                HasSubstr("the prompt's 2 tokens and max_tokens 14 need 4 pages of 4 tokens, "
                          "more than the 3"));
    EXPECT_TRUE(small.run(request({1, 2}, 10)).status.ok()) << "3 pages fit";
}

// Generations admitted in one round prefill in one step (their prompts padded to the longest,
// packed as sequences of one plan) and each equals itself alone; a prompt with an id outside the
// vocabulary in such a step ends only its own generation (the step runs again prompt by
// prompt). To have several admitted in one round, each attempt first sends a prompt of a new
// padded length, whose prefill plan compiles while the others arrive.
TEST(GenerationPool, PromptsAdmittedTogetherPrefillInOneStep) {
    Server alone(1, 32);
    Server server(8, 32);
    const std::vector<std::vector<int64_t>> prompts = {{1, 2}, {3}, {4, 5, 6}, {7, 8, 9, 10, 1}};
    std::vector<std::vector<int64_t>> expected;
    for (const std::vector<int64_t>& prompt : prompts) {
        expected.push_back(alone.run(request(prompt, 5)).ids());
    }
    for (int64_t attempt = 0; attempt < 4 && server.pool()->largest_prefill_batch() < 2;
         ++attempt) {
        // Prompts of 3, 5, 9 and 17 ids: padded to 4, 8, 16 and 32, a new plan each.
        std::vector<int64_t> opener(static_cast<size_t>((int64_t{2} << attempt) + 1), 2);
        std::thread first([&] { EXPECT_TRUE(server.run(request(opener, 2)).status.ok()); });
        std::vector<Result> results(prompts.size());
        std::vector<std::thread> threads;
        for (size_t g = 0; g < prompts.size(); ++g) {
            threads.emplace_back([&, g] { results[g] = server.run(request(prompts[g], 5)); });
        }
        first.join();
        for (std::thread& thread : threads) {
            thread.join();
        }
        for (size_t g = 0; g < prompts.size(); ++g) {
            ASSERT_TRUE(results[g].status.ok()) << results[g].status;
            EXPECT_EQ(results[g].ids(), expected[g]) << "attempt " << attempt << ", prompt " << g;
        }
    }
    EXPECT_GE(server.pool()->largest_prefill_batch(), 2);

    // One bad prompt among good ones.
    std::vector<Result> results(prompts.size() + 1);
    std::vector<std::thread> threads;
    for (size_t g = 0; g <= prompts.size(); ++g) {
        threads.emplace_back([&, g] {
            results[g] = server.run(g < prompts.size() ? request(prompts[g], 5)
                                                       : request({1, kVocab + 3, 2}, 5));
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (size_t g = 0; g < prompts.size(); ++g) {
        ASSERT_TRUE(results[g].status.ok()) << results[g].status;
        EXPECT_EQ(results[g].ids(), expected[g]) << "prompt " << g;
    }
    EXPECT_EQ(results.back().status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(results.back().status.message(), HasSubstr("position 1"));
    EXPECT_EQ(server.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
}

// The pool keeps at most its bound of prefill plans, dropping the least recently used: three
// prompt lengths through a bound of two leave two plans, and a prompt of the dropped length
// compiles its plan again and generates what it did.
TEST(GenerationPool, PrefillPlansPastTheBoundDropTheLeastRecentlyUsed) {
    Server server(2, 16, 2, "", {}, 0, /*prefill_plans=*/2);
    // Prompts of 1, 2 and 3 ids: prefill plans of lengths 1, 2 and 4.
    const std::vector<std::vector<int64_t>> prompts = {{3}, {3, 5}, {3, 5, 7}};
    std::vector<std::vector<int64_t>> first;
    for (const std::vector<int64_t>& prompt : prompts) {
        const Result result = server.run(request(prompt, 4));
        ASSERT_TRUE(result.status.ok()) << result.status;
        first.push_back(result.ids());
    }
    EXPECT_EQ(server.pool()->prefill_plans(), 2);
    EXPECT_EQ(server.pool()->prefill_lengths(), (std::vector<int64_t>{1, 2, 4}));
    // Length 1's plan was the least recently used: dropped, made again.
    EXPECT_EQ(server.run(request(prompts[0], 4)).ids(), first[0]);
    EXPECT_EQ(server.pool()->prefill_plans(), 2);
    EXPECT_EQ(server.run(request(prompts[2], 4)).ids(), first[2]);
    EXPECT_EQ(server.pool()->prefill_plans(), 2);
}

TEST(GenerationPool, ACancelledGenerationFreesItsSlot) {
    Server server(1, 64);
    const Result expected = server.run(request({4, 2}, 8));
    ASSERT_TRUE(expected.status.ok()) << expected.status;
    // The client goes away after 3 tokens: the one slot is free again for the next generation.
    const Result cut = server.run(request({1, 1, 1}, 30), 3);
    EXPECT_EQ(cut.status.code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(cut.tokens.size(), 3u);
    EXPECT_EQ(server.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
    EXPECT_EQ(server.run(request({4, 2}, 8)).ids(), expected.ids());
}

// A soak: 48 random generations on 6 threads through 3 slots, a third of them cut off by their
// client at a random token. No slot stays taken, and every generation that finished equals its
// replay alone, token for token.
TEST(GenerationPool, ASoakOfRandomGenerationsWithCancellationsLeaksNoSlot) {
    const uint64_t seed = 20261207;
    std::cout << "seed " << seed << "\n";
    struct Plan {
        std::vector<int64_t> prompt;
        int max_tokens;
        uint64_t sampling_seed;
        int stop_after; // -1: runs to its end
    };
    std::mt19937_64 rng(seed);
    std::vector<Plan> plans;
    for (int g = 0; g < 48; ++g) {
        Plan plan;
        const int length = std::uniform_int_distribution<int>(1, 9)(rng);
        for (int t = 0; t < length; ++t) {
            plan.prompt.push_back(std::uniform_int_distribution<int64_t>(0, kVocab - 1)(rng));
        }
        plan.max_tokens = std::uniform_int_distribution<int>(1, 20)(rng);
        plan.sampling_seed = g % 2 == 0 ? 0 : 100 + g;
        plan.stop_after = g % 3 == 0 ? std::uniform_int_distribution<int>(1, 4)(rng) : -1;
        plans.push_back(std::move(plan));
    }
    // 10 pages of 4 tokens: a generation reserves up to 6, so pages bound the generations at
    // once as often as the slots do.
    Server server(3, 24, 2, "", {}, 40);
    std::vector<Result> results(plans.size());
    std::atomic<size_t> next{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 6; ++t) {
        threads.emplace_back([&] {
            for (size_t g = next++; g < plans.size(); g = next++) {
                const Plan& plan = plans[g];
                results[g] = server.run(request(plan.prompt, plan.max_tokens, plan.sampling_seed),
                                        plan.stop_after);
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(server.in_use_after_settling(), std::make_pair(int64_t{0}, int64_t{0}));
    EXPECT_EQ(server.pool()->pages(), 10);
    Server replay(1, 24);
    int finished = 0;
    for (size_t g = 0; g < plans.size(); ++g) {
        const Plan& plan = plans[g];
        const Result alone = replay.run(request(plan.prompt, plan.max_tokens, plan.sampling_seed));
        ASSERT_TRUE(alone.status.ok()) << alone.status;
        // Cut off: its client left at its stop_after-th token (even a last one); the tokens it
        // got are the replay's first ones.
        if (plan.stop_after > 0 && static_cast<int>(alone.tokens.size()) >= plan.stop_after) {
            EXPECT_EQ(results[g].status.code(), absl::StatusCode::kCancelled) << "generation " << g;
            const std::vector<int64_t> all = alone.ids();
            EXPECT_EQ(results[g].ids(),
                      std::vector<int64_t>(all.begin(), all.begin() + plan.stop_after))
                << "generation " << g;
            continue;
        }
        ASSERT_TRUE(results[g].status.ok()) << "generation " << g << ": " << results[g].status;
        EXPECT_EQ(results[g].ids(), alone.ids()) << "generation " << g;
        ++finished;
    }
    EXPECT_GT(finished, 24);
}

} // namespace
} // namespace einsummable::server
