// server/sampling.h: Generate's choice of the next token — greedy argmax (lowest id on a tie; a
// NaN logit refused by id), seeded sampling with temperature, top-k and top-p — and the checks of
// the request's sampling fields. Random draws print their seed.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/sampling.h"

namespace einsummable::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

int64_t choose(const std::vector<float>& logits, const SamplingParams& params, uint64_t seed = 1) {
    std::mt19937_64 rng(seed);
    absl::StatusOr<int64_t> token = choose_token(logits, params, rng);
    EXPECT_TRUE(token.ok()) << token.status();
    return token.ok() ? *token : -1;
}

TEST(Sampling, GreedyTakesTheLargestLogitTheLowestIdOnATie) {
    const SamplingParams greedy;
    EXPECT_EQ(choose({0.1f, 3.0f, -2.0f, 2.9f}, greedy), 1);
    EXPECT_EQ(choose({1.0f, 5.0f, 5.0f, 0.0f}, greedy), 1);
    EXPECT_EQ(choose({-kInf, -kInf, -1e30f}, greedy), 2);
    EXPECT_EQ(choose({1.0f, kInf, 2.0f}, greedy), 1);
    std::mt19937_64 rng(1);
    for (const std::vector<float>& nothing : {std::vector<float>{}, {-kInf, -kInf}}) {
        absl::StatusOr<int64_t> token = choose_token(nothing, greedy, rng);
        EXPECT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(token.status().message(), HasSubstr("no finite value"));
    }
}

// A NaN logit means the model computed NaN: greedy and sampled choices both refuse the row,
// naming the first NaN's id (argmax ranks NaN above every number, so the device's greedy pair
// names the same id: greedy_token).
TEST(Sampling, ANanLogitIsRefusedNamingItsId) {
    std::mt19937_64 rng(1);
    for (const SamplingParams& params : {SamplingParams{}, SamplingParams{1.0, 0, 1.0, 7}}) {
        for (const std::vector<float>& row :
             {std::vector<float>{kNaN, 1.0f, kNaN, 2.0f}, {3.0f, kInf, kNaN}, {kNaN, kNaN}}) {
            absl::StatusOr<int64_t> token = choose_token(row, params, rng);
            ASSERT_EQ(token.status().code(), absl::StatusCode::kInvalidArgument);
            const size_t first =
                std::find_if(row.begin(), row.end(), [](float v) { return std::isnan(v); }) -
                row.begin();
            EXPECT_THAT(token.status().message(),
                        AllOf(HasSubstr(absl::StrCat("token ", first, " is NaN")),
                              HasSubstr("model computed NaN")));
        }
    }
    EXPECT_EQ(greedy_token(kNaN, 5, 10).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(greedy_token(-kInf, 0, 10).status().message(), HasSubstr("no finite value"));
    EXPECT_EQ(*greedy_token(1.5f, 3, 10), 3);
}

TEST(Sampling, TopKOfOneAndATinyTopPAreGreedy) {
    const std::vector<float> logits = {0.3f, 1.5f, 1.4f, -0.2f, 1.5f};
    for (uint64_t seed = 0; seed < 50; ++seed) {
        EXPECT_EQ(choose(logits, {2.0, 1, 1.0, seed}, seed), 1) << "seed " << seed;
        EXPECT_EQ(choose(logits, {2.0, 0, 1e-6, seed}, seed), 1) << "seed " << seed;
    }
}

TEST(Sampling, DrawsFollowTheTemperedSoftmaxCutToTopKAndTopP) {
    const uint64_t seed = 20261206;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    // Probabilities 0.5, 0.25, 0.125, 0.125 at temperature 1.
    const std::vector<float> logits = {std::log(0.5f), std::log(0.25f), std::log(0.125f),
                                       std::log(0.125f)};
    const int draws = 20000;
    auto frequencies = [&](const SamplingParams& params) {
        std::map<int64_t, double> counts;
        for (int i = 0; i < draws; ++i) {
            absl::StatusOr<int64_t> token = choose_token(logits, params, rng);
            EXPECT_TRUE(token.ok()) << token.status();
            counts[*token] += 1.0 / draws;
        }
        return counts;
    };
    std::map<int64_t, double> plain = frequencies({1.0, 0, 1.0, 0});
    EXPECT_NEAR(plain[0], 0.5, 0.02) << "seed " << seed;
    EXPECT_NEAR(plain[1], 0.25, 0.02) << "seed " << seed;
    EXPECT_NEAR(plain[2] + plain[3], 0.25, 0.02) << "seed " << seed;
    // Temperature 0.5 squares the odds: 0.5² : 0.25² : 0.125² : 0.125² = 16 : 4 : 1 : 1.
    std::map<int64_t, double> cold = frequencies({0.5, 0, 1.0, 0});
    EXPECT_NEAR(cold[0], 16.0 / 22.0, 0.02) << "seed " << seed;
    // top_k 2: tokens 0 and 1 only, renormalised 2 : 1.
    std::map<int64_t, double> top2 = frequencies({1.0, 2, 1.0, 0});
    EXPECT_EQ(top2.count(2) + top2.count(3), 0u) << "seed " << seed;
    EXPECT_NEAR(top2[0], 2.0 / 3.0, 0.02) << "seed " << seed;
    // top_p 0.7: 0.5 is short of it, 0.5 + 0.25 reaches it: tokens 0 and 1.
    std::map<int64_t, double> nucleus = frequencies({1.0, 0, 0.7, 0});
    EXPECT_EQ(nucleus.count(2) + nucleus.count(3), 0u) << "seed " << seed;
    EXPECT_NEAR(nucleus[1], 1.0 / 3.0, 0.02) << "seed " << seed;
}

TEST(Sampling, TheSameSeedDrawsTheSameTokens) {
    const std::vector<float> logits = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
    std::mt19937_64 a(42), b(42), c(43);
    std::vector<int64_t> first, second, other;
    for (int i = 0; i < 64; ++i) {
        first.push_back(*choose_token(logits, {1.0, 0, 1.0, 42}, a));
        second.push_back(*choose_token(logits, {1.0, 0, 1.0, 42}, b));
        other.push_back(*choose_token(logits, {1.0, 0, 1.0, 43}, c));
    }
    EXPECT_EQ(first, second);
    EXPECT_NE(first, other);
}

TEST(Sampling, TheRequestsFieldsAreCheckedByName) {
    v1::Sampling wire;
    EXPECT_TRUE(sampling_params(wire)->greedy());
    EXPECT_EQ(sampling_params(wire)->top_p, 1.0); // 0: unset
    wire.set_temperature(-0.5);
    EXPECT_THAT(sampling_params(wire).status().message(), HasSubstr("sampling.temperature"));
    wire.set_temperature(std::numeric_limits<double>::infinity());
    EXPECT_THAT(sampling_params(wire).status().message(), HasSubstr("sampling.temperature"));
    wire.set_temperature(0.7);
    wire.set_top_k(-1);
    EXPECT_THAT(sampling_params(wire).status().message(), HasSubstr("sampling.top_k is -1"));
    wire.set_top_k(5);
    wire.set_top_p(1.5);
    EXPECT_THAT(sampling_params(wire).status().message(), HasSubstr("sampling.top_p is 1.5"));
    wire.set_top_p(0.9);
    absl::StatusOr<SamplingParams> params = sampling_params(wire);
    ASSERT_TRUE(params.ok()) << params.status();
    EXPECT_EQ(params->top_k, 5);
    EXPECT_EQ(params->top_p, 0.9);
    EXPECT_FALSE(params->greedy());
}

// Top-k sampling from the top_k operator's pairs (what a decode step moves off the devices)
// gives the same tokens, errors and draws as sampling over the whole row: rows of few distinct
// values (ties), some with -inf, +inf or NaN, every top_k up to the pairs' k. Seeded, printed.
TEST(Sampling, TopPairsGiveTheSameTokensAsTheWholeRow) {
    const uint64_t seed = 20261207;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    constexpr int64_t kVocab = 40;
    constexpr int64_t kPairs = 8;
    absl::StatusOr<ir::OperatorPtr> top_k = ir::make_operator(
        "top_k", {{"k", kPairs}}, {ir::TensorType{ir::DType::f32, {{"vocab", kVocab}}}});
    ASSERT_TRUE(top_k.ok()) << top_k.status();
    const std::vector<float> palette = {-1.0f, 0.0f, 0.5f, 0.5f, 1.25f, 2.0f, 3.0f, -kInf};
    int sampled = 0;
    for (int trial = 0; trial < 300; ++trial) {
        std::vector<float> row(kVocab);
        for (float& v : row) {
            v = palette[rng() % palette.size()];
        }
        if (trial % 10 == 1) {
            row[rng() % kVocab] = kInf;
        }
        if (trial % 10 == 2) {
            row[rng() % kVocab] = kNaN;
        }
        if (trial % 25 == 3) {
            std::fill(row.begin(), row.end(), -kInf);
        }
        const ir::HostTensor x(ir::Box::from_shape({kVocab}),
                               std::vector<double>(row.begin(), row.end()));
        absl::StatusOr<std::vector<ir::HostTensor>> pairs = ir::execute_whole(**top_k, {x});
        ASSERT_TRUE(pairs.ok()) << pairs.status();
        const std::vector<float> pair_values((*pairs)[0].values().begin(),
                                             (*pairs)[0].values().end());
        const SamplingParams params{trial % 7 == 0 ? 0.0 : 0.3 + 0.2 * (trial % 5),
                                    static_cast<int32_t>(1 + trial % kPairs),
                                    trial % 3 == 0 ? 1.0 : 0.4 + 0.1 * (trial % 5),
                                    static_cast<uint64_t>(trial)};
        std::mt19937_64 whole_rng(params.seed);
        std::mt19937_64 pairs_rng(params.seed);
        for (int draw = 0; draw < 5; ++draw) {
            const absl::StatusOr<int64_t> want = choose_token(row, params, whole_rng);
            const absl::StatusOr<int64_t> got =
                choose_top_token(pair_values, kVocab, params, pairs_rng);
            ASSERT_EQ(got.status(), want.status()) << "trial " << trial;
            if (want.ok()) {
                ASSERT_EQ(*got, *want) << "trial " << trial << ", draw " << draw;
                sampled += params.greedy() ? 0 : 1;
            }
        }
    }
    EXPECT_GT(sampled, 500); // most trials drew, rather than failing alike
    std::mt19937_64 unused(1);
    EXPECT_EQ(choose_top_token({1.0f, 0.0f}, 4, {1.0, 2, 1.0, 0}, unused).status().code(),
              absl::StatusCode::kInternal);
}

} // namespace
} // namespace einsummable::server
