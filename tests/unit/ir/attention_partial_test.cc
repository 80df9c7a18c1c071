// The log-sum-exp ⊕ of attention: partial results over disjoint blocks of keys, combined in any
// order, give attention over all the keys, non-finite inputs included; the partial of no keys is
// the identity; bad operands are refused by name. Random cases print their seed.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "compiler/ir/ops/attention.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/attention_testing.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;
using testing::max_difference;

struct Shape {
    int64_t sequence;
    int64_t heads_q;
    int64_t heads_kv;
    int64_t head_dim;
    int64_t value_dim;
    bool causal;
    std::vector<int64_t> sequence_ends; // empty: one sequence
};

OperatorPtr make_attention(const Shape& shape) {
    const Dim seq{"sequence", shape.sequence};
    TensorType q{DType::f64, {seq, {"heads_q", shape.heads_q}, {"d_head", shape.head_dim}}};
    TensorType k{DType::f64, {seq, {"heads_kv", shape.heads_kv}, {"d_head", shape.head_dim}}};
    TensorType v{DType::f64, {seq, {"heads_kv", shape.heads_kv}, {"d_v", shape.value_dim}}};
    Attributes attributes = {{"causal", shape.causal}};
    if (!shape.sequence_ends.empty()) {
        attributes.set("sequence_ends", shape.sequence_ends);
    }
    absl::StatusOr<OperatorPtr> op = Attention::make(attributes, {q, k, v});
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

const Attention& as_attention(const OperatorPtr& op) {
    return dynamic_cast<const Attention&>(*op);
}

// Uniform values in [-range, range) for every input of `op`.
std::vector<HostTensor> random_inputs(const Operator& op, std::mt19937_64& rng,
                                      double range = 1.0) {
    std::vector<HostTensor> inputs;
    for (const TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng, -range, range));
    }
    return inputs;
}

// The key rows [lower, upper) of k or v, all heads.
HostTensor key_block(const HostTensor& whole, int64_t lower, int64_t upper) {
    std::vector<Interval> dims = whole.box().dims();
    dims[0] = {lower, upper};
    return whole.slice(Box(dims));
}

// Cuts [0, n) at `cuts` random positions (some blocks may be empty of keys for some queries:
// above the diagonal, or in another sequence).
std::vector<int64_t> random_boundaries(int64_t n, int cuts, std::mt19937_64& rng) {
    std::vector<int64_t> boundaries = {0, n};
    std::uniform_int_distribution<int64_t> position(1, n - 1);
    for (int cut = 0; cut < cuts && n > 1; ++cut) {
        boundaries.push_back(position(rng));
    }
    std::sort(boundaries.begin(), boundaries.end());
    boundaries.erase(std::unique(boundaries.begin(), boundaries.end()), boundaries.end());
    return boundaries;
}

TEST(PartialBlock, KeyBlocksCombinedInAnyOrderGiveAttentionOverAllKeys) {
    const uint64_t seed = 20261204;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const std::vector<Shape> shapes = {
        {37, 4, 2, 8, 8, false, {}},      // one sequence, GQA
        {37, 4, 2, 8, 6, true, {}},       // causal, d_v != d_head
        {50, 2, 1, 4, 4, true, {13, 50}}, // packed sequences, multi-query
        {70, 6, 3, 5, 5, false, {20, 31, 70}},
        {80, 1, 1, 16, 16, true, {}}, // longer than two key tiles
    };
    for (const Shape& shape : shapes) {
        OperatorPtr op = make_attention(shape);
        ASSERT_NE(op, nullptr);
        const Attention& attention = as_attention(op);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng, 2.0);
        absl::StatusOr<std::vector<HostTensor>> reference =
            op->reference(inputs, op->whole_spec().functions[0]);
        ASSERT_TRUE(reference.ok()) << reference.status();
        const HostTensor expected = (*reference)[0];

        for (int trial = 0; trial < 6; ++trial) {
            // Queries: all rows, or a random block of them (positions are absolute).
            int64_t q_lower = 0;
            int64_t q_upper = shape.sequence;
            if (trial % 2 == 1) {
                std::uniform_int_distribution<int64_t> cut(0, shape.sequence - 1);
                q_lower = cut(rng);
                q_upper = std::min(shape.sequence, q_lower + 1 + cut(rng) / 2);
            }
            const HostTensor queries = key_block(inputs[0], q_lower, q_upper);
            std::vector<PartialBlock> partials;
            const std::vector<int64_t> bounds = random_boundaries(shape.sequence, 1 + trial, rng);
            for (size_t b = 0; b + 1 < bounds.size(); ++b) {
                absl::StatusOr<PartialBlock> partial = attention.compute_partial(
                    queries, key_block(inputs[1], bounds[b], bounds[b + 1]),
                    key_block(inputs[2], bounds[b], bounds[b + 1]));
                ASSERT_TRUE(partial.ok()) << partial.status();
                partials.push_back(*std::move(partial));
            }
            absl::StatusOr<PartialBlock> combined =
                testing::combine_in_random_order(std::move(partials), rng);
            ASSERT_TRUE(combined.ok()) << combined.status();
            std::vector<Interval> rows = expected.box().dims();
            rows[0] = {q_lower, q_upper};
            EXPECT_LT(max_difference(combined->values, expected.slice(Box(rows))), 1e-12)
                << "seed " << seed << ", sequence " << shape.sequence << ", trial " << trial << ", "
                << bounds.size() - 1 << " key blocks";
            // Every query attends to at least itself, so the combined statistic is finite.
            for (double lse : combined->stats) {
                EXPECT_TRUE(std::isfinite(lse));
            }
        }
    }
}

TEST(PartialBlock, NoKeysIsTheIdentityAndAboveTheDiagonalHasNoKeys) {
    const Shape shape{16, 2, 1, 4, 4, true, {}};
    OperatorPtr op = make_attention(shape);
    ASSERT_NE(op, nullptr);
    const Attention& attention = as_attention(op);
    std::mt19937_64 rng(7);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    // Queries [0, 8) against keys [8, 16): causal, so no query has a key there.
    const HostTensor queries = key_block(inputs[0], 0, 8);
    absl::StatusOr<PartialBlock> empty = attention.compute_partial(
        queries, key_block(inputs[1], 8, 16), key_block(inputs[2], 8, 16));
    ASSERT_TRUE(empty.ok()) << empty.status();
    for (double lse : empty->stats) {
        EXPECT_EQ(lse, -std::numeric_limits<double>::infinity());
    }
    EXPECT_EQ(max_difference(empty->values, HostTensor(empty->values.box())), 0.0);

    absl::StatusOr<PartialBlock> below =
        attention.compute_partial(queries, key_block(inputs[1], 0, 8), key_block(inputs[2], 0, 8));
    ASSERT_TRUE(below.ok()) << below.status();
    for (const auto& [a, b] : {std::pair{&*empty, &*below}, std::pair{&*below, &*empty}}) {
        absl::StatusOr<PartialBlock> combined = combine_log_sum_exp(*a, *b);
        ASSERT_TRUE(combined.ok()) << combined.status();
        EXPECT_EQ(combined->stats, below->stats);
        EXPECT_EQ(max_difference(combined->values, below->values), 0.0);
    }
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// a and b agree: NaN where the other is NaN, the same infinities, finite values within
// `tolerance`.
::testing::AssertionResult same_values(const HostTensor& a, const HostTensor& b, double tolerance) {
    for (int64_t idx = 0; idx < a.size(); ++idx) {
        const double x = a.data()[idx];
        const double y = b.data()[idx];
        const bool same = std::isnan(y)   ? std::isnan(x)
                          : std::isinf(y) ? x == y
                                          : std::isfinite(x) && std::abs(x - y) <= tolerance;
        if (!same) {
            return ::testing::AssertionFailure() << "element " << idx << ": " << x << " vs " << y;
        }
    }
    return ::testing::AssertionSuccess();
}

// docs/operators.md "Non-finite inputs", on hand-made cases: one head, d = 1, q = 1, so a key's
// score is its k.
TEST(PartialBlock, NonFiniteInputsFollowTheDocumentedRules) {
    const Shape shape{4, 1, 1, 1, 1, true, {}};
    OperatorPtr op = make_attention(shape);
    ASSERT_NE(op, nullptr);
    const Box qk({{0, 4}, {0, 1}, {0, 1}});
    auto run = [&](std::vector<double> q, std::vector<double> k, std::vector<double> v) {
        absl::StatusOr<std::vector<HostTensor>> out =
            op->reference({HostTensor(qk, std::move(q)), HostTensor(qk, std::move(k)),
                           HostTensor(qk, std::move(v))},
                          op->whole_spec().functions[0]);
        EXPECT_TRUE(out.ok()) << out.status();
        return out.ok() ? (*out)[0].values() : std::vector<double>();
    };
    // Key 0 scores -inf: query 0 sees only it (every score -inf: 0/0, NaN); the others give it
    // weight 0 and do not read its NaN value.
    std::vector<double> out = run({1, 1, 1, 1}, {-kInf, 0, 0, 0}, {kNaN, 2, 4, 6});
    EXPECT_TRUE(std::isnan(out[0]));
    EXPECT_EQ(out[1], 2.0);
    EXPECT_DOUBLE_EQ(out[2], 3.0);
    EXPECT_DOUBLE_EQ(out[3], 4.0);
    // A NaN query: its row only. A NaN key: every query that sees it (causal: from 2 on).
    out = run({1, kNaN, 1, 1}, {0, 0, kNaN, 0}, {1, 2, 3, 4});
    EXPECT_EQ(out[0], 1.0);
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_TRUE(std::isnan(out[2]));
    EXPECT_TRUE(std::isnan(out[3]));
    // A +inf score: inf - inf in its weight, NaN. An infinite value of positive weight: inf.
    out = run({1, 1, 1, 1}, {0, kInf, 0, 0}, {1, 2, kInf, 4});
    EXPECT_EQ(out[0], 1.0);
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_TRUE(std::isnan(out[2]));
    out = run({1, 1, 1, 1}, {0, 0, 0, 0}, {1, 2, kInf, -kInf});
    EXPECT_DOUBLE_EQ(out[1], 1.5);
    EXPECT_EQ(out[2], kInf);
    EXPECT_TRUE(std::isnan(out[3])); // inf + -inf
}

// The ⊕ of statistics that are not finite: NaN wins in either order; -inf (no key of weight)
// yields to a part with keys even when its values are NaN (only -inf scores), and stays NaN
// beside a part with no key at all.
TEST(PartialBlock, CombineKeepsNaNAndLetsKeysOutweighMinusInfinity) {
    const Box box({{0, 1}, {0, 2}});
    auto part = [&](double lse, double value) {
        return PartialBlock{HostTensor(box, {value, value}), {lse}};
    };
    const PartialBlock keys = part(0.5, 3.0);
    const PartialBlock nan = part(kNaN, kNaN);
    const PartialBlock only_minus_infinity = part(-kInf, kNaN);
    const PartialBlock nothing = part(-kInf, 0.0);
    for (bool swap : {false, true}) {
        auto combine = [&](const PartialBlock& a, const PartialBlock& b) {
            absl::StatusOr<PartialBlock> combined =
                swap ? combine_log_sum_exp(b, a) : combine_log_sum_exp(a, b);
            EXPECT_TRUE(combined.ok()) << combined.status();
            return *std::move(combined);
        };
        PartialBlock combined = combine(keys, nan);
        EXPECT_TRUE(std::isnan(combined.stats[0]));
        EXPECT_TRUE(std::isnan(combined.values.data()[0]));
        combined = combine(nothing, nan);
        EXPECT_TRUE(std::isnan(combined.stats[0]));
        EXPECT_TRUE(std::isnan(combined.values.data()[1]));
        combined = combine(keys, only_minus_infinity);
        EXPECT_EQ(combined.stats[0], 0.5);
        EXPECT_EQ(combined.values.data()[0], 3.0);
        combined = combine(nothing, only_minus_infinity);
        EXPECT_EQ(combined.stats[0], -kInf);
        EXPECT_TRUE(std::isnan(combined.values.data()[0]));
        combined = combine(nothing, nothing);
        EXPECT_EQ(combined.stats[0], -kInf);
        EXPECT_EQ(combined.values.data()[0], 0.0);
    }
}

// The property of the first test with NaN, +inf and -inf injected into q, k and v: key blocks
// combined in any order give the reference over all keys, NaN for NaN and infinities exactly.
TEST(PartialBlock, KeyBlocksWithNonFiniteInputsGiveTheWholeResult) {
    const uint64_t seed = 20261231;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const std::vector<Shape> shapes = {
        {37, 4, 2, 3, 3, true, {}},
        {50, 2, 1, 2, 4, true, {13, 50}},
        {70, 6, 3, 2, 2, false, {20, 31, 70}},
        {80, 1, 1, 1, 2, true, {}}, // d = 1: a -inf key gives -inf or +inf scores
    };
    int non_finite = 0;
    for (const Shape& shape : shapes) {
        OperatorPtr op = make_attention(shape);
        ASSERT_NE(op, nullptr);
        const Attention& attention = as_attention(op);
        for (int trial = 0; trial < 8; ++trial) {
            std::vector<HostTensor> inputs = random_inputs(*op, rng, 2.0);
            for (HostTensor& input : inputs) {
                std::uniform_int_distribution<int64_t> position(0, input.size() - 1);
                std::uniform_int_distribution<int> kind(0, 2);
                for (int count = 0; count < 2; ++count) {
                    input.data()[position(rng)] = std::vector<double>{kNaN, kInf, -kInf}[kind(rng)];
                }
            }
            absl::StatusOr<std::vector<HostTensor>> reference =
                op->reference(inputs, op->whole_spec().functions[0]);
            ASSERT_TRUE(reference.ok()) << reference.status();
            const HostTensor& expected = (*reference)[0];
            for (double value : expected.values()) {
                non_finite += std::isfinite(value) ? 0 : 1;
            }
            std::vector<PartialBlock> partials;
            const std::vector<int64_t> bounds = random_boundaries(shape.sequence, 1 + trial, rng);
            for (size_t b = 0; b + 1 < bounds.size(); ++b) {
                absl::StatusOr<PartialBlock> partial = attention.compute_partial(
                    inputs[0], key_block(inputs[1], bounds[b], bounds[b + 1]),
                    key_block(inputs[2], bounds[b], bounds[b + 1]));
                ASSERT_TRUE(partial.ok()) << partial.status();
                partials.push_back(*std::move(partial));
            }
            std::shuffle(partials.begin(), partials.end(), rng);
            while (partials.size() > 1) {
                absl::StatusOr<PartialBlock> merged =
                    combine_log_sum_exp(partials[partials.size() - 2], partials.back());
                ASSERT_TRUE(merged.ok()) << merged.status();
                partials.pop_back();
                partials.back() = *std::move(merged);
            }
            EXPECT_TRUE(same_values(partials[0].values, expected, 1e-12))
                << "seed " << seed << ", sequence " << shape.sequence << ", trial " << trial << ", "
                << bounds.size() - 1 << " key blocks";
        }
    }
    EXPECT_GT(non_finite, 0);
}

TEST(PartialBlock, MismatchedOperandsAreRefusedByName) {
    const Shape shape{8, 4, 2, 4, 4, false, {}};
    OperatorPtr op = make_attention(shape);
    ASSERT_NE(op, nullptr);
    const Attention& attention = as_attention(op);
    std::mt19937_64 rng(11);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    // v over other keys than k.
    absl::StatusOr<PartialBlock> bad = attention.compute_partial(
        inputs[0], key_block(inputs[1], 0, 4), key_block(inputs[2], 4, 8));
    EXPECT_THAT(bad.status().message(), HasSubstr("v's block"));
    // Query heads [0, 4) against kv heads [0, 1): the group size is 2.
    bad = attention.compute_partial(inputs[0], inputs[1].slice(Box({{0, 8}, {0, 1}, {0, 4}})),
                                    inputs[2].slice(Box({{0, 8}, {0, 1}, {0, 4}})));
    EXPECT_THAT(bad.status().message(), HasSubstr("times the group size 2"));

    absl::StatusOr<PartialBlock> whole = attention.compute_partial(inputs[0], inputs[1], inputs[2]);
    absl::StatusOr<PartialBlock> half =
        attention.compute_partial(key_block(inputs[0], 0, 4), inputs[1], inputs[2]);
    ASSERT_TRUE(whole.ok() && half.ok());
    EXPECT_THAT(combine_log_sum_exp(*whole, *half).status().message(),
                HasSubstr("different blocks"));
}

// interacting_pairs's closed form against counting, query by query, the keys each attends to
// (its sequence's keys up to itself when causal, all of them otherwise) inside the key block,
// for every query and key interval of a few sequence layouts.
TEST(AttentionPairs, ClosedFormCountsEveryInteractingPair) {
    for (bool causal : {true, false}) {
        for (const std::vector<int64_t>& ends :
             {std::vector<int64_t>{}, std::vector<int64_t>{3, 7, 12},
              std::vector<int64_t>{1, 12}}) {
            const OperatorPtr op = make_attention({12, 2, 1, 2, 2, causal, ends});
            ASSERT_NE(op, nullptr);
            const std::vector<int64_t> bounds = ends.empty() ? std::vector<int64_t>{12} : ends;
            const auto sequence_of = [&](int64_t t) {
                int64_t start = 0;
                for (int64_t end : bounds) {
                    if (t < end) {
                        return std::pair(start, end);
                    }
                    start = end;
                }
                return std::pair(start, start);
            };
            for (int64_t ql = 0; ql <= 12; ++ql) {
                for (int64_t qu = ql; qu <= 12; ++qu) {
                    for (int64_t kl = 0; kl <= 12; ++kl) {
                        for (int64_t ku = kl; ku <= 12; ++ku) {
                            double counted = 0.0;
                            for (int64_t t = ql; t < qu; ++t) {
                                const auto [start, end] = sequence_of(t);
                                const int64_t last = causal ? t + 1 : end;
                                counted += static_cast<double>(
                                    std::max<int64_t>(0, std::min(last, ku) - std::max(start, kl)));
                            }
                            ASSERT_EQ(as_attention(op).interacting_pairs({ql, qu}, {kl, ku}),
                                      counted)
                                << "causal " << causal << " queries [" << ql << "," << qu
                                << ") keys [" << kl << "," << ku << ")";
                        }
                    }
                }
            }
        }
    }
}

} // namespace
} // namespace einsummable::ir
