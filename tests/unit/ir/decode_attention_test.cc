// Decode-shaped attention (attention with key_ends): a few new queries per sequence against
// that sequence's longer run of keys, causal bottom-right. Its output equals the last rows of
// self-attention over the whole sequences; its key blocks, computed apart and combined by the
// log-sum-exp ⊕ in any order, give the same (flash-decoding); its specs split the keys of every
// sequence across devices and keep each query block with its own sequences' keys; what it
// refuses names the attribute, the input or the sequence. Random cases print their seed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "compiler/ir/ops/attention.h"
#include "compiler/ir/partial_block.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/attention_testing.h"

namespace einsummable::ir {
namespace {

using testing::combine_in_random_order;
using testing::ends_of;
using testing::gather_rows;
using ::testing::HasSubstr;
using testing::max_difference;

struct Heads {
    int64_t heads_q = 4;
    int64_t heads_kv = 2;
    int64_t head_dim = 5;
    int64_t value_dim = 3;
};

absl::StatusOr<OperatorPtr> make_attention(const Heads& heads, int64_t queries, int64_t keys,
                                           Attributes attributes) {
    TensorType q{DType::f64,
                 {{"sequence", queries}, {"heads_q", heads.heads_q}, {"d_head", heads.head_dim}}};
    TensorType k{DType::f64,
                 {{"keys", keys}, {"heads_kv", heads.heads_kv}, {"d_head", heads.head_dim}}};
    TensorType v{DType::f64,
                 {{"keys", keys}, {"heads_kv", heads.heads_kv}, {"d_v", heads.value_dim}}};
    return Attention::make(attributes, {q, k, v});
}

// Random sequences: each with a cache of earlier tokens (possibly none) and 1–3 new ones.
struct Batch {
    std::vector<int64_t> cached;
    std::vector<int64_t> fresh;
    std::vector<int64_t> total() const {
        std::vector<int64_t> lengths;
        for (size_t s = 0; s < cached.size(); ++s) {
            lengths.push_back(cached[s] + fresh[s]);
        }
        return lengths;
    }
};

Batch random_batch(std::mt19937_64& rng) {
    Batch batch;
    const int sequences = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int s = 0; s < sequences; ++s) {
        batch.cached.push_back(std::uniform_int_distribution<int64_t>(0, 70)(rng));
        batch.fresh.push_back(std::uniform_int_distribution<int64_t>(1, 3)(rng));
    }
    return batch;
}

TEST(DecodeAttention, EqualsTheLastRowsOfSelfAttentionOverTheWholeSequences) {
    const uint64_t seed = 20261206;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const Heads heads;
    for (int trial = 0; trial < 24; ++trial) {
        const Batch batch = random_batch(rng);
        const bool causal = trial % 3 != 2;
        const std::vector<int64_t> total_ends = ends_of(batch.total());
        const int64_t keys = total_ends.back();
        // Self-attention over every token of every sequence.
        absl::StatusOr<OperatorPtr> full =
            make_attention(heads, keys, keys, {{"causal", causal}, {"sequence_ends", total_ends}});
        ASSERT_TRUE(full.ok()) << full.status();
        std::vector<HostTensor> inputs;
        for (const TensorType& type : (*full)->input_types()) {
            inputs.push_back(HostTensor::random(type.box(), rng, -2.0, 2.0));
        }
        absl::StatusOr<std::vector<HostTensor>> expected_all = execute_whole(**full, inputs);
        ASSERT_TRUE(expected_all.ok()) << expected_all.status();

        // The new tokens' queries against every key.
        std::vector<int64_t> new_rows;
        for (size_t s = 0; s < batch.cached.size(); ++s) {
            for (int64_t t = 0; t < batch.fresh[s]; ++t) {
                new_rows.push_back(total_ends[s] - batch.fresh[s] + t);
            }
        }
        const int64_t queries = static_cast<int64_t>(new_rows.size());
        absl::StatusOr<OperatorPtr> decode =
            make_attention(heads, queries, keys,
                           {{"causal", causal},
                            {"sequence_ends", ends_of(batch.fresh)},
                            {"key_ends", total_ends}});
        ASSERT_TRUE(decode.ok()) << decode.status();
        const std::vector<HostTensor> decode_inputs = {gather_rows(inputs[0], new_rows), inputs[1],
                                                       inputs[2]};
        absl::StatusOr<std::vector<HostTensor>> got = execute_whole(**decode, decode_inputs);
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_LT(max_difference((*got)[0], gather_rows((*expected_all)[0], new_rows)), 1e-12)
            << "seed " << seed << ", trial " << trial << ", " << batch.cached.size()
            << " sequences, causal " << causal;

        // Every spec of up to 4 blocks per index (keys split: the ⊕ across devices) computes
        // the same, with the key blocks each query block reads combined by the spec.
        const std::vector<ShardableIndex> indices = (*decode)->shardable_indices();
        for (int draw = 0; draw < 6; ++draw) {
            IntervalRequest request;
            for (const ShardableIndex& index : indices) {
                const int64_t most = std::min<int64_t>(index.size, 4);
                const int64_t count = std::uniform_int_distribution<int64_t>(1, most)(rng);
                std::vector<int64_t> cuts = {0, index.size};
                while (static_cast<int64_t>(cuts.size()) < count + 1) {
                    const int64_t cut =
                        std::uniform_int_distribution<int64_t>(1, index.size - 1)(rng);
                    if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) {
                        cuts.push_back(cut);
                    }
                }
                std::sort(cuts.begin(), cuts.end());
                std::vector<Interval> intervals;
                for (size_t c = 0; c + 1 < cuts.size(); ++c) {
                    intervals.push_back({cuts[c], cuts[c + 1]});
                }
                request.push_back(intervals);
            }
            // kv heads split: each kv head block takes its query heads along (heads_q follows).
            absl::StatusOr<JoinAggSpec> spec = (*decode)->spec(request);
            ASSERT_TRUE(spec.ok()) << spec.status();
            absl::StatusOr<std::vector<HostTensor>> split =
                execute_spec(**decode, *spec, decode_inputs);
            ASSERT_TRUE(split.ok()) << split.status();
            EXPECT_LT(max_difference((*split)[0], (*got)[0]), 1e-12)
                << "seed " << seed << ", trial " << trial << ", draw " << draw;
        }
    }
}

TEST(DecodeAttention, KeyBlocksCombinedInAnyOrderGiveTheWholeCache) {
    const uint64_t seed = 7;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const Heads heads{2, 1, 4, 4};
    // Two sequences: 2 new tokens over 40 cached, 1 new over 9.
    absl::StatusOr<OperatorPtr> op = make_attention(heads, 3, 52,
                                                    {{"causal", true},
                                                     {"sequence_ends", std::vector<int64_t>{2, 3}},
                                                     {"key_ends", std::vector<int64_t>{42, 52}}});
    ASSERT_TRUE(op.ok()) << op.status();
    const auto& attention = dynamic_cast<const Attention&>(**op);
    std::vector<HostTensor> inputs;
    for (const TensorType& type : (*op)->input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng, -2.0, 2.0));
    }
    absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(**op, inputs);
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int trial = 0; trial < 10; ++trial) {
        std::vector<int64_t> bounds = {0, 52};
        for (int cut = 0; cut < 1 + trial % 5; ++cut) {
            bounds.push_back(std::uniform_int_distribution<int64_t>(1, 51)(rng));
        }
        std::sort(bounds.begin(), bounds.end());
        bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
        std::vector<PartialBlock> partials;
        for (size_t b = 0; b + 1 < bounds.size(); ++b) {
            std::vector<Interval> dims = inputs[1].box().dims();
            dims[0] = {bounds[b], bounds[b + 1]};
            std::vector<Interval> value_dims = inputs[2].box().dims();
            value_dims[0] = dims[0];
            absl::StatusOr<PartialBlock> partial = attention.compute_partial(
                inputs[0], inputs[1].slice(Box(dims)), inputs[2].slice(Box(value_dims)));
            ASSERT_TRUE(partial.ok()) << partial.status();
            partials.push_back(*std::move(partial));
        }
        absl::StatusOr<PartialBlock> combined = combine_in_random_order(std::move(partials), rng);
        ASSERT_TRUE(combined.ok()) << combined.status();
        EXPECT_LT(max_difference(combined->values, (*whole)[0]), 1e-12)
            << "seed " << seed << ", trial " << trial << ", " << bounds.size() - 1 << " key blocks";
    }
}

TEST(DecodeAttention, MasksBottomRightAndCountsThePairsItReads) {
    // One sequence, 3 queries over 10 keys: query i sees keys [0, 8 + i).
    absl::StatusOr<OperatorPtr> op = make_attention(
        Heads{1, 1, 2, 2}, 3, 10, {{"causal", true}, {"key_ends", std::vector<int64_t>{10}}});
    ASSERT_TRUE(op.ok()) << op.status();
    const auto& attention = dynamic_cast<const Attention&>(**op);
    EXPECT_EQ(attention.interacting_pairs({0, 3}, {0, 10}), 8 + 9 + 10);
    EXPECT_EQ(attention.interacting_pairs({0, 1}, {8, 10}), 0);
    EXPECT_EQ(attention.interacting_pairs({2, 3}, {8, 10}), 2);
    EXPECT_EQ(attention.interacting_pairs({0, 3}, {5, 9}), 3 + 4 + 4);
    EXPECT_FALSE(attention.interacts({0, 1}, {8, 10}));
    EXPECT_TRUE(attention.interacts({1, 2}, {8, 9}));

    // Packed: sequence 0 has 1 query over keys [0, 4); sequence 1 has 2 queries over [4, 12).
    absl::StatusOr<OperatorPtr> packed =
        make_attention(Heads{1, 1, 2, 2}, 3, 12,
                       {{"causal", false},
                        {"sequence_ends", std::vector<int64_t>{1, 3}},
                        {"key_ends", std::vector<int64_t>{4, 12}}});
    ASSERT_TRUE(packed.ok()) << packed.status();
    const auto& by_sequence = dynamic_cast<const Attention&>(**packed);
    EXPECT_EQ(by_sequence.interacting_pairs({0, 3}, {0, 12}), 4 + 2 * 8);
    EXPECT_FALSE(by_sequence.interacts({0, 1}, {4, 12}));
    EXPECT_FALSE(by_sequence.interacts({1, 3}, {0, 4}));
    // Queries cut at the sequence end: the planner's request is refined to cut the keys where
    // sequence 1's keys begin, so each query block reads only its own sequence's keys, and no
    // ⊕ is needed.
    const IntervalRequest refined =
        packed.value()->refine_request({{{0, 1}, {1, 3}}, {{0, 1}}, {{0, 12}}});
    EXPECT_EQ(refined[2], (std::vector<Interval>{{0, 4}, {4, 12}}));
    absl::StatusOr<JoinAggSpec> spec = packed.value()->spec(refined);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 2u);
    EXPECT_EQ(spec->functions[0].inputs[1][0], (Interval{0, 4}));
    EXPECT_EQ(spec->functions[1].inputs[1][0], (Interval{4, 12}));
    EXPECT_TRUE(by_sequence.holds_whole_sequences(spec->functions[0]));
    EXPECT_TRUE(by_sequence.holds_whole_sequences(spec->functions[1]));
    // Keys split inside sequence 1 as well: three functions, sequence 1's two combined by ⊕.
    absl::StatusOr<JoinAggSpec> split =
        packed.value()->spec({{{0, 3}}, {{0, 1}}, {{0, 4}, {4, 8}, {8, 12}}});
    ASSERT_TRUE(split.ok()) << split.status();
    EXPECT_EQ(split->functions.size(), 3u);
    EXPECT_FALSE(by_sequence.holds_whole_sequences(split->functions[1]));
}

// key_lengths: each sequence reads only the filled part of its key region. The result equals
// attention over the regions cut to their fills, for every split of the keys across devices;
// full regions equal no key_lengths at all.
TEST(DecodeAttention, KeyLengthsReadTheFilledPartOfEachRegion) {
    const uint64_t seed = 20261207;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const Heads heads{4, 2, 3, 2};
    // Three sequences of 1, 2 and 1 new tokens over regions of 12, 9 and 16 keys.
    const std::vector<int64_t> fresh = {1, 2, 1};
    const std::vector<int64_t> capacity = {12, 9, 16};
    for (const bool causal : {true, false}) {
        absl::StatusOr<OperatorPtr> op = make_attention(heads, 4, 37,
                                                        {{"causal", causal},
                                                         {"sequence_ends", ends_of(fresh)},
                                                         {"key_ends", ends_of(capacity)}});
        ASSERT_TRUE(op.ok()) << op.status();
        const TensorType lengths_type{DType::i64, {{"sequences", 3}}};
        std::vector<TensorType> types = (*op)->input_types();
        types.push_back(lengths_type);
        absl::StatusOr<OperatorPtr> filled = Attention::make((*op)->attributes(), types);
        ASSERT_TRUE(filled.ok()) << filled.status();
        EXPECT_TRUE(dynamic_cast<const Attention&>(**filled).has_key_lengths());
        std::vector<HostTensor> inputs;
        for (const TensorType& type : (*op)->input_types()) {
            inputs.push_back(HostTensor::random(type.box(), rng, -2.0, 2.0));
        }
        for (const std::vector<int64_t>& fills :
             {capacity, std::vector<int64_t>{3, 2, 16}, std::vector<int64_t>{12, 5, 1}}) {
            SCOPED_TRACE(::testing::PrintToString(fills) + (causal ? " causal" : ""));
            HostTensor lengths{Box({{0, 3}})};
            for (int s = 0; s < 3; ++s) {
                lengths.data()[s] = static_cast<double>(fills[s]);
            }
            // The regions cut to their fills.
            std::vector<int64_t> rows;
            int64_t begin = 0;
            for (int s = 0; s < 3; ++s) {
                for (int64_t key = 0; key < fills[s]; ++key) {
                    rows.push_back(begin + key);
                }
                begin += capacity[s];
            }
            absl::StatusOr<OperatorPtr> compact =
                make_attention(heads, 4, static_cast<int64_t>(rows.size()),
                               {{"causal", causal},
                                {"sequence_ends", ends_of(fresh)},
                                {"key_ends", ends_of(fills)}});
            ASSERT_TRUE(compact.ok()) << compact.status();
            absl::StatusOr<std::vector<HostTensor>> expected = execute_whole(
                **compact, {inputs[0], gather_rows(inputs[1], rows), gather_rows(inputs[2], rows)});
            ASSERT_TRUE(expected.ok()) << expected.status();
            const std::vector<HostTensor> with_lengths = {inputs[0], inputs[1], inputs[2], lengths};
            for (const IntervalRequest& request :
                 {IntervalRequest{{{0, 4}}, {{0, 2}}, {{0, 37}}},
                  IntervalRequest{
                      {{0, 4}}, {{0, 1}, {1, 2}}, {{0, 5}, {5, 20}, {20, 30}, {30, 37}}},
                  IntervalRequest{{{0, 1}, {1, 4}}, {{0, 2}}, {{0, 12}, {12, 37}}}}) {
                absl::StatusOr<JoinAggSpec> spec = (*filled)->spec(request);
                ASSERT_TRUE(spec.ok()) << spec.status();
                absl::StatusOr<std::vector<HostTensor>> got =
                    execute_spec(**filled, *spec, with_lengths);
                ASSERT_TRUE(got.ok()) << got.status();
                EXPECT_LT(max_difference((*got)[0], (*expected)[0]), 1e-12) << "seed " << seed;
            }
        }
    }
}

// key_ends ending before k's last row: the rows after the last region are read by no query —
// NaN there changes nothing — for every split, the result that of the keys cut to the regions.
TEST(DecodeAttention, KeysAfterTheLastRegionAreReadByNoQuery) {
    const uint64_t seed = 20261208;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const Heads heads{4, 2, 3, 2};
    const std::vector<int64_t> fresh = {1, 2};
    const std::vector<int64_t> capacity = {6, 5};
    for (const bool causal : {true, false}) {
        absl::StatusOr<OperatorPtr> op = make_attention(heads, 3, 20,
                                                        {{"causal", causal},
                                                         {"sequence_ends", ends_of(fresh)},
                                                         {"key_ends", ends_of(capacity)}});
        ASSERT_TRUE(op.ok()) << op.status();
        std::vector<HostTensor> inputs;
        for (const TensorType& type : (*op)->input_types()) {
            inputs.push_back(HostTensor::random(type.box(), rng, -2.0, 2.0));
        }
        const int64_t width_k = inputs[1].size() / 20;
        const int64_t width_v = inputs[2].size() / 20;
        for (int64_t row = 11; row < 20; ++row) {
            std::fill_n(inputs[1].data() + row * width_k, width_k,
                        std::numeric_limits<double>::quiet_NaN());
            std::fill_n(inputs[2].data() + row * width_v, width_v,
                        std::numeric_limits<double>::quiet_NaN());
        }
        std::vector<int64_t> rows(11);
        std::iota(rows.begin(), rows.end(), 0);
        absl::StatusOr<OperatorPtr> compact = make_attention(heads, 3, 11,
                                                             {{"causal", causal},
                                                              {"sequence_ends", ends_of(fresh)},
                                                              {"key_ends", ends_of(capacity)}});
        ASSERT_TRUE(compact.ok()) << compact.status();
        absl::StatusOr<std::vector<HostTensor>> expected = execute_whole(
            **compact, {inputs[0], gather_rows(inputs[1], rows), gather_rows(inputs[2], rows)});
        ASSERT_TRUE(expected.ok()) << expected.status();
        for (const IntervalRequest& request :
             {IntervalRequest{{{0, 3}}, {{0, 2}}, {{0, 20}}},
              IntervalRequest{{{0, 3}}, {{0, 1}, {1, 2}}, {{0, 4}, {4, 11}, {11, 16}, {16, 20}}},
              IntervalRequest{{{0, 1}, {1, 3}}, {{0, 2}}, {{0, 6}, {6, 20}}},
              IntervalRequest{{{0, 1}, {1, 3}}, {{0, 2}}, {{0, 10}, {10, 20}}}}) {
            absl::StatusOr<JoinAggSpec> spec = (*op)->spec(request);
            ASSERT_TRUE(spec.ok()) << spec.status();
            absl::StatusOr<std::vector<HostTensor>> got = execute_spec(**op, *spec, inputs);
            ASSERT_TRUE(got.ok()) << got.status();
            EXPECT_LT(max_difference((*got)[0], (*expected)[0]), 1e-12)
                << (causal ? "causal " : "") << "seed " << seed;
            const HostTensor& out = (*got)[0];
            EXPECT_TRUE(std::all_of(out.data(), out.data() + out.size(), [](double x) {
                return std::isfinite(x);
            })) << "a NaN key after the regions was read";
        }
    }
}

TEST(DecodeAttention, KeyLengthsAreCheckedAgainstTheRegionsNamingTheSequence) {
    const Heads heads;
    const std::vector<int64_t> query_ends = {1, 3};
    const std::vector<int64_t> key_ends = {6, 10};
    TensorType q{DType::f64, {{"sequence", 3}, {"heads_q", 4}, {"d_head", 5}}};
    TensorType k{DType::f64, {{"keys", 10}, {"heads_kv", 2}, {"d_head", 5}}};
    TensorType v{DType::f64, {{"keys", 10}, {"heads_kv", 2}, {"d_v", 3}}};
    const TensorType lengths{DType::i32, {{"sequences", 2}}};
    EXPECT_THAT(
        Attention::make({{"sequence_ends", query_ends}}, {q, k, v, lengths}).status().message(),
        HasSubstr("give key_ends"));
    EXPECT_THAT(Attention::make({{"sequence_ends", query_ends}, {"key_ends", key_ends}},
                                {q, k, v, TensorType{DType::i32, {{"sequences", 3}}}})
                    .status()
                    .message(),
                HasSubstr("one per sequence (2)"));
    absl::StatusOr<OperatorPtr> op =
        Attention::make({{"causal", true}, {"sequence_ends", query_ends}, {"key_ends", key_ends}},
                        {q, k, v, lengths});
    ASSERT_TRUE(op.ok()) << op.status();
    auto check = [&](std::vector<int32_t> fills) {
        return (*op)->check_input_values(
            3, {reinterpret_cast<const std::byte*>(fills.data()), fills.size() * 4});
    };
    EXPECT_TRUE(check({6, 4}).ok());
    EXPECT_TRUE(check({1, 2}).ok());
    EXPECT_THAT(check({7, 4}).message(),
                HasSubstr("key_lengths[0] = 7 is outside [0, 6], sequence 0's key region"));
    EXPECT_THAT(check({3, -1}).message(), HasSubstr("key_lengths[1] = -1"));
    EXPECT_THAT(check({3, 1}).message(),
                HasSubstr("key_lengths[1] = 1 is under sequence 1's 2 queries"));
}

TEST(DecodeAttention, RefusesWhatItCannotComputeNamingTheCulprit) {
    const Heads heads;
    // k and v disagree on the keys.
    TensorType q{DType::f64, {{"sequence", 2}, {"heads_q", 4}, {"d_head", 5}}};
    TensorType k{DType::f64, {{"keys", 9}, {"heads_kv", 2}, {"d_head", 5}}};
    TensorType v{DType::f64, {{"cache", 8}, {"heads_kv", 2}, {"d_v", 3}}};
    absl::StatusOr<OperatorPtr> mismatch =
        Attention::make({{"key_ends", std::vector<int64_t>{9}}}, {q, k, v});
    EXPECT_THAT(mismatch.status().message(), HasSubstr("dimension 0 ('cache') is 8"));
    EXPECT_THAT(mismatch.status().message(), HasSubstr("k's keys are 9"));

    // Without key_ends the keys must be the queries' rows, and the error says what to give.
    absl::StatusOr<OperatorPtr> no_ends = make_attention(heads, 2, 9, {});
    EXPECT_THAT(no_ends.status().message(), HasSubstr("give key_ends"));

    absl::StatusOr<OperatorPtr> count = make_attention(
        heads, 3, 9,
        {{"sequence_ends", std::vector<int64_t>{1, 3}}, {"key_ends", std::vector<int64_t>{9}}});
    EXPECT_THAT(count.status().message(), HasSubstr("key_ends has 1 entries and sequence_ends 2"));

    absl::StatusOr<OperatorPtr> long_ends =
        make_attention(heads, 2, 9, {{"key_ends", std::vector<int64_t>{10}}});
    EXPECT_THAT(long_ends.status().message(),
                HasSubstr("key_ends[0] = 10 is out of range: ends must lie in (0, 9]"));

    // Causal (bottom-right) needs as many keys as queries in each sequence.
    absl::StatusOr<OperatorPtr> too_few =
        make_attention(heads, 5, 9,
                       {{"causal", true},
                        {"sequence_ends", std::vector<int64_t>{1, 5}},
                        {"key_ends", std::vector<int64_t>{6, 9}}});
    EXPECT_THAT(too_few.status().message(), HasSubstr("sequence 1 has 4 queries and only 3 keys"));
    // Not causal: fewer keys than queries is fine.
    EXPECT_TRUE(make_attention(heads, 5, 9,
                               {{"sequence_ends", std::vector<int64_t>{1, 5}},
                                {"key_ends", std::vector<int64_t>{6, 9}}})
                    .ok());
}

} // namespace
} // namespace einsummable::ir
