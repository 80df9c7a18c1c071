// Paged attention (attribute page_size, input page_table): k and v are a pool of pages shared by
// the sequences, and sequence s's key j is row table[s][j / page_size] · page_size + j mod
// page_size. Its output equals the same attention over each sequence's keys laid out in one
// region (key_ends with key_lengths) for every split of queries, heads and pool rows — a key
// block may cut a page — and its key blocks combine by the ⊕ in any order; rows of no sequence's
// pages are read by no query; what it refuses names the attribute, the input, the sequence or
// the table entry. Random cases print their seed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
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

constexpr int64_t kHeadsQ = 4;
constexpr int64_t kHeadsKv = 2;
constexpr int64_t kHeadDim = 5;
constexpr int64_t kValueDim = 3;

std::vector<TensorType> qkv_types(int64_t queries, int64_t keys) {
    return {
        TensorType{DType::f64, {{"sequence", queries}, {"heads_q", kHeadsQ}, {"d_head", kHeadDim}}},
        TensorType{DType::f64, {{"keys", keys}, {"heads_kv", kHeadsKv}, {"d_head", kHeadDim}}},
        TensorType{DType::f64, {{"keys", keys}, {"heads_kv", kHeadsKv}, {"d_v", kValueDim}}}};
}

absl::StatusOr<OperatorPtr> make_paged(const std::vector<int64_t>& fresh, int64_t pool_pages,
                                       int64_t page_size, int64_t pages_per_sequence, bool causal,
                                       DType table_dtype = DType::i32) {
    std::vector<TensorType> types = qkv_types(ends_of(fresh).back(), pool_pages * page_size);
    const int64_t sequences = static_cast<int64_t>(fresh.size());
    types.push_back(TensorType{DType::i64, {{"sequences", sequences}}});
    types.push_back(
        TensorType{table_dtype, {{"sequences", sequences}, {"pages", pages_per_sequence}}});
    return Attention::make(
        {{"causal", causal}, {"sequence_ends", ends_of(fresh)}, {"page_size", page_size}}, types);
}

// `values` as a tensor of `rows` rows (0: a vector).
HostTensor values_tensor(const std::vector<int64_t>& values, int64_t rows = 0) {
    const int64_t size = static_cast<int64_t>(values.size());
    HostTensor tensor{rows == 0 ? Box({{0, size}}) : Box({{0, rows}, {0, size / rows}})};
    for (size_t idx = 0; idx < values.size(); ++idx) {
        tensor.data()[idx] = static_cast<double>(values[idx]);
    }
    return tensor;
}

// A random pool: each sequence gets its pages from a shuffled pool, unused pages keep NaN keys
// and values (no query may read them), and the table's entries past a sequence's pages point at
// random pages (read by no one).
struct Case {
    std::vector<int64_t> fresh;
    std::vector<int64_t> fills;
    int64_t page_size = 0;
    int64_t pages_per_sequence = 0;
    int64_t pool_pages = 0;
    std::vector<int64_t> table;        // [sequences · pages_per_sequence]
    std::vector<int64_t> rows_of_keys; // every sequence's keys' rows, in order
};

Case random_case(std::mt19937_64& rng, bool causal) {
    Case c;
    c.page_size = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    c.pages_per_sequence = std::uniform_int_distribution<int64_t>(2, 6)(rng);
    const int sequences = std::uniform_int_distribution<int>(1, 4)(rng);
    const int64_t capacity = c.page_size * c.pages_per_sequence;
    for (int s = 0; s < sequences; ++s) {
        const int64_t fresh =
            std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(3, capacity))(rng);
        c.fresh.push_back(fresh);
        c.fills.push_back(
            std::uniform_int_distribution<int64_t>(causal ? fresh : 0, capacity)(rng));
    }
    c.pool_pages = sequences * c.pages_per_sequence + 3;
    std::vector<int64_t> free(static_cast<size_t>(c.pool_pages));
    std::iota(free.begin(), free.end(), 0);
    std::shuffle(free.begin(), free.end(), rng);
    for (int s = 0; s < sequences; ++s) {
        const int64_t used = (c.fills[s] + c.page_size - 1) / c.page_size;
        for (int64_t p = 0; p < c.pages_per_sequence; ++p) {
            if (p < used) {
                c.table.push_back(free.back());
                free.pop_back();
            } else {
                c.table.push_back(std::uniform_int_distribution<int64_t>(0, c.pool_pages - 1)(rng));
            }
        }
        for (int64_t j = 0; j < c.fills[s]; ++j) {
            c.rows_of_keys.push_back(
                c.table[static_cast<size_t>(s * c.pages_per_sequence + j / c.page_size)] *
                    c.page_size +
                j % c.page_size);
        }
    }
    return c;
}

// The pool's rows that no sequence reads become NaN.
void poison_unread_rows(HostTensor& pool, const std::vector<int64_t>& read) {
    const int64_t row_size = pool.size() / pool.box()[0].size();
    for (int64_t row = 0; row < pool.box()[0].size(); ++row) {
        if (std::find(read.begin(), read.end(), row) == read.end()) {
            std::fill_n(pool.data() + row * row_size, row_size,
                        std::numeric_limits<double>::quiet_NaN());
        }
    }
}

// Cuts of [0, size): `count` random positions.
std::vector<Interval> random_cuts(std::mt19937_64& rng, int64_t size, int count) {
    std::vector<int64_t> bounds = {0, size};
    for (int cut = 0; cut < count && size > 1; ++cut) {
        bounds.push_back(std::uniform_int_distribution<int64_t>(1, size - 1)(rng));
    }
    std::sort(bounds.begin(), bounds.end());
    bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
    std::vector<Interval> cuts;
    for (size_t b = 0; b + 1 < bounds.size(); ++b) {
        cuts.push_back({bounds[b], bounds[b + 1]});
    }
    return cuts;
}

TEST(PagedAttention, EqualsTheSequencesKeysInRegionsForEverySplit) {
    const uint64_t seed = 20261207;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    int cut_pages = 0;
    for (int trial = 0; trial < 30; ++trial) {
        const bool causal = trial % 3 != 2;
        const Case c = random_case(rng, causal);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << ", trial " << trial << ", fills "
                                          << ::testing::PrintToString(c.fills) << ", page size "
                                          << c.page_size << (causal ? ", causal" : ""));
        absl::StatusOr<OperatorPtr> paged =
            make_paged(c.fresh, c.pool_pages, c.page_size, c.pages_per_sequence, causal);
        ASSERT_TRUE(paged.ok()) << paged.status();
        const int64_t queries = ends_of(c.fresh).back();
        const int64_t pool_rows = c.pool_pages * c.page_size;
        std::vector<HostTensor> inputs;
        for (int idx = 0; idx < 3; ++idx) {
            inputs.push_back(HostTensor::random((*paged)->input_types()[idx].box(), rng, -2, 2));
        }
        poison_unread_rows(inputs[1], c.rows_of_keys);
        poison_unread_rows(inputs[2], c.rows_of_keys);
        inputs.push_back(values_tensor(c.fills));
        inputs.push_back(values_tensor(c.table, static_cast<int64_t>(c.fresh.size())));

        // The same keys, each sequence's at the start of a region of its capacity, filled to
        // key_lengths (the region's other rows: the pool's first row).
        const int64_t capacity = c.page_size * c.pages_per_sequence;
        const int64_t sequences = static_cast<int64_t>(c.fresh.size());
        std::vector<int64_t> region_rows;
        for (int64_t s = 0, at = 0; s < sequences; ++s) {
            for (int64_t j = 0; j < capacity; ++j) {
                region_rows.push_back(j < c.fills[s] ? c.rows_of_keys[at++] : 0);
            }
        }
        std::vector<TensorType> types = qkv_types(queries, sequences * capacity);
        types.push_back(TensorType{DType::i64, {{"sequences", sequences}}});
        absl::StatusOr<OperatorPtr> regions =
            Attention::make({{"causal", causal},
                             {"sequence_ends", ends_of(c.fresh)},
                             {"key_ends", ends_of(std::vector<int64_t>(c.fresh.size(), capacity))}},
                            types);
        ASSERT_TRUE(regions.ok()) << regions.status();
        absl::StatusOr<std::vector<HostTensor>> expected =
            execute_whole(**regions, {inputs[0], gather_rows(inputs[1], region_rows),
                                      gather_rows(inputs[2], region_rows), inputs[3]});
        ASSERT_TRUE(expected.ok()) << expected.status();

        for (int split = 0; split < 4; ++split) {
            const IntervalRequest request = {random_cuts(rng, queries, split % 2),
                                             random_cuts(rng, kHeadsKv, split / 2),
                                             random_cuts(rng, pool_rows, split + 1)};
            for (const Interval& block : request[2]) {
                cut_pages += block.lower % c.page_size != 0 ? 1 : 0;
            }
            absl::StatusOr<JoinAggSpec> spec = (*paged)->spec(request);
            ASSERT_TRUE(spec.ok()) << spec.status();
            // Where the keys lie is the table's: every (query block, key block) pair is a
            // function.
            EXPECT_EQ(spec->functions.size(),
                      request[0].size() * request[1].size() * request[2].size());
            absl::StatusOr<std::vector<HostTensor>> got = execute_spec(**paged, *spec, inputs);
            ASSERT_TRUE(got.ok()) << got.status();
            EXPECT_LT(max_difference((*got)[0], (*expected)[0]), 1e-12) << "split " << split;
        }
    }
    EXPECT_GT(cut_pages, 10) << "key blocks should cut inside pages";
}

TEST(PagedAttention, KeyBlocksCombinedInAnyOrderGiveTheWholePool) {
    const uint64_t seed = 11;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    // Two sequences of 2 and 1 new tokens, fills 13 and 7, pages of 4 spread over a pool of 8.
    const std::vector<int64_t> fills = {13, 7};
    const std::vector<int64_t> table = {6, 1, 4, 3, 0, 7, 2, 2};
    absl::StatusOr<OperatorPtr> op = make_paged({2, 1}, 8, 4, 4, /*causal=*/true, DType::i64);
    ASSERT_TRUE(op.ok()) << op.status();
    const auto& attention = dynamic_cast<const Attention&>(**op);
    EXPECT_TRUE(attention.has_pages());
    EXPECT_EQ(attention.pages(), 8);
    EXPECT_EQ(attention.pages_per_sequence(), 4);
    std::vector<HostTensor> inputs;
    for (int idx = 0; idx < 3; ++idx) {
        inputs.push_back(HostTensor::random((*op)->input_types()[idx].box(), rng, -2, 2));
    }
    absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(
        **op, {inputs[0], inputs[1], inputs[2], values_tensor(fills), values_tensor(table, 2)});
    ASSERT_TRUE(whole.ok()) << whole.status();
    for (int trial = 0; trial < 10; ++trial) {
        std::vector<PartialBlock> partials;
        for (const Interval& block : random_cuts(rng, 32, 1 + trial % 6)) {
            std::vector<Interval> dims = inputs[1].box().dims();
            dims[0] = block;
            std::vector<Interval> value_dims = inputs[2].box().dims();
            value_dims[0] = block;
            absl::StatusOr<PartialBlock> partial =
                attention.compute_partial(inputs[0], inputs[1].slice(Box(dims)),
                                          inputs[2].slice(Box(value_dims)), fills, table);
            ASSERT_TRUE(partial.ok()) << partial.status();
            partials.push_back(*std::move(partial));
        }
        absl::StatusOr<PartialBlock> combined = combine_in_random_order(std::move(partials), rng);
        ASSERT_TRUE(combined.ok()) << combined.status();
        EXPECT_LT(max_difference(combined->values, (*whole)[0]), 1e-12)
            << "seed " << seed << ", trial " << trial;
    }
}

TEST(PagedAttention, KeyRunsFollowThePagesAndMergeNeighbours) {
    // Pages of 4; sequence 0's pages 2, 3 (neighbours), 0.
    absl::StatusOr<OperatorPtr> op = make_paged({1}, 5, 4, 3, /*causal=*/false);
    ASSERT_TRUE(op.ok()) << op.status();
    const auto& attention = dynamic_cast<const Attention&>(**op);
    const std::vector<int64_t> table = {2, 3, 0};
    const std::vector<Attention::Segment> segments = attention.segments({0, 1}, {11});
    ASSERT_EQ(segments.size(), 1u);
    // Places [1, 11) of the sequence: rows 9..15 (pages 2 and 3 follow each other), then 0..2.
    std::vector<Attention::KeyRun> runs = attention.key_runs(segments[0], {1, 11}, {0, 20}, table);
    ASSERT_EQ(runs.size(), 2u);
    EXPECT_EQ(runs[0].place_begin, 1);
    EXPECT_EQ(runs[0].place_end, 8);
    EXPECT_EQ(runs[0].row_begin, 9);
    EXPECT_EQ(runs[1].place_begin, 8);
    EXPECT_EQ(runs[1].place_end, 11);
    EXPECT_EQ(runs[1].row_begin, 0);
    // A block of rows [10, 14) cuts pages 2 and 3: places 2..5.
    runs = attention.key_runs(segments[0], {1, 11}, {10, 14}, table);
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].place_begin, 2);
    EXPECT_EQ(runs[0].place_end, 6);
    EXPECT_EQ(runs[0].row_begin, 10);
    // A block holding none of its pages.
    EXPECT_TRUE(attention.key_runs(segments[0], {0, 11}, {4, 8}, table).empty());
}

TEST(PagedAttention, PricesEveryKeyBlockAsItsShareOfThePool) {
    absl::StatusOr<OperatorPtr> op = make_paged({1, 1}, 8, 4, 4, /*causal=*/false);
    ASSERT_TRUE(op.ok()) << op.status();
    const auto& attention = dynamic_cast<const Attention&>(**op);
    // Each of 2 queries reads its capacity (16 keys) spread over the pool's 32 rows.
    EXPECT_DOUBLE_EQ(attention.interacting_pairs({0, 2}, {0, 32}), 32.0);
    EXPECT_DOUBLE_EQ(attention.interacting_pairs({0, 2}, {0, 8}), 8.0);
    EXPECT_DOUBLE_EQ(attention.interacting_pairs({0, 1}, {8, 32}), 12.0);
    EXPECT_FALSE(attention.holds_whole_sequences(
        FunctionSpec{{Box({{0, 2}, {0, 4}, {0, 5}}), Box({{0, 32}, {0, 2}, {0, 5}}),
                      Box({{0, 32}, {0, 2}, {0, 3}}), Box({{0, 2}}), Box({{0, 2}, {0, 4}})},
                     {Box({{0, 2}, {0, 4}, {0, 3}})}}));
}

std::vector<std::byte> bytes_of(const std::vector<int32_t>& values) {
    std::vector<std::byte> bytes(values.size() * 4);
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

TEST(PagedAttention, TableEntriesAndFillsAreCheckedNamingTheCulprit) {
    absl::StatusOr<OperatorPtr> op = make_paged({1, 2}, 6, 4, 3, /*causal=*/true);
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_TRUE((*op)->check_input_values(4, bytes_of({0, 1, 2, 5, 5, 3})).ok());
    absl::Status status = (*op)->check_input_values(4, bytes_of({0, 1, 2, 5, 6, 3}));
    EXPECT_THAT(status.message(), HasSubstr("page_table[1][1] = 6 is outside [0, 6)"));
    status = (*op)->check_input_values(4, bytes_of({0, -1, 2, 5, 5, 3}));
    EXPECT_THAT(status.message(), HasSubstr("page_table[0][1] = -1"));
    status = (*op)->check_input_values(4, bytes_of({0, 1, 2}));
    EXPECT_THAT(status.message(), HasSubstr("for 6 entries (2 sequences of 3 pages)"));
    // key_lengths are i64 here: the capacity is 3 pages of 4.
    const std::vector<int64_t> fills = {12, 13};
    std::vector<std::byte> fill_bytes(16);
    std::memcpy(fill_bytes.data(), fills.data(), 16);
    status = (*op)->check_input_values(3, fill_bytes);
    EXPECT_THAT(status.message(), HasSubstr("key_lengths[1] = 13 is outside [0, 12]"));
}

TEST(PagedAttention, RefusesWhatItCannotComputeNamingTheCulprit) {
    std::vector<TensorType> types = qkv_types(2, 12);
    types.push_back(TensorType{DType::i64, {{"sequences", 2}}});
    const TensorType table{DType::i32, {{"sequences", 2}, {"pages", 2}}};
    auto make = [&](Attributes attributes, std::vector<TensorType> inputs) {
        return Attention::make(attributes, std::move(inputs)).status();
    };
    const Attributes paged = {{"sequence_ends", std::vector<int64_t>{1, 2}}, {"page_size", 4}};
    std::vector<TensorType> five = types;
    five.push_back(table);
    EXPECT_TRUE(make(paged, five).ok());
    EXPECT_THAT(make(paged, types).message(), HasSubstr("with page_size, 5"));
    Attributes with_key_ends = paged;
    with_key_ends.set("key_ends", std::vector<int64_t>{6, 12});
    EXPECT_THAT(make(with_key_ends, five).message(), HasSubstr("give no key_ends"));
    Attributes odd_pages = paged;
    odd_pages.set("page_size", 5);
    EXPECT_THAT(make(odd_pages, five).message(), HasSubstr("not whole pages of page_size 5"));
    Attributes no_keys = paged;
    no_keys.set("page_size", 0);
    EXPECT_THAT(make(no_keys, five).message(), HasSubstr("page_size is 0"));
    std::vector<TensorType> float_table = types;
    float_table.push_back(TensorType{DType::f32, {{"sequences", 2}, {"pages", 2}}});
    EXPECT_THAT(make(paged, float_table).message(), HasSubstr("page_table is i32 or i64"));
    std::vector<TensorType> short_table = types;
    short_table.push_back(TensorType{DType::i32, {{"sequences", 1}, {"pages", 2}}});
    EXPECT_THAT(make(paged, short_table).message(), HasSubstr("a row per sequence (2)"));
    // Causal: 3 queries of one sequence and room for 2 keys.
    std::vector<TensorType> crowded = qkv_types(3, 4);
    crowded.push_back(TensorType{DType::i64, {{"sequences", 1}}});
    crowded.push_back(TensorType{DType::i32, {{"sequences", 1}, {"pages", 1}}});
    EXPECT_THAT(make({{"causal", true}, {"page_size", 2}}, crowded).message(),
                HasSubstr("sequence 0 has 3 queries and room for 2 keys"));
}

} // namespace
} // namespace einsummable::ir
