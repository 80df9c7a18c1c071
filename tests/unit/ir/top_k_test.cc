// The top_k operator (compiler/ir/ops/top_k.h) and the top_k ⊕ (ir::merge_top_k): the
// factory's types and errors, its indices and roles, which pairs a row gives (larger first, NaN
// largest, ties to the smaller index — argmax's rule, so pair 0 is argmax's choice), and
// vocabulary splits, with blocks narrower than k, whose lists merge to the whole answer for every
// cut and in any order. That every spec equals the whole operator on random cases, that the
// kernels match the reference and that graphs round-trip are the generic suites'
// (random_cases.cc); plans that split it are tests/unit/runtime/argmax_plan_test.cc's.

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/cache_steps.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/top_k.h"
#include "compiler/ir/partial_block.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kVocab = 7;

TensorType logits_type(int64_t rows, int64_t vocab, DType dtype = DType::f32) {
    return {dtype, {{"tokens", rows}, {"vocab", vocab}}};
}

OperatorPtr make_top_k(const TensorType& x, int64_t k) {
    absl::StatusOr<OperatorPtr> op = make_operator(TopK::kKind, {{"k", k}}, {x});
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

std::string error_of(const Attributes& attributes, std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op = make_operator(TopK::kKind, attributes, std::move(inputs));
    EXPECT_FALSE(op.ok());
    if (op.ok()) {
        return "";
    }
    EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(op.status().message());
}

bool same(double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST(TopK, OutputHoldsKPairsPerRowInF32OrF64) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        OperatorPtr op = make_top_k(logits_type(3, 10, dtype), 4);
        ASSERT_NE(op, nullptr);
        EXPECT_EQ(op->output_types()[0],
                  (TensorType{DType::f32, {{"tokens", 3}, {"top_k", 4}, {"top_k_pair", 2}}}));
        EXPECT_EQ(op->describe(), "top_k(k=4)");
    }
    OperatorPtr wide = make_top_k(logits_type(2, 10, DType::f64), 10);
    ASSERT_NE(wide, nullptr);
    EXPECT_EQ(wide->output_types()[0].dtype, DType::f64);
}

TEST(TopK, FactoryErrorsNameTheAttributeOrInput) {
    EXPECT_THAT(error_of({{"k", int64_t{1}}}, {}), HasSubstr("top_k takes 1 input"));
    EXPECT_THAT(error_of({}, {logits_type(2, 5)}), HasSubstr("k"));
    EXPECT_THAT(error_of({{"k", int64_t{1}}}, {TensorType{DType::f32, {}}}),
                AllOf(HasSubstr("input 0"), HasSubstr("rank 0")));
    EXPECT_THAT(error_of({{"k", int64_t{0}}}, {logits_type(2, 5)}),
                AllOf(HasSubstr("attribute k is 0"), HasSubstr("give 1 to 5")));
    EXPECT_THAT(error_of({{"k", int64_t{6}}}, {logits_type(2, 5)}),
                AllOf(HasSubstr("attribute k is 6"), HasSubstr("last dimension's 5 entries")));
    EXPECT_THAT(error_of({{"k", TopK::kMaxK + 1}}, {logits_type(2, 5000)}),
                AllOf(HasSubstr("attribute k is 1025"), HasSubstr("give 1 to 1024")));
    EXPECT_THAT(error_of({{"k", int64_t{1}}}, {logits_type(2, TopK::kMaxVocabulary + 1)}),
                AllOf(HasSubstr("input 0"), HasSubstr("16777217 entries"), HasSubstr("2^24")));
    EXPECT_THAT(error_of({{"k", int64_t{1}}}, {logits_type(2, 5, DType::i32)}),
                AllOf(HasSubstr("input 0"), HasSubstr("top_k computes on floating-point")));
    EXPECT_THAT(error_of({{"k", int64_t{1}}, {"largest", int64_t{0}}}, {logits_type(2, 5)}),
                HasSubstr("largest"));
}

TEST(TopK, RowsAreTokensAndTheVocabularyIsReducedAway) {
    OperatorPtr op = make_top_k(logits_type(4, 10), 3);
    ASSERT_NE(op, nullptr);
    const std::vector<ShardableIndex> indices = op->shardable_indices();
    ASSERT_EQ(indices.size(), 2u);
    EXPECT_EQ(indices[0].to_string(), "tokens:4");
    EXPECT_EQ(indices[1].to_string(), "vocab:10");
    EXPECT_EQ(op->index_roles({}),
              (std::vector<IndexRole>{IndexRole::token, IndexRole::contracted}));
    EXPECT_EQ(op->whole_spec().aggregations, (std::vector<AggOp>{AggOp::top_k}));
    const auto* top_k = dynamic_cast<const TopK*>(op.get());
    ASSERT_NE(top_k, nullptr);
    EXPECT_TRUE(top_k->check_blocks_line_up(op->whole_spec().functions[0]).ok());
    FunctionSpec cut = op->whole_spec().functions[0];
    cut.outputs[0] = Box({{0, 4}, {0, 2}, {0, 2}});
    EXPECT_THAT(std::string(top_k->check_blocks_line_up(cut).message()),
                AllOf(HasSubstr("blocks x [0,4)x[0,10) and pairs [0,4)x[0,2)x[0,2)"),
                      HasSubstr("do not line up")));
}

// Rows chosen for the rule: equal elements by index, NaN above everything, +inf above numbers,
// -inf last but before nothing.
const std::vector<std::vector<double>>& rule_rows() {
    static const auto* rows = new std::vector<std::vector<double>>{
        {1, 3, 3, 2, 3, 0, 3},
        {1, kNaN, 5, kNaN, 9, 9, -kInf},
        {-kInf, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf},
        {-kInf, -3, -kInf, -3, -4, -kInf, kNaN},
        {0, kInf, 1e30, kInf, kNaN, 0, -0.0},
    };
    return *rows;
}

HostTensor rule_input() {
    std::vector<double> data;
    for (const std::vector<double>& row : rule_rows()) {
        data.insert(data.end(), row.begin(), row.end());
    }
    return HostTensor(Box::from_shape({static_cast<int64_t>(rule_rows().size()), kVocab}), data);
}

// The row's indices sorted by the rule, written independently of arg_max_wins: NaN first (by
// index), then by value descending, equal values by index.
std::vector<int64_t> ranked(const std::vector<double>& row) {
    std::vector<int64_t> order(row.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        if (std::isnan(row[a]) || std::isnan(row[b])) {
            return std::isnan(row[a]) && !std::isnan(row[b]);
        }
        return row[a] > row[b];
    });
    return order;
}

// Every cut of the vocabulary into contiguous blocks (blocks of one column too, narrower than
// every k but 1), every k and one or two row blocks: the merged lists are the rows' k best.
TEST(TopK, EveryVocabularySplitGivesTheKBestPairs) {
    const std::vector<std::vector<double>>& rows = rule_rows();
    const auto count = static_cast<int64_t>(rows.size());
    const HostTensor input = rule_input();
    for (int64_t k = 1; k <= kVocab; ++k) {
        OperatorPtr op = make_top_k(logits_type(count, kVocab), k);
        ASSERT_NE(op, nullptr);
        for (int mask = 0; mask < (1 << (kVocab - 1)); mask += (k == 3 ? 1 : 7)) {
            std::vector<Interval> columns;
            int64_t begin = 0;
            for (int64_t c = 0; c + 1 < kVocab; ++c) {
                if ((mask >> c) & 1) {
                    columns.push_back({begin, c + 1});
                    begin = c + 1;
                }
            }
            columns.push_back({begin, kVocab});
            for (const std::vector<Interval>& row_blocks :
                 {std::vector<Interval>{{0, count}},
                  std::vector<Interval>{{0, count / 2}, {count / 2, count}}}) {
                SCOPED_TRACE(::testing::Message() << "k " << k << ", cut mask " << mask
                                                  << ", row blocks " << row_blocks.size());
                absl::StatusOr<JoinAggSpec> spec = op->spec({row_blocks, columns});
                ASSERT_TRUE(spec.ok()) << spec.status();
                absl::StatusOr<std::vector<HostTensor>> got = execute_spec(*op, *spec, {input});
                ASSERT_TRUE(got.ok()) << got.status();
                for (int64_t row = 0; row < count; ++row) {
                    const std::vector<int64_t> want = ranked(rows[row]);
                    for (int64_t slot = 0; slot < k; ++slot) {
                        const double* pair = (*got)[0].data() + (row * k + slot) * 2;
                        ASSERT_EQ(pair[1], static_cast<double>(want[slot]))
                            << "row " << row << ", slot " << slot;
                        ASSERT_TRUE(same(pair[0], rows[row][want[slot]]))
                            << "row " << row << ", slot " << slot;
                    }
                }
            }
        }
    }
}

// A block narrower than k pads its list with (-inf, vocab), which every element beats, -inf ones
// included.
TEST(TopK, ABlockNarrowerThanKPadsWithPairsEveryElementBeats) {
    OperatorPtr op = make_top_k(logits_type(1, 5), 4);
    ASSERT_NE(op, nullptr);
    const FunctionSpec block{{Box({{0, 1}, {3, 5}})}, {Box({{0, 1}, {0, 4}, {0, 2}})}};
    absl::StatusOr<std::vector<HostTensor>> got =
        op->reference({HostTensor(Box({{0, 1}, {3, 5}}), {-kInf, 2.0})}, block);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ((*got)[0].values(),
              (std::vector<double>{2.0, 4.0, -kInf, 3.0, -kInf, 5.0, -kInf, 5.0}));
    // Merged with another part's list, the padding goes last.
    const HostTensor other(Box({{0, 1}, {0, 4}, {0, 2}}),
                           {-kInf, 0.0, -kInf, 1.0, -kInf, 2.0, -kInf, 5.0});
    absl::StatusOr<HostTensor> merged = merge_top_k((*got)[0], other);
    ASSERT_TRUE(merged.ok()) << merged.status();
    EXPECT_EQ(merged->values(),
              (std::vector<double>{2.0, 4.0, -kInf, 0.0, -kInf, 1.0, -kInf, 2.0}));
}

// The ⊕ is commutative and associative exactly, NaN and ties included: every order of merging
// the lists of random parts gives the same list. Seeded, printed.
TEST(TopK, MergingListsInAnyOrderGivesTheSameList) {
    const uint64_t seed = testing::test_seed();
    std::mt19937_64 rng(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const std::vector<double> values = {1.0, 2.0, 2.0, kNaN, -kInf, kInf, -0.0, 0.0};
    constexpr int64_t kWidth = 10;
    for (int trial = 0; trial < 100; ++trial) {
        const int64_t k = 1 + static_cast<int64_t>(rng() % 4);
        OperatorPtr op = make_top_k(logits_type(2, kWidth), k);
        ASSERT_NE(op, nullptr);
        std::vector<double> data(2 * kWidth);
        for (double& v : data) {
            v = values[rng() % values.size()];
        }
        const HostTensor x(Box::from_shape({2, kWidth}), data);
        // Four parts: cuts at random places (a part may be narrower than k).
        std::vector<int64_t> cuts = {0, kWidth};
        while (cuts.size() < 5) {
            const auto at = static_cast<int64_t>(1 + rng() % (kWidth - 1));
            if (std::find(cuts.begin(), cuts.end(), at) == cuts.end()) {
                cuts.push_back(at);
            }
        }
        std::sort(cuts.begin(), cuts.end());
        std::vector<HostTensor> parts;
        for (size_t p = 0; p + 1 < cuts.size(); ++p) {
            const Box in({{0, 2}, {cuts[p], cuts[p + 1]}});
            absl::StatusOr<std::vector<HostTensor>> part =
                op->reference({x.slice(in)}, {{in}, {Box({{0, 2}, {0, k}, {0, 2}})}});
            ASSERT_TRUE(part.ok()) << part.status();
            parts.push_back((*part)[0]);
        }
        absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(*op, {x});
        ASSERT_TRUE(whole.ok()) << whole.status();
        std::vector<int> order = {0, 1, 2, 3};
        do {
            HostTensor merged = parts[order[0]];
            for (size_t p = 1; p < order.size(); ++p) {
                absl::StatusOr<HostTensor> next = merge_top_k(merged, parts[order[p]]);
                ASSERT_TRUE(next.ok()) << next.status();
                merged = *std::move(next);
            }
            for (int64_t at = 0; at < merged.size(); ++at) {
                ASSERT_TRUE(same(merged.data()[at], (*whole)[0].data()[at]))
                    << "trial " << trial << ", k " << k << ", element " << at;
            }
        } while (std::next_permutation(order.begin(), order.end()));
    }
}

TEST(TopK, MergingRefusesListsThatDoNotMatch) {
    const HostTensor one(Box::from_shape({1, 2, 2}), {1.0, 0.0, 0.5, 1.0});
    const HostTensor other(Box::from_shape({1, 1, 2}), {1.0, 0.0});
    EXPECT_THAT(std::string(merge_top_k(one, other).status().message()),
                HasSubstr("different boxes"));
    const HostTensor flat(Box::from_shape({1, 3}), {1.0, 0.0, 2.0});
    EXPECT_THAT(std::string(merge_top_k(flat, flat).status().message()),
                HasSubstr("no block of [..., k, 2]"));
}

// A step graph's top-k choice: a top_k of its logits saved beside them, k capped at the
// vocabulary, and errors naming the tensor or k.
TEST(TopK, TopKChoiceSavesTheBestPairsOfEveryRow) {
    Graph graph;
    absl::StatusOr<TensorId> x = graph.add_input("x", DType::f32, {{"rows", 5}, {"vocab", 7}});
    ASSERT_TRUE(x.ok());
    absl::StatusOr<TensorId> logits =
        graph.add("logits", "einsum", {{"equation", std::string("rv->rv")}}, {*x});
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_TRUE(graph.save(*logits).ok());
    absl::StatusOr<std::string> pairs = add_top_k_choice(graph, "logits", 64);
    ASSERT_TRUE(pairs.ok()) << pairs.status();
    EXPECT_EQ(*pairs, "logits.top_k");
    ASSERT_TRUE(graph.validate().ok());
    EXPECT_EQ(graph.tensor(*graph.find_tensor(*pairs)).type.dims[1].size, kVocab);
    absl::StatusOr<std::map<std::string, HostTensor>> got =
        evaluate_graph(graph, {{"x", rule_input()}});
    ASSERT_TRUE(got.ok()) << got.status();
    const HostTensor& best = got->at(*pairs);
    for (size_t row = 0; row < rule_rows().size(); ++row) {
        const std::vector<int64_t> want = ranked(rule_rows()[row]);
        for (int64_t slot = 0; slot < kVocab; ++slot) {
            EXPECT_EQ(best.data()[(static_cast<int64_t>(row) * kVocab + slot) * 2 + 1],
                      static_cast<double>(want[slot]))
                << "row " << row << ", slot " << slot;
        }
    }
    EXPECT_THAT(add_top_k_choice(graph, "logits", 3).status().message(), HasSubstr("logits.top_k"));
    EXPECT_THAT(add_top_k_choice(graph, "x", 3).status().message(),
                HasSubstr("'x' is no saved output"));
    EXPECT_THAT(add_top_k_choice(graph, *pairs, 3).status().message(),
                HasSubstr("logits are floating-point [rows, vocab]"));
    EXPECT_THAT(add_top_k_choice(graph, "logits", 0).status().message(), HasSubstr("k is 0"));
}

} // namespace
} // namespace einsummable::ir
