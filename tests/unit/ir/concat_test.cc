// The concat operator (compiler/ir/ops/concat.h): its factory's types and errors, its shardable
// indices and specs (the axis never split), the roles of its indices, and its reference on a
// small example. That every spec equals the whole operator, that the kernels match the
// reference and that the attributes round-trip are the generic suites' (random_cases.cc).

#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/concat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorType f32(std::vector<Dim> dims) {
    return {DType::f32, std::move(dims)};
}

absl::StatusOr<OperatorPtr> concat(const Attributes& attributes, std::vector<TensorType> inputs) {
    return make_operator(Concat::kKind, attributes, std::move(inputs));
}

std::string error_of(const Attributes& attributes, std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op = concat(attributes, std::move(inputs));
    EXPECT_FALSE(op.ok());
    if (op.ok()) {
        return "";
    }
    EXPECT_EQ(op.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(op.status().message());
}

TEST(Concat, OutputIsTheFirstInputsTypeWithTheAxisSummed) {
    absl::StatusOr<OperatorPtr> op =
        concat({{"axis", int64_t{1}}},
               {f32({{"t", 4}, {"a", 3}, {"d", 2}}), f32({{"t", 4}, {"b", 5}, {"e", 2}}),
                f32({{"s", 4}, {"c", 1}, {"d", 2}})});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ((*op)->output_types()[0], f32({{"t", 4}, {"a", 9}, {"d", 2}}));
    // The attributes recreate it: the axis normalised, the dimension's name explicit.
    EXPECT_EQ((*op)->describe(), "concat(axis=1 dim_name=a)");
    EXPECT_EQ((*op)->num_inputs(), 3);
}

TEST(Concat, NegativeAxisCountsFromTheEndAndDimNameNamesTheAxis) {
    absl::StatusOr<OperatorPtr> op =
        concat({{"axis", int64_t{-1}}, {"dim_name", std::string("joined")}},
               {f32({{"t", 4}, {"a", 3}}), f32({{"t", 4}, {"b", 2}})});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ(dynamic_cast<const Concat&>(**op).axis(), 1);
    EXPECT_EQ((*op)->output_types()[0], f32({{"t", 4}, {"joined", 5}}));
    EXPECT_EQ((*op)->attributes().get_int("axis").value(), 1);
}

TEST(Concat, OneInputIsACopy) {
    absl::StatusOr<OperatorPtr> op = concat({{"axis", int64_t{0}}}, {f32({{"t", 4}})});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ((*op)->output_types()[0], f32({{"t", 4}}));
}

TEST(Concat, FactoryErrorsNameTheAttributeInputAndDimension) {
    const TensorType x = f32({{"t", 4}, {"d", 3}});
    EXPECT_THAT(error_of({{"axis", int64_t{0}}}, {}), HasSubstr("at least 1 input, got 0"));
    EXPECT_THAT(error_of({}, {x, x}), HasSubstr("missing attribute 'axis'"));
    EXPECT_THAT(error_of({{"axis", std::string("0")}}, {x}),
                HasSubstr("attribute 'axis' must be a int"));
    EXPECT_THAT(error_of({{"axis", int64_t{0}}, {"dims", int64_t{1}}}, {x}),
                HasSubstr("unknown attribute 'dims' (known: axis, dim_name)"));
    EXPECT_THAT(error_of({{"axis", int64_t{2}}}, {x}),
                HasSubstr("concat axis 2 is out of range for rank 2"));
    EXPECT_THAT(error_of({{"axis", int64_t{-3}}}, {x}),
                AllOf(HasSubstr("input 0"), HasSubstr("concat axis -3 is out of range")));
    EXPECT_THAT(error_of({{"axis", int64_t{0}}, {"dim_name", int64_t{1}}}, {x}),
                HasSubstr("attribute 'dim_name' must be a string"));
    EXPECT_THAT(error_of({{"axis", int64_t{0}}}, {f32({})}),
                HasSubstr("concat axis 0 is out of range for rank 0"));
    // The input, the dimension and both sizes.
    EXPECT_THAT(error_of({{"axis", int64_t{1}}}, {x, x, f32({{"u", 5}, {"e", 2}})}),
                AllOf(HasSubstr("input 2 (f32[u=5, e=2])"),
                      HasSubstr("dimension 0 ('u') has size 5 where input 0's ('t') has 4")));
    EXPECT_THAT(error_of({{"axis", int64_t{1}}}, {x, f32({{"t", 4}})}),
                AllOf(HasSubstr("input 1"), HasSubstr("needs input 0's rank 2, got 1")));
    EXPECT_THAT(error_of({{"axis", int64_t{0}}}, {x, {DType::f16, x.dims}}),
                AllOf(HasSubstr("input 1"), HasSubstr("needs input 0's dtype f32, got f16")));
}

TEST(Concat, EveryDimensionButTheAxisIsShardableTheAxisIsReadWhole) {
    absl::StatusOr<OperatorPtr> op =
        concat({{"axis", int64_t{1}}},
               {f32({{"t", 4}, {"a", 3}, {"d", 2}}), f32({{"t", 4}, {"b", 1}, {"d", 2}})});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<ShardableIndex> indices = (*op)->shardable_indices();
    ASSERT_EQ(indices.size(), 2u);
    EXPECT_EQ(indices[0].name, "t");
    EXPECT_EQ(indices[1].name, "d");
    EXPECT_TRUE(indices[0].any_position && indices[1].any_position);
    absl::StatusOr<JoinAggSpec> spec = (*op)->spec({{{0, 1}, {1, 4}}, {{0, 2}}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 2u);
    const FunctionSpec& second = spec->functions[1];
    EXPECT_EQ(second.inputs[0], Box({{1, 4}, {0, 3}, {0, 2}}));
    EXPECT_EQ(second.inputs[1], Box({{1, 4}, {0, 1}, {0, 2}}));
    EXPECT_EQ(second.outputs[0], Box({{1, 4}, {0, 4}, {0, 2}}));
    EXPECT_EQ(spec->aggregations, std::vector<AggOp>{AggOp::none});
    EXPECT_EQ((*op)->flops(second), 0.0);
}

TEST(Concat, ReferenceJoinsTheBlocksAlongTheAxis) {
    // [2, 1] and [2, 2] along axis 1: rows (a0 b0 b1).
    absl::StatusOr<OperatorPtr> op =
        concat({{"axis", int64_t{1}}}, {f32({{"t", 2}, {"a", 1}}), f32({{"t", 2}, {"b", 2}})});
    ASSERT_TRUE(op.ok()) << op.status();
    const FunctionSpec whole = (*op)->whole_spec().functions[0];
    const std::vector<HostTensor> inputs = {HostTensor(whole.inputs[0], {1, 2}),
                                            HostTensor(whole.inputs[1], {10, 11, 20, 21})};
    absl::StatusOr<std::vector<HostTensor>> out = (*op)->reference(inputs, whole);
    ASSERT_TRUE(out.ok()) << out.status();
    EXPECT_EQ((*out)[0].values(), (std::vector<double>{1, 10, 11, 2, 20, 21}));
}

TEST(Concat, IndicesTakeTheRolesTheirInputsDimensionsCarry) {
    absl::StatusOr<OperatorPtr> op =
        concat({{"axis", int64_t{1}}},
               {f32({{"t", 4}, {"a", 3}, {"d", 2}}), f32({{"t", 4}, {"b", 1}, {"d", 2}})});
    ASSERT_TRUE(op.ok()) << op.status();
    // Nothing known: features (as an element-wise einsum's indices).
    EXPECT_EQ((*op)->index_roles({}),
              (std::vector<IndexRole>{IndexRole::feature, IndexRole::feature}));
    // The first input whose producer declared a role gives it; the axis's roles do not matter.
    OperandRoles operands;
    operands.dims = {{std::nullopt, IndexRole::head, std::nullopt},
                     {IndexRole::token, IndexRole::token, IndexRole::head}};
    const std::vector<IndexRole> roles = (*op)->index_roles(operands);
    EXPECT_EQ(roles, (std::vector<IndexRole>{IndexRole::token, IndexRole::head}));
    // The axis follows no index: a feature of the output.
    EXPECT_EQ((*op)->output_roles(roles),
              (std::vector<std::vector<IndexRole>>{
                  {IndexRole::token, IndexRole::feature, IndexRole::head}}));
}

TEST(Concat, GraphRolesFlowThroughIt) {
    // Two softmax outputs (rows tokens) joined along their last axis: the rows stay tokens.
    Graph graph;
    const TensorId x = *graph.add_input("x", DType::f32, {{"a", 4}, {"b", 3}});
    const TensorId y = *graph.add_input("y", DType::f32, {{"a", 4}, {"c", 2}});
    const TensorId sx = *graph.add("sx", "softmax", {}, {x});
    const TensorId sy = *graph.add("sy", "softmax", {}, {y});
    absl::StatusOr<TensorId> joined = graph.add("j", "concat", {{"axis", int64_t{1}}}, {sx, sy});
    ASSERT_TRUE(joined.ok()) << joined.status();
    const std::vector<std::vector<IndexRole>> roles = graph_index_roles(graph);
    ASSERT_EQ(roles.size(), 3u);
    EXPECT_EQ(roles[2], (std::vector<IndexRole>{IndexRole::token}));
}

TEST(Concat, GraphErrorsNameTheNode) {
    Graph graph;
    const TensorId x = *graph.add_input("x", DType::f32, {{"a", 4}, {"b", 3}});
    const TensorId y = *graph.add_input("y", DType::f32, {{"a", 5}, {"c", 2}});
    absl::StatusOr<TensorId> joined = graph.add("j", "concat", {{"axis", int64_t{1}}}, {x, y});
    ASSERT_FALSE(joined.ok());
    EXPECT_THAT(joined.status().message(),
                AllOf(HasSubstr("node 'j'"), HasSubstr("input 1"),
                      HasSubstr("dimension 0 ('a') has size 5 where input 0's ('a') has 4")));
}

} // namespace
} // namespace einsummable::ir
