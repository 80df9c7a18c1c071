// The argmax operator (compiler/ir/ops/argmax.h) and the arg_max ⊕ (partial_block.h): the
// factory's types and errors, its indices and roles, which element wins (the first largest,
// NaN largest), and vocabulary splits whose (value, index) pairs combine to the whole answer for
// every cut and in any order. That every spec equals the whole operator on random cases, that
// the kernels match the reference and that graphs round-trip are the generic suites'
// (random_cases.cc).

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/cache_steps.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/argmax.h"
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

TensorType logits_type(int64_t rows, int64_t vocab, DType dtype = DType::f32) {
    return {dtype, {{"tokens", rows}, {"vocab", vocab}}};
}

OperatorPtr make_argmax(const TensorType& x) {
    absl::StatusOr<OperatorPtr> op = make_operator(ArgMax::kKind, {}, {x});
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

std::string error_of(const Attributes& attributes, std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op = make_operator(ArgMax::kKind, attributes, std::move(inputs));
    EXPECT_FALSE(op.ok());
    if (op.ok()) {
        return "";
    }
    EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(op.status().message());
}

TEST(ArgMax, OutputKeepsTheReducedDimensionAsI64OfSizeOne) {
    for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        OperatorPtr op = make_argmax(logits_type(3, 10, dtype));
        ASSERT_NE(op, nullptr);
        EXPECT_EQ(op->output_types()[0], (TensorType{DType::i64, {{"tokens", 3}, {"argmax", 1}}}));
        EXPECT_EQ(op->describe(), "argmax()");
    }
    OperatorPtr vector = make_argmax(TensorType{DType::f32, {{"vocab", 7}}});
    ASSERT_NE(vector, nullptr);
    EXPECT_EQ(vector->output_types()[0], (TensorType{DType::i64, {{"argmax", 1}}}));
}

TEST(ArgMax, FactoryErrorsNameTheInput) {
    EXPECT_THAT(error_of({}, {}), HasSubstr("argmax takes 1 input"));
    EXPECT_THAT(error_of({}, {TensorType{DType::f32, {}}}),
                AllOf(HasSubstr("input 0"), HasSubstr("rank 0")));
    EXPECT_THAT(error_of({}, {logits_type(2, 0)}),
                AllOf(HasSubstr("input 0"), HasSubstr("empty last dimension")));
    EXPECT_THAT(error_of({}, {logits_type(2, ArgMax::kMaxVocabulary + 1)}),
                AllOf(HasSubstr("input 0"), HasSubstr("16777217 entries"), HasSubstr("2^24")));
    EXPECT_THAT(error_of({}, {logits_type(2, 5, DType::i64)}),
                AllOf(HasSubstr("input 0"), HasSubstr("argmax computes on floating-point")));
    EXPECT_THAT(error_of({{"axis", int64_t{0}}}, {logits_type(2, 5)}), HasSubstr("axis"));
}

TEST(ArgMax, RowsAreTokensAndTheVocabularyIsReducedAway) {
    OperatorPtr op = make_argmax(logits_type(4, 10));
    ASSERT_NE(op, nullptr);
    const std::vector<ShardableIndex> indices = op->shardable_indices();
    ASSERT_EQ(indices.size(), 2u);
    EXPECT_EQ(indices[0].to_string(), "tokens:4");
    EXPECT_EQ(indices[1].to_string(), "vocab:10");
    EXPECT_EQ(op->index_roles({}),
              (std::vector<IndexRole>{IndexRole::token, IndexRole::contracted}));
    EXPECT_EQ(op->whole_spec().aggregations, (std::vector<AggOp>{AggOp::arg_max}));
    // What the kernels check before reading: the indices' block on x's rows, its last
    // dimension 1.
    const auto* argmax = dynamic_cast<const ArgMax*>(op.get());
    ASSERT_NE(argmax, nullptr);
    EXPECT_TRUE(argmax->check_blocks_line_up(op->whole_spec().functions[0]).ok());
    FunctionSpec shifted = op->whole_spec().functions[0];
    shifted.outputs[0] = Box({{0, 2}, {0, 1}});
    EXPECT_THAT(std::string(argmax->check_blocks_line_up(shifted).message()),
                AllOf(HasSubstr("blocks x [0,4)x[0,10) and indices [0,2)x[0,1)"),
                      HasSubstr("do not line up")));
}

// Rows chosen for the rule: the first of equal largest elements, NaN above everything (the
// first NaN), +inf above numbers, a row of -inf gives its first element.
struct Row {
    std::vector<double> values;
    double want;
};
const std::vector<Row>& rule_rows() {
    static const auto* rows = new std::vector<Row>{
        {{1, 3, 3, 2, 3, 0}, 1},
        {{1, kNaN, 5, kNaN, 9, 9}, 1},
        {{-kInf, -kInf, -kInf, -kInf, -kInf, -kInf}, 0},
        {{-kInf, -3, -kInf, -3, -4, -kInf}, 1},
        {{2, 2, 2, 2, 2, 7}, 5},
        {{0, kInf, 1e30, kInf, kNaN, 0}, 4},
        {{-1, -0.5, kInf, 5, 5, 5}, 2},
    };
    return *rows;
}

HostTensor rule_input() {
    const std::vector<Row>& rows = rule_rows();
    std::vector<double> data;
    for (const Row& row : rows) {
        data.insert(data.end(), row.values.begin(), row.values.end());
    }
    return HostTensor(Box::from_shape({static_cast<int64_t>(rows.size()), 6}), data);
}

// Every cut of the vocabulary into contiguous blocks, and every cut of the rows into one or two
// blocks: the pairs of the blocks combine to the first largest element of the whole row.
TEST(ArgMax, EveryVocabularySplitFindsTheFirstLargestElement) {
    const std::vector<Row>& rows = rule_rows();
    const auto count = static_cast<int64_t>(rows.size());
    OperatorPtr op = make_argmax(logits_type(count, 6));
    ASSERT_NE(op, nullptr);
    const HostTensor input = rule_input();
    for (int mask = 0; mask < (1 << 5); ++mask) { // bit c: a cut after column c
        std::vector<Interval> columns;
        int64_t begin = 0;
        for (int64_t c = 0; c < 5; ++c) {
            if ((mask >> c) & 1) {
                columns.push_back({begin, c + 1});
                begin = c + 1;
            }
        }
        columns.push_back({begin, 6});
        for (const std::vector<Interval>& row_blocks :
             {std::vector<Interval>{{0, count}},
              std::vector<Interval>{{0, count / 2}, {count / 2, count}}}) {
            SCOPED_TRACE(::testing::Message()
                         << "cut mask " << mask << ", row blocks " << row_blocks.size());
            absl::StatusOr<JoinAggSpec> spec = op->spec({row_blocks, columns});
            ASSERT_TRUE(spec.ok()) << spec.status();
            absl::StatusOr<std::vector<HostTensor>> got = execute_spec(*op, *spec, {input});
            ASSERT_TRUE(got.ok()) << got.status();
            for (int64_t row = 0; row < count; ++row) {
                EXPECT_EQ((*got)[0].data()[row], rows[row].want) << "row " << row;
            }
        }
    }
}

PartialBlock pair(double value, double index) {
    return {HostTensor(Box::from_shape({1, 1}), {index}), {value}};
}

// The ⊕ is commutative and associative exactly, NaN and ties included: every order of
// combining a random list of pairs gives the same pair. Seeded, printed.
TEST(ArgMax, CombiningPairsInAnyOrderGivesTheSamePair) {
    const uint64_t seed = testing::test_seed();
    std::mt19937_64 rng(seed);
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    const std::vector<double> values = {1.0, 2.0, 2.0, kNaN, -kInf, kInf, -0.0, 0.0};
    for (int trial = 0; trial < 200; ++trial) {
        std::vector<PartialBlock> pairs;
        for (int idx = 0; idx < 5; ++idx) {
            pairs.push_back(pair(values[rng() % values.size()], static_cast<double>(rng() % 4)));
        }
        std::vector<int> order = {0, 1, 2, 3, 4};
        std::optional<PartialBlock> first;
        do {
            PartialBlock combined = pairs[order[0]];
            for (size_t k = 1; k < order.size(); ++k) {
                absl::StatusOr<PartialBlock> next =
                    combine_partials(AggOp::arg_max, combined, pairs[order[k]]);
                ASSERT_TRUE(next.ok()) << next.status();
                combined = *std::move(next);
            }
            if (!first) {
                first = combined;
                continue;
            }
            ASSERT_EQ(combined.values.data()[0], first->values.data()[0]) << "trial " << trial;
            const double a = combined.stats[0];
            const double b = first->stats[0];
            ASSERT_TRUE((std::isnan(a) && std::isnan(b)) || a == b) << "trial " << trial;
        } while (std::next_permutation(order.begin(), order.end()));
    }
}

TEST(ArgMax, CombiningRefusesPartialsThatDoNotMatch) {
    const PartialBlock one = pair(1.0, 0.0);
    const PartialBlock other{HostTensor(Box::from_shape({2, 1}), {0.0, 1.0}), {1.0, 2.0}};
    absl::StatusOr<PartialBlock> combined = combine_arg_max(one, other);
    ASSERT_FALSE(combined.ok());
    EXPECT_THAT(combined.status().message(), HasSubstr("different blocks"));
    const PartialBlock no_stats{HostTensor(Box::from_shape({1, 1}), {0.0}), {}};
    combined = combine_arg_max(one, no_stats);
    ASSERT_FALSE(combined.ok());
    EXPECT_THAT(combined.status().message(), HasSubstr("0 statistics"));
    EXPECT_FALSE(combine_partials(AggOp::sum, one, one).ok());
}

// A step graph's greedy choice: the argmax of its logits and their max, saved beside them, which
// agree on every row — NaN rows included — and errors naming the tensor.
TEST(ArgMax, GreedyChoiceSavesTheIdsAndTheLargestLogitOfEveryRow) {
    Graph graph;
    absl::StatusOr<TensorId> x = graph.add_input("x", DType::f32, {{"rows", 7}, {"vocab", 6}});
    ASSERT_TRUE(x.ok());
    absl::StatusOr<TensorId> logits =
        graph.add("logits", "einsum", {{"equation", std::string("rv->rv")}}, {*x});
    ASSERT_TRUE(logits.ok()) << logits.status();
    ASSERT_TRUE(graph.save(*logits).ok());
    absl::StatusOr<GreedyChoice> choice = add_greedy_choice(graph, "logits");
    ASSERT_TRUE(choice.ok()) << choice.status();
    EXPECT_EQ(choice->ids, "logits.greedy_ids");
    EXPECT_EQ(choice->logits, "logits.greedy_logits");
    ASSERT_TRUE(graph.validate().ok());
    EXPECT_EQ(graph.saved().size(), 3u);
    absl::StatusOr<std::map<std::string, HostTensor>> got =
        evaluate_graph(graph, {{"x", rule_input()}});
    ASSERT_TRUE(got.ok()) << got.status();
    const std::vector<Row>& rows = rule_rows();
    for (size_t row = 0; row < rows.size(); ++row) {
        const double id = got->at(choice->ids).data()[row];
        EXPECT_EQ(id, rows[row].want) << "row " << row;
        const double largest = got->at(choice->logits).data()[row];
        const double named = rows[row].values[static_cast<size_t>(id)];
        EXPECT_TRUE(std::isnan(named) ? std::isnan(largest) : largest == named) << "row " << row;
    }
    // Asked again, the names are taken; a tensor not saved, or not [rows, vocab], is named.
    EXPECT_THAT(add_greedy_choice(graph, "logits").status().message(), HasSubstr("logits.greedy"));
    EXPECT_THAT(add_greedy_choice(graph, "x").status().message(),
                HasSubstr("'x' is no saved output"));
    EXPECT_THAT(add_greedy_choice(graph, "logits.greedy_logits").status().message(),
                HasSubstr("logits are floating-point [rows, vocab]"));
}

} // namespace
} // namespace einsummable::ir
