// Index roles (compiler/ir/index_role.h): what each operator declares about its own shardable
// indices, the roles of its output dimensions, an einsum's roles from its operands, and their
// propagation through a graph. Dimension names are deliberately neutral (a, b, c, ...): roles
// never depend on them.

#include <optional>
#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/ir/operator_registry.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;

constexpr IndexRole kToken = IndexRole::token;
constexpr IndexRole kHead = IndexRole::head;
constexpr IndexRole kFeature = IndexRole::feature;
constexpr IndexRole kContracted = IndexRole::contracted;
constexpr IndexRole kContext = IndexRole::context;
using Roles = std::vector<IndexRole>;
using Known = std::vector<std::optional<IndexRole>>;

TensorType f32(std::vector<Dim> dims) {
    return {DType::f32, std::move(dims)};
}

OperatorPtr make(absl::string_view kind, const Attributes& attributes,
                 std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op = make_operator(kind, attributes, std::move(inputs));
    EXPECT_TRUE(op.ok()) << kind << ": " << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

OperatorPtr einsum(const char* equation, std::vector<TensorType> inputs) {
    return make("einsum", {{"equation", std::string(equation)}}, std::move(inputs));
}

TEST(IndexRole, Names) {
    EXPECT_EQ(index_role_name(kToken), "token");
    EXPECT_EQ(index_role_name(kHead), "head");
    EXPECT_EQ(index_role_name(kFeature), "feature");
    EXPECT_EQ(index_role_name(kContracted), "contracted");
    EXPECT_EQ(index_role_name(kContext), "context");
}

TEST(IndexRole, AttentionQueriesAreTokensKvHeadsHeadsKeysContext) {
    const OperatorPtr op =
        make("attention", {{"causal", true}},
             {f32({{"a", 6}, {"b", 4}, {"c", 8}}), f32({{"a", 6}, {"e", 2}, {"c", 8}}),
              f32({{"a", 6}, {"e", 2}, {"f", 5}})});
    ASSERT_NE(op, nullptr);
    const Roles roles = op->index_roles({});
    EXPECT_EQ(roles, (Roles{kToken, kHead, kContext}));
    // Query heads follow the kv heads; d_v follows no index.
    EXPECT_EQ(op->output_roles(roles), (std::vector<Roles>{{kToken, kHead, kFeature}}));
}

TEST(IndexRole, NormsAndSoftmaxRowsAreTokensTheNormalisedDimensionAFeature) {
    for (const char* kind : {"rmsnorm", "layernorm"}) {
        SCOPED_TRACE(kind);
        const OperatorPtr op =
            make(kind, {}, {f32({{"a", 3}, {"b", 4}, {"c", 5}}), f32({{"c", 5}})});
        ASSERT_NE(op, nullptr);
        const Roles roles = op->index_roles({});
        EXPECT_EQ(roles, (Roles{kToken, kToken}));
        EXPECT_EQ(op->output_roles(roles), (std::vector<Roles>{{kToken, kToken, kFeature}}));
    }
    const OperatorPtr last = make("softmax", {}, {f32({{"a", 3}, {"b", 4}, {"c", 5}})});
    ASSERT_NE(last, nullptr);
    EXPECT_EQ(last->index_roles({}), (Roles{kToken, kToken}));
    EXPECT_EQ(last->output_roles(last->index_roles({})),
              (std::vector<Roles>{{kToken, kToken, kFeature}}));
    const OperatorPtr first =
        make("softmax", {{"axis", int64_t{0}}}, {f32({{"a", 3}, {"b", 4}, {"c", 5}})});
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(first->output_roles(first->index_roles({})),
              (std::vector<Roles>{{kFeature, kToken, kToken}}));
}

TEST(IndexRole, RopePositionsAreTokensTheMiddleDimensionsHeads) {
    const OperatorPtr op = make("rope", {}, {f32({{"a", 6}, {"b", 4}, {"c", 8}})});
    ASSERT_NE(op, nullptr);
    const Roles roles = op->index_roles({});
    EXPECT_EQ(roles, (Roles{kToken, kHead}));
    EXPECT_EQ(op->output_roles(roles), (std::vector<Roles>{{kToken, kHead, kFeature}}));
}

TEST(IndexRole, HeadReshapesLeadingDimensionsAreTokensTheHeadsHeads) {
    const OperatorPtr split =
        make("split_heads", {{"heads", int64_t{4}}}, {f32({{"a", 6}, {"b", 32}})});
    ASSERT_NE(split, nullptr);
    EXPECT_EQ(split->index_roles({}), (Roles{kToken, kHead}));
    EXPECT_EQ(split->output_roles(split->index_roles({})),
              (std::vector<Roles>{{kToken, kHead, kFeature}}));

    const OperatorPtr merge = make("merge_heads", {}, {f32({{"a", 6}, {"b", 4}, {"c", 8}})});
    ASSERT_NE(merge, nullptr);
    EXPECT_EQ(merge->index_roles({}), (Roles{kToken, kHead}));
    // The merged h·d follows the heads.
    EXPECT_EQ(merge->output_roles(merge->index_roles({})), (std::vector<Roles>{{kToken, kHead}}));
}

TEST(IndexRole, EinsumWithoutOperandFactsHasFeaturesAndContractedIndices) {
    const OperatorPtr matmul =
        einsum("ij,jk->ik", {f32({{"a", 4}, {"b", 3}}), f32({{"b", 3}, {"c", 2}})});
    ASSERT_NE(matmul, nullptr);
    EXPECT_EQ(matmul->index_roles({}), (Roles{kFeature, kContracted, kFeature}));
    // Two activations, nothing declared: a matrix chain's product has no tokens.
    EXPECT_EQ(matmul->index_roles({{Known(2), Known(2)}, {false, false}}),
              (Roles{kFeature, kContracted, kFeature}));
    const OperatorPtr sum =
        make("einsum", {{"equation", std::string("ij->i")}}, {f32({{"a", 4}, {"b", 3}})});
    ASSERT_NE(sum, nullptr);
    EXPECT_EQ(sum->index_roles({}), (Roles{kFeature, kContracted}));
}

TEST(IndexRole, EinsumRowsAgainstAWeightAreTokensTheWeightsColumnsFeatures) {
    const OperatorPtr matmul =
        einsum("ij,jk->ik", {f32({{"a", 4}, {"b", 3}}), f32({{"b", 3}, {"c", 2}})});
    ASSERT_NE(matmul, nullptr);
    EXPECT_EQ(matmul->index_roles({{Known(2), Known(2)}, {false, true}}),
              (Roles{kToken, kContracted, kFeature}));
    // A weight on the left (w·x): the activation's columns are the tokens.
    EXPECT_EQ(matmul->index_roles({{Known(2), Known(2)}, {true, false}}),
              (Roles{kFeature, kContracted, kToken}));
    // Broadcast bias: the rows are tokens, the bias' dimension a feature.
    const OperatorPtr bias =
        make("einsum", {{"equation", std::string("ij,j->ij")}, {"join", std::string("add")}},
             {f32({{"a", 4}, {"b", 3}}), f32({{"b", 3}})});
    ASSERT_NE(bias, nullptr);
    EXPECT_EQ(bias->index_roles({{Known(2), Known(1)}, {false, true}}), (Roles{kToken, kFeature}));
    // Only weights: nothing is a token.
    EXPECT_EQ(matmul->index_roles({{Known(2), Known(2)}, {true, true}}),
              (Roles{kFeature, kContracted, kFeature}));
}

TEST(IndexRole, EinsumKeepsTheRolesItsOperandsDimensionsCarry) {
    const OperatorPtr scale = make(
        "einsum",
        {{"equation", std::string("ihd->ihd")}, {"join", std::string("scale")}, {"constant", 0.5}},
        {f32({{"a", 6}, {"b", 4}, {"c", 8}})});
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(scale->index_roles({{Known{kToken, kHead, kFeature}}, {false}}),
              (Roles{kToken, kHead, kFeature}));
    // A transpose carries the roles with the letters.
    const OperatorPtr transpose = einsum("ij->ji", {f32({{"a", 4}, {"b", 3}})});
    ASSERT_NE(transpose, nullptr);
    EXPECT_EQ(transpose->index_roles({{Known{kToken, kFeature}}, {false}}),
              (Roles{kToken, kFeature}));
    EXPECT_EQ(transpose->output_roles({kToken, kFeature}),
              (std::vector<Roles>{{kFeature, kToken}}));
    // The first operand that knows wins over the weight rule: a known role is kept even where a
    // weight shares the index.
    const OperatorPtr add =
        make("einsum", {{"equation", std::string("ij,ij->ij")}, {"join", std::string("add")}},
             {f32({{"a", 4}, {"b", 3}}), f32({{"a", 4}, {"b", 3}})});
    ASSERT_NE(add, nullptr);
    EXPECT_EQ(add->index_roles({{Known(2), Known{kToken, kFeature}}, {false, false}}),
              (Roles{kToken, kFeature}));
    EXPECT_EQ(add->index_roles({{Known(2), Known{kToken, std::nullopt}}, {true, false}}),
              (Roles{kToken, kFeature}));
}

// An operator that declares nothing: every index is a feature.
class Undeclared final : public Operator {
public:
    explicit Undeclared(const TensorType& type) : Operator({}, {type}, {type}) {}
    absl::string_view kind() const override { return "undeclared"; }
    std::vector<ShardableIndex> shardable_indices() const override {
        return indices_for_dims(input_types()[0], {0, 1});
    }
    double flops(const FunctionSpec&) const override { return 0.0; }

protected:
    SpecLayout layout() const override {
        const std::vector<DimBinding> bindings = bind_dims(input_types()[0], {0, 1});
        return {{bindings}, {bindings}, {AggOp::none}};
    }
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec&) const override {
        return {inputs[0]};
    }
};

TEST(IndexRole, AnOperatorThatDeclaresNothingHasFeatures) {
    const Undeclared op(f32({{"a", 2}, {"b", 3}}));
    EXPECT_EQ(op.index_roles({}), (Roles{kFeature, kFeature}));
    EXPECT_EQ(op.output_roles({kToken, kHead}), (std::vector<Roles>{{kToken, kHead}}));
}

TEST(IndexRole, MarkWeightTakesOnlyGraphInputs) {
    Graph graph;
    const TensorId x = *graph.add_input("x", DType::f32, {{"a", 4}, {"b", 3}});
    const TensorId y = *graph.add("y", "einsum", {{"equation", std::string("ij->ij")}}, {x});
    EXPECT_FALSE(graph.tensor(x).weight);
    ASSERT_TRUE(graph.mark_weight(x).ok());
    EXPECT_TRUE(graph.tensor(x).weight);
    const absl::Status output = graph.mark_weight(y);
    EXPECT_EQ(output.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(output.message(), HasSubstr("'y'"));
    EXPECT_THAT(output.message(), HasSubstr("not a graph input"));
    EXPECT_EQ(graph.mark_weight(7).code(), absl::StatusCode::kInvalidArgument);
}

TEST(IndexRole, GraphRolesFlowAlongTensorDimensions) {
    // x [a, b] activations, w [b, c] and g [b] weights:
    //   n = rmsnorm(x, g); m = n·w; r = relu(m); t = transpose(r); p = x·w (rows against a
    //   weight); q = x·x' (two activations).
    Graph graph;
    const TensorId x = *graph.add_input("x", DType::f32, {{"a", 4}, {"b", 3}});
    const TensorId x2 = *graph.add_input("x2", DType::f32, {{"b", 3}, {"d", 5}});
    const TensorId w = *graph.add_input("w", DType::f32, {{"b", 3}, {"c", 2}});
    const TensorId g = *graph.add_input("g", DType::f32, {{"b", 3}});
    ASSERT_TRUE(graph.mark_weight(w).ok());
    ASSERT_TRUE(graph.mark_weight(g).ok());
    auto einsum_node = [&](const char* name, const char* equation, std::vector<TensorId> inputs,
                           const char* join = "") {
        Attributes attributes = {{"equation", std::string(equation)}};
        if (*join != '\0') {
            attributes.set("join", std::string(join));
        }
        absl::StatusOr<TensorId> id = graph.add(name, "einsum", attributes, std::move(inputs));
        EXPECT_TRUE(id.ok()) << id.status();
        return *id;
    };
    const TensorId n = *graph.add("n", "rmsnorm", {}, {x, g});
    const TensorId m = einsum_node("m", "ij,jk->ik", {n, w});
    const TensorId r = einsum_node("r", "ij->ij", {m}, "relu");
    einsum_node("t", "ij->ji", {r});
    einsum_node("p", "ij,jk->ik", {x, w});
    einsum_node("q", "ij,jk->ik", {x, x2});
    const std::vector<Roles> roles = graph_index_roles(graph);
    ASSERT_EQ(roles.size(), 6u);
    EXPECT_EQ(roles[0], (Roles{kToken}));                          // n
    EXPECT_EQ(roles[1], (Roles{kToken, kContracted, kFeature}));   // m
    EXPECT_EQ(roles[2], (Roles{kToken, kFeature}));                // r
    EXPECT_EQ(roles[3], (Roles{kToken, kFeature}));                // t: ij->ji, i then j
    EXPECT_EQ(roles[4], (Roles{kToken, kContracted, kFeature}));   // p
    EXPECT_EQ(roles[5], (Roles{kFeature, kContracted, kFeature})); // q
}

} // namespace
} // namespace einsummable::ir
