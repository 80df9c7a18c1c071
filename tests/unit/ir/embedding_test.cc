// The embedding operator (compiler/ir/ops/embedding.h): its factory's types and errors, the
// refusal of integer tensors by every other operator, its indices and roles, the vocab-parallel
// spec (partial lookups summed), and the check that names an id outside the table. That every
// spec equals the whole operator, that the kernels match the reference and that the graph
// round-trips are the generic suites' (random_cases.cc).

#include <cstring>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/embedding.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType table_type(int64_t vocab, int64_t d, DType dtype = DType::f32) {
    return {dtype, {{"vocab", vocab}, {"d_model", d}}};
}

TensorType ids_type(int64_t tokens, DType dtype = DType::i32) {
    return {dtype, {{"tokens", tokens}}};
}

std::string error_of(absl::string_view kind, const Attributes& attributes,
                     std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op = make_operator(kind, attributes, std::move(inputs));
    EXPECT_FALSE(op.ok());
    if (op.ok()) {
        return "";
    }
    EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(op.status().message());
}

template <typename Int>
std::vector<std::byte> bytes_of(const std::vector<Int>& values) {
    std::vector<std::byte> bytes(values.size() * sizeof(Int));
    std::memcpy(bytes.data(), values.data(), bytes.size());
    return bytes;
}

TEST(Embedding, OutputIsTokensByTheTablesWidthInTheTablesDtype) {
    for (DType ids : {DType::i32, DType::i64}) {
        absl::StatusOr<OperatorPtr> op =
            make_operator(Embedding::kKind, {}, {table_type(10, 4, DType::bf16), ids_type(6, ids)});
        ASSERT_TRUE(op.ok()) << op.status();
        EXPECT_EQ((*op)->output_types()[0],
                  (TensorType{DType::bf16, {{"tokens", 6}, {"d_model", 4}}}));
        EXPECT_EQ((*op)->describe(), "embedding()");
    }
}

TEST(Embedding, FactoryErrorsNameTheInput) {
    EXPECT_THAT(error_of(Embedding::kKind, {}, {table_type(10, 4)}),
                HasSubstr("embedding takes 2 inputs"));
    EXPECT_THAT(
        error_of(Embedding::kKind, {}, {TensorType{DType::f32, {{"vocab", 10}}}, ids_type(3)}),
        AllOf(HasSubstr("input 0"), HasSubstr("rank 2")));
    EXPECT_THAT(error_of(Embedding::kKind, {}, {table_type(10, 4, DType::i32), ids_type(3)}),
                AllOf(HasSubstr("input 0"), HasSubstr("floating-point rows, not i32")));
    EXPECT_THAT(error_of(Embedding::kKind, {}, {table_type(10, 4), ids_type(3, DType::f32)}),
                AllOf(HasSubstr("input 1"), HasSubstr("i32 or i64, not f32")));
    EXPECT_THAT(error_of(Embedding::kKind, {},
                         {table_type(10, 4), TensorType{DType::i64, {{"b", 2}, {"t", 3}}}}),
                AllOf(HasSubstr("input 1"), HasSubstr("rank 1")));
    EXPECT_THAT(
        error_of(Embedding::kKind, {{"axis", int64_t{0}}}, {table_type(10, 4), ids_type(3)}),
        HasSubstr("axis"));
}

// Integers are ids: an arithmetic operator given one names the input and its dtype.
TEST(Embedding, EveryOtherOperatorRefusesIntegerInputs) {
    EXPECT_THAT(error_of("einsum", {{"equation", std::string("ij,jk->ik")}},
                         {TensorType{DType::f32, {{"t", 3}, {"v", 4}}},
                          TensorType{DType::i64, {{"v", 4}, {"d", 2}}}}),
                AllOf(HasSubstr("input 1 (i64[v=4, d=2])"),
                      HasSubstr("einsum computes on floating-point values"),
                      HasSubstr("takes no i64 tensor")));
    EXPECT_THAT(error_of("softmax", {{"axis", int64_t{-1}}},
                         {TensorType{DType::i32, {{"t", 3}, {"v", 4}}}}),
                AllOf(HasSubstr("input 0"), HasSubstr("softmax computes on floating-point")));
    EXPECT_THAT(error_of("concat", {{"axis", int64_t{0}}}, {ids_type(3), ids_type(2)}),
                HasSubstr("concat computes on floating-point"));
}

TEST(Embedding, TokensWidthAndVocabularyAreShardableAnywhere) {
    absl::StatusOr<OperatorPtr> op =
        make_operator(Embedding::kKind, {}, {table_type(10, 4), ids_type(6)});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<ShardableIndex> indices = (*op)->shardable_indices();
    ASSERT_EQ(indices.size(), 3u);
    EXPECT_EQ(indices[0].to_string(), "tokens:6");
    EXPECT_EQ(indices[1].to_string(), "d_model:4");
    EXPECT_EQ(indices[2].to_string(), "vocab:10");
    EXPECT_EQ((*op)->index_roles({}), (std::vector<IndexRole>{IndexRole::token, IndexRole::feature,
                                                              IndexRole::contracted}));
}

// The vocab-parallel lookup: rows [0, 4) and [4, 10) on their own, each function writing zeros
// for the ids of the other's rows, and the sum of the two is the lookup.
TEST(Embedding, VocabularyBlocksAddUpToTheLookup) {
    absl::StatusOr<OperatorPtr> op =
        make_operator(Embedding::kKind, {}, {table_type(10, 3), ids_type(5)});
    ASSERT_TRUE(op.ok()) << op.status();
    std::vector<double> table(30);
    for (int64_t idx = 0; idx < 30; ++idx) {
        table[idx] = 1.0 + static_cast<double>(idx);
    }
    const std::vector<double> ids = {9, 0, 4, 3, 9};
    const std::vector<HostTensor> inputs = {HostTensor(Box::from_shape({10, 3}), table),
                                            HostTensor(Box::from_shape({5}), ids)};
    absl::StatusOr<JoinAggSpec> spec = (*op)->spec({{{0, 5}}, {{0, 3}}, {{0, 4}, {4, 10}}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 2u);
    EXPECT_EQ(spec->functions[0].inputs[0], Box({{0, 4}, {0, 3}}));
    absl::StatusOr<std::vector<HostTensor>> got = execute_spec(**op, *spec, inputs);
    ASSERT_TRUE(got.ok()) << got.status();
    for (int64_t t = 0; t < 5; ++t) {
        for (int64_t e = 0; e < 3; ++e) {
            EXPECT_EQ((*got)[0].data()[t * 3 + e], table[static_cast<int64_t>(ids[t]) * 3 + e])
                << "token " << t << " element " << e;
        }
    }
}

TEST(Embedding, AnIdOutsideTheTableIsNamedWithItsPosition) {
    absl::StatusOr<OperatorPtr> op =
        make_operator(Embedding::kKind, {}, {table_type(8, 2), ids_type(4, DType::i64)});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_TRUE((*op)->check_input_values(1, bytes_of<int64_t>({0, 7, 3, 1})).ok());
    const absl::Status big = (*op)->check_input_values(1, bytes_of<int64_t>({0, 7, 3000000000, 8}));
    EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(big.message(), "position 2 holds id 3000000000, outside the table's 8 rows [0, 8)");
    // The table's values are not checked.
    EXPECT_TRUE((*op)->check_input_values(0, bytes_of<float>({-1.0f, 99.0f})).ok());

    absl::StatusOr<OperatorPtr> op32 =
        make_operator(Embedding::kKind, {}, {table_type(8, 2), ids_type(3, DType::i32)});
    ASSERT_TRUE(op32.ok()) << op32.status();
    EXPECT_EQ((*op32)->check_input_values(1, bytes_of<int32_t>({0, -1, 9})).message(),
              "position 1 holds id -1, outside the table's 8 rows [0, 8)");
}

// In a graph the check names the input and the node reading it.
TEST(Embedding, TheGraphsCheckNamesTheInputAndTheNode) {
    GraphDescription description;
    description.inputs = {{"table", DType::f32, {{"vocab", 8}, {"d", 2}}},
                          {"ids", DType::i32, {{"tokens", 3}}}};
    description.nodes = {{"embed", "embedding", {}, {"table", "ids"}, {}}};
    description.saved = {"embed"};
    absl::StatusOr<Graph> graph = Graph::build(description);
    ASSERT_TRUE(graph.ok()) << graph.status();
    const TensorId ids = *graph->find_tensor("ids");
    EXPECT_TRUE(check_input_values(*graph, ids, bytes_of<int32_t>({1, 2, 3})).ok());
    EXPECT_EQ(check_input_values(*graph, ids, bytes_of<int32_t>({1, 2, 8})).message(),
              "input 'ids' read by node 'embed' (embedding): position 2 holds id 8, outside the "
              "table's 8 rows [0, 8)");
}

} // namespace
} // namespace einsummable::ir
