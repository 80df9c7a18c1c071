// Bad graphs and bad requests: each category gets a clean InvalidArgument naming the culprit,
// never a crash (Halide's test/error habit; docs/design.md "Conventions").

#include "compiler/ir/graph.h"
#include "compiler/ir/internal_error.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/support/utf8.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TensorDescription input(std::string name, std::vector<Dim> dims, DType dtype = DType::f32) {
    return {std::move(name), dtype, std::move(dims)};
}

NodeDescription node(std::string name, std::string kind, Attributes attributes,
                     std::vector<std::string> inputs) {
    return {std::move(name), std::move(kind), std::move(attributes), std::move(inputs), {}};
}

// An FFN-shaped graph the tests break one way each.
GraphDescription ffn() {
    return {{input("x", {{"tokens", 8}, {"d_model", 4}}),
             input("w1", {{"d_model", 4}, {"d_ff", 6}}),
             input("w2", {{"d_ff", 6}, {"d_model", 4}})},
            {node("h", "einsum", {{"equation", std::string("ij,jk->ik")}}, {"x", "w1"}),
             node("a", "einsum",
                  {{"equation", std::string("ij->ij")}, {"join", std::string("relu")}}, {"h"}),
             node("y", "einsum", {{"equation", std::string("ij,jk->ik")}}, {"a", "w2"})},
            {"y"}};
}

std::string build_error(const GraphDescription& description) {
    absl::StatusOr<Graph> graph = Graph::build(description);
    EXPECT_FALSE(graph.ok()) << "expected an error";
    if (graph.ok()) {
        return "";
    }
    EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << graph.status();
    return std::string(graph.status().message());
}

TEST(GraphErrors, TheUnbrokenGraphBuilds) {
    EXPECT_TRUE(Graph::build(ffn()).ok());
}

TEST(GraphErrors, ShapeMismatchNamesNodeInputDimensionAndSizes) {
    GraphDescription description = ffn();
    description.inputs[1].dims[0].size = 5; // w1 [5, 6] against x [8, 4]
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("node 'h'"), HasSubstr("inputs x, w1"), HasSubstr("input 1"),
                      HasSubstr("dimension 0 ('d_model') has size 5"), HasSubstr("expected 4")));
}

TEST(GraphErrors, UnknownOperator) {
    GraphDescription description = ffn();
    description.nodes[1].kind = "convolution";
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("node 'a'"), HasSubstr("unknown operator 'convolution'"),
                      HasSubstr("einsum")));
}

TEST(GraphErrors, UnknownScalarOp) {
    GraphDescription description = ffn();
    description.nodes[1].attributes.set("join", std::string("relu6"));
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("node 'a'"), HasSubstr("unknown scalar op 'relu6'")));
}

TEST(GraphErrors, UnknownAggregation) {
    GraphDescription description = ffn();
    description.nodes[0].attributes.set("agg", std::string("mean"));
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("node 'h'"), HasSubstr("unknown aggregation 'mean'")));
}

TEST(GraphErrors, DtypeMismatch) {
    GraphDescription description = ffn();
    description.inputs[1].dtype = DType::f16;
    EXPECT_THAT(build_error(description), AllOf(HasSubstr("node 'h'"), HasSubstr("dtype mismatch"),
                                                HasSubstr("f16"), HasSubstr("f32")));
}

TEST(GraphErrors, ZeroSizedDimension) {
    GraphDescription description = ffn();
    description.inputs[0].dims[0].size = 0;
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("input 'x'"), HasSubstr("dimension 0 ('tokens') has size 0")));
}

TEST(GraphErrors, Cycle) {
    GraphDescription description = ffn();
    description.nodes[0].inputs[0] = "y"; // h reads y, which needs a, which needs h
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("cycle"), HasSubstr("'h'"), HasSubstr("'a'"), HasSubstr("'y'")));
}

TEST(GraphErrors, UnknownTensorNames) {
    GraphDescription description = ffn();
    description.nodes[2].inputs[1] = "w3";
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("node 'y' input 1"), HasSubstr("unknown tensor 'w3'")));
    description = ffn();
    description.saved = {"z"};
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("saved output 'z'"), HasSubstr("unknown tensor")));
}

TEST(GraphErrors, DuplicateNames) {
    GraphDescription description = ffn();
    description.nodes[1].name = "x";
    EXPECT_THAT(build_error(description), AllOf(HasSubstr("'x'"), HasSubstr("already used")));
    description = ffn();
    description.inputs.push_back(input("x", {{"n", 1}}));
    EXPECT_THAT(build_error(description),
                AllOf(HasSubstr("input 'x'"), HasSubstr("already exists")));
}

TEST(GraphErrors, NothingSaved) {
    GraphDescription description = ffn();
    description.saved.clear();
    EXPECT_THAT(build_error(description), HasSubstr("saves no tensor"));
}

TEST(GraphErrors, BadEquationsAndAttributes) {
    GraphDescription description = ffn();
    description.nodes[0].attributes.set("equation", std::string("ij,jk"));
    EXPECT_THAT(build_error(description), HasSubstr("must have the form 'inputs->output'"));
    description.nodes[0].attributes.set("equation", std::string("ijk,jk->ik"));
    EXPECT_THAT(build_error(description), HasSubstr("input 0 has rank 2"));
    description.nodes[0].attributes.set("equation", std::string("ij,jk->iz"));
    EXPECT_THAT(build_error(description), HasSubstr("output index 'z' appears in no input"));
    description.nodes[0].attributes.set("equation", std::string("ii,jk->ik"));
    EXPECT_THAT(build_error(description), HasSubstr("index 'i' repeats"));
    description = ffn();
    description.nodes[0].attributes.set("equation", int64_t{3});
    EXPECT_THAT(build_error(description), HasSubstr("attribute 'equation' must be a string"));
    description = ffn();
    description.nodes[0].attributes.set("equaton", std::string("ij,jk->ik"));
    EXPECT_THAT(build_error(description), HasSubstr("unknown attribute 'equaton'"));
    description = ffn();
    description.nodes[1].attributes.set("join", std::string("add"));
    EXPECT_THAT(build_error(description), HasSubstr("join 'add' takes 2 operand(s)"));
}

// A non-ASCII index quoted one byte at a time ("has '\xce'") would leave the message invalid
// UTF-8, which grpcio would decode whole as Latin-1 ('αβ' shown as 'Î±Î²').
// The user's characters come back whole, and the message stays UTF-8.
TEST(GraphErrors, NonAsciiEquationIsQuotedAsTheUserWroteIt) {
    GraphDescription description = ffn();
    description.nodes[1].attributes.set("equation", std::string("\u03b1\u03b2->\u03b1\u03b2"));
    std::string message = build_error(description);
    EXPECT_THAT(message, AllOf(HasSubstr("node 'a'"),
                               HasSubstr("input 0 term '\u03b1\u03b2' has '\u03b1' at position 0"),
                               HasSubstr("indices are single letters")));
    EXPECT_TRUE(support::is_valid_utf8(message)) << message;
    // Past ASCII letters: the position counts characters.
    description.nodes[1].attributes.set("equation", std::string("i\u00e9->i"));
    message = build_error(description);
    EXPECT_THAT(message, HasSubstr("input 0 term 'i\u00e9' has '\u00e9' at position 1"));
    EXPECT_TRUE(support::is_valid_utf8(message)) << message;
    // Bytes that are not UTF-8 (possible only from C++: protobuf refuses them on the wire) are
    // escaped, so the message is still UTF-8 and says which byte it was.
    description.nodes[1].attributes.set("equation", std::string("i\xff->i"));
    message = build_error(description);
    EXPECT_THAT(message, HasSubstr("input 0 term 'i\\xff' has '\\xff' at position 1"));
    EXPECT_TRUE(support::is_valid_utf8(message)) << message;
    description.nodes[1].attributes.set("equation", std::string("\u03b1\u03b2"));
    EXPECT_THAT(build_error(description), HasSubstr("equation '\u03b1\u03b2' must have the form"));
}

// Attention: q [16, heads_q, 4], k and v [16, heads_kv, 4].
GraphDescription attention_graph(int64_t heads_q, int64_t heads_kv, Attributes attributes) {
    const Dim seq{"sequence", 16};
    return {{input("q", {seq, {"heads_q", heads_q}, {"d_head", 4}}),
             input("k", {seq, {"heads_kv", heads_kv}, {"d_head", 4}}),
             input("v", {seq, {"heads_kv", heads_kv}, {"d_head", 4}})},
            {node("attn", "attention", std::move(attributes), {"q", "k", "v"})},
            {"attn"}};
}

TEST(GraphErrors, HeadsQNotAMultipleOfHeadsKv) {
    EXPECT_TRUE(Graph::build(attention_graph(8, 4, {})).ok());
    EXPECT_THAT(build_error(attention_graph(6, 4, {})),
                AllOf(HasSubstr("node 'attn'"), HasSubstr("heads_q ('heads_q' = 6)"),
                      HasSubstr("not a multiple of heads_kv ('heads_kv' = 4)")));
}

TEST(GraphErrors, SequenceEndsOutOfRange) {
    EXPECT_THAT(
        build_error(attention_graph(4, 2, {{"sequence_ends", std::vector<int64_t>{8, 20}}})),
        AllOf(HasSubstr("node 'attn'"), HasSubstr("sequence_ends[1] = 20 is out of range")));
    EXPECT_THAT(
        build_error(attention_graph(4, 2, {{"sequence_ends", std::vector<int64_t>{0, 16}}})),
        HasSubstr("sequence_ends[0] = 0 is out of range"));
}

TEST(GraphErrors, SequenceEndsNotIncreasing) {
    EXPECT_THAT(
        build_error(attention_graph(4, 2, {{"sequence_ends", std::vector<int64_t>{8, 8, 16}}})),
        HasSubstr("sequence_ends[1] = 8 is not increasing"));
}

TEST(GraphErrors, SequenceEndsNotEndingAtTheLength) {
    EXPECT_THAT(
        build_error(attention_graph(4, 2, {{"sequence_ends", std::vector<int64_t>{4, 12}}})),
        HasSubstr("sequence_ends end at 12, not at the sequence length 16"));
}

// Interval requests are checked by Operator::spec, against the operator's shardable indices.
TEST(GraphErrors, IntervalRequestsThatDoNotPartitionOrCutWhereForbidden) {
    absl::StatusOr<Graph> graph =
        Graph::build(attention_graph(4, 2, {{"sequence_ends", std::vector<int64_t>{4, 16}}}));
    ASSERT_TRUE(graph.ok()) << graph.status();
    const Operator& op = *graph->node(0).op;
    const absl::StatusOr<JoinAggSpec> gap = op.spec({{{0, 4}, {5, 16}}, {{0, 2}}, {{0, 16}}});
    ASSERT_FALSE(gap.ok());
    EXPECT_THAT(std::string(gap.status().message()),
                AllOf(HasSubstr("index 'sequence'"), HasSubstr("do not partition")));
    const absl::StatusOr<JoinAggSpec> overlap = op.spec({{{0, 16}}, {{0, 2}}, {{0, 9}, {8, 16}}});
    ASSERT_FALSE(overlap.ok());
    EXPECT_THAT(std::string(overlap.status().message()), HasSubstr("index 'keys'"));
    const absl::StatusOr<JoinAggSpec> too_few = op.spec({{{0, 16}}});
    EXPECT_FALSE(too_few.ok());
}

TEST(GraphErrors, OtherOperatorsRejectBadShapes) {
    const TensorType x{DType::f32, {{"tokens", 4}, {"d_model", 6}}};
    const TensorType wrong{DType::f32, {{"d_model", 5}}};
    auto message = [](const absl::StatusOr<OperatorPtr>& op) {
        EXPECT_FALSE(op.ok());
        return op.ok() ? std::string() : std::string(op.status().message());
    };
    EXPECT_THAT(message(make_operator("rmsnorm", {}, {x, wrong})),
                AllOf(HasSubstr("input 1"), HasSubstr("expected a vector of 6")));
    EXPECT_THAT(message(make_operator("layernorm", {}, {x})), HasSubstr("takes 2-3 inputs"));
    EXPECT_THAT(message(make_operator("softmax", {{"axis", int64_t{2}}}, {x})),
                HasSubstr("axis 2 is out of range"));
    EXPECT_THAT(message(make_operator("split_heads", {{"heads", int64_t{4}}}, {x})),
                HasSubstr("does not split into 4 heads"));
    EXPECT_THAT(message(make_operator("rope", {}, {TensorType{DType::f32, {{"t", 4}, {"d", 3}}}})),
                HasSubstr("even head dimension"));
    EXPECT_THAT(message(make_operator("merge_heads", {}, {TensorType{DType::f32, {{"t", 4}}}})),
                HasSubstr("at least two dimensions"));
}

TEST(GraphErrors, ReferenceRejectsBlocksInconsistentWithTheSpec) {
    absl::StatusOr<OperatorPtr> op =
        make_operator("einsum", {{"equation", std::string("ij,jk->ik")}},
                      {TensorType{DType::f32, {{"i", 4}, {"j", 4}}},
                       TensorType{DType::f32, {{"j", 4}, {"k", 4}}}});
    ASSERT_TRUE(op.ok());
    // j is [0, 2) in the lhs but [2, 4) in the rhs: no spec produces that.
    const FunctionSpec function = {{Box({{0, 4}, {0, 2}}), Box({{2, 4}, {0, 4}})},
                                   {Box({{0, 4}, {0, 4}})}};
    std::vector<HostTensor> blocks = {HostTensor(function.inputs[0]),
                                      HostTensor(function.inputs[1])};
    absl::StatusOr<std::vector<HostTensor>> out = (*op)->reference(blocks, function);
    ASSERT_FALSE(out.ok());
    EXPECT_THAT(std::string(out.status().message()), HasSubstr("inconsistent"));
}

// A failed internal check is a bug, not bad input, but it must not take a server down: it
// throws InternalError (naming file, line and condition), which callers can catch.
TEST(InternalErrorTest, AFailedCheckThrowsNamingWhereAndWhy) {
    try {
        EINSUMMABLE_CHECK(1 + 1 == 3, "arithmetic still works");
        FAIL() << "EINSUMMABLE_CHECK(false) returned";
    } catch (const InternalError& error) {
        EXPECT_THAT(std::string(error.what()),
                    AllOf(HasSubstr("graph_errors_test.cc:"), HasSubstr("1 + 1 == 3 failed"),
                          HasSubstr("arithmetic still works")));
    }
    EINSUMMABLE_CHECK(1 + 1 == 2, "never thrown");
}

} // namespace
} // namespace einsummable::ir
