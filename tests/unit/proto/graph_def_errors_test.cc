// Bad graph files: each gets a clean InvalidArgument naming the culprit (the line and column,
// the tensor and dimension, the symbol, the node and attribute), never a crash.

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "proto/graph_def.h"

namespace einsummable::graphdef {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The FFN of proto/examples/ffn.textproto, written so the tests can break it one way each.
constexpr absl::string_view kInputs = R"pb(
  inputs {
    name: "x"
    dtype: F32
    dims { name: "tokens" symbol: "tokens" }
    dims { name: "d_model" fixed: 8 }
  }
  inputs {
    name: "w1"
    dtype: F32
    dims { name: "d_model" fixed: 8 }
    dims { name: "d_ff" fixed: 16 }
  }
)pb";

constexpr absl::string_view kOperators = R"pb(
  operators {
    name: "h"
    kind: "einsum"
    attributes { key: "equation" value { string_value: "ij,jk->ik" } }
    inputs: [ "x", "w1" ]
  }
  operators {
    name: "a"
    kind: "einsum"
    attributes { key: "equation" value { string_value: "ij->ij" } }
    attributes { key: "join" value { string_value: "relu" } }
    inputs: "h"
  }
  saved: "a"
)pb";

const Bindings kTokens = {{"tokens", 4}};

v1::GraphDef parse_ok(absl::string_view text) {
    absl::StatusOr<v1::GraphDef> graph_def = parse_text(text);
    EXPECT_TRUE(graph_def.ok()) << graph_def.status();
    return graph_def.ok() ? *graph_def : v1::GraphDef();
}

v1::GraphDef ffn() {
    return parse_ok(absl::StrCat(kInputs, kOperators));
}

std::string error_message(const absl::Status& status) {
    EXPECT_FALSE(status.ok()) << "expected an error";
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    return std::string(status.message());
}

template <typename T>
std::string error_message(const absl::StatusOr<T>& result) {
    return error_message(result.status());
}

TEST(GraphDefErrors, TheUnbrokenGraphBuilds) {
    absl::StatusOr<ir::Graph> graph = build_graph(ffn(), kTokens);
    EXPECT_TRUE(graph.ok()) << graph.status();
}

TEST(GraphDefErrors, TextSyntaxErrorGivesLineAndColumn) {
    // Line 4: the colon after `dtype` is missing.
    const std::string message = error_message(parse_text("inputs {\n"
                                                         "  name: \"x\"\n"
                                                         "  dims { name: \"d\" fixed: 2 }\n"
                                                         "  dtype F32\n"
                                                         "}\n"));
    EXPECT_THAT(message, AllOf(StartsWith("line 4 column 9: "), HasSubstr("\":\"")));
}

// Protocol Buffers reports errors about a value it has read (an unknown field name, an unknown
// enum value) at the token after it, so only the line is asserted below.
TEST(GraphDefErrors, TextUnknownFieldGivesLineColumnAndField) {
    EXPECT_THAT(error_message(parse_text("inputs { name: \"x\" }\ninptus { name: \"y\" }\n")),
                AllOf(StartsWith("line 2 column "), HasSubstr("no field named \"inptus\"")));
}

TEST(GraphDefErrors, FileNamePrefixesTheError) {
    EXPECT_THAT(error_message(parse_graph_file("saved: [", "model.textproto")),
                StartsWith("model.textproto: line 1 column "));
}

TEST(GraphDefErrors, BadJson) {
    EXPECT_THAT(error_message(parse_json(R"({"inputs": [{"name": "x", })")),
                AllOf(StartsWith("JSON: "), ::testing::SizeIs(::testing::Gt(6u))));
}

TEST(GraphDefErrors, JsonUnknownFieldIsNamed) {
    EXPECT_THAT(error_message(parse_json(R"({"inputs": [{"name": "x", "dtipe": "F32"}]})")),
                AllOf(StartsWith("JSON: "), HasSubstr("dtipe")));
}

TEST(GraphDefErrors, UnknownDtypeNameInTextGivesLineColumnAndValue) {
    EXPECT_THAT(error_message(parse_text("inputs {\n  name: \"x\"\n  dtype: F8 dims {}\n}\n")),
                AllOf(StartsWith("line 3 column "), HasSubstr("\"F8\" for field \"dtype\"")));
}

TEST(GraphDefErrors, UnknownDtypeNameInJsonIsAnError) {
    EXPECT_THAT(error_message(parse_json(R"({"inputs": [{"name": "x", "dtype": "F8"}]})")),
                AllOf(StartsWith("JSON: "), HasSubstr("F8")));
}

TEST(GraphDefErrors, UnknownDtypeNumberNamesTheTensor) {
    // Proto3 enums are open, so a number the schema does not name parses; conversion rejects it.
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(1)->set_dtype(static_cast<v1::DType>(7));
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("input tensor 'w1'"), HasSubstr("unknown dtype 7")));
}

TEST(GraphDefErrors, UnspecifiedDtypeNamesTheTensor) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(1)->clear_dtype();
    EXPECT_THAT(error_message(to_description(graph_def, kTokens)),
                AllOf(HasSubstr("input tensor 'w1'"), HasSubstr("dtype is unspecified")));
}

TEST(GraphDefErrors, UnboundSymbolNamesTensorDimensionAndSymbol) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(0)->mutable_dims(0)->set_name("seq");
    EXPECT_THAT(error_message(build_graph(graph_def, {{"batch", 2}})),
                AllOf(HasSubstr("input tensor 'x'"), HasSubstr("dimension 0 ('seq')"),
                      HasSubstr("symbol 'tokens' is not bound"), HasSubstr("bound: batch=2")));
    EXPECT_THAT(error_message(build_graph(graph_def)), HasSubstr("(bound: none)"));
}

TEST(GraphDefErrors, NonPositiveBindingNamesTheSymbol) {
    EXPECT_THAT(error_message(build_graph(ffn(), {{"tokens", 0}})),
                AllOf(HasSubstr("input tensor 'x' dimension 0 ('tokens')"),
                      HasSubstr("symbol 'tokens' is bound to 0")));
}

TEST(GraphDefErrors, NonPositiveFixedSizeNamesTheDimension) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(1)->mutable_dims(1)->set_fixed(-3);
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("input tensor 'w1' dimension 1 ('d_ff')"), HasSubstr("-3")));
}

TEST(GraphDefErrors, DimensionWithoutSizeNamesTheDimension) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(1)->mutable_dims(0)->clear_fixed();
    EXPECT_THAT(
        error_message(build_graph(graph_def, kTokens)),
        AllOf(HasSubstr("input tensor 'w1' dimension 0 ('d_model')"), HasSubstr("no size")));
}

TEST(GraphDefErrors, AttributeTypeMismatchNamesTheNodeAndAttribute) {
    v1::GraphDef graph_def = ffn();
    (*graph_def.mutable_operators(0)->mutable_attributes())["equation"].set_int_value(3);
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("node 'h'"), HasSubstr("attribute 'equation' must be a string")));
}

TEST(GraphDefErrors, AttributeWithoutValueNamesTheOperatorAndAttribute) {
    v1::GraphDef graph_def = ffn();
    (*graph_def.mutable_operators(1)->mutable_attributes())["join"].Clear();
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("operator 'a' attribute 'join'"), HasSubstr("no value")));
}

TEST(GraphDefErrors, UnknownAttributeNamesTheNode) {
    v1::GraphDef graph_def = ffn();
    (*graph_def.mutable_operators(0)->mutable_attributes())["equaton"].set_string_value("ij");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("node 'h'"), HasSubstr("unknown attribute 'equaton'")));
}

TEST(GraphDefErrors, UnknownOperatorKindNamesTheNodeAndKind) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_operators(1)->set_kind("convolution");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("node 'a'"), HasSubstr("unknown operator 'convolution'")));
}

TEST(GraphDefErrors, UnknownInputTensorNamesTheNode) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_operators(0)->set_inputs(1, "w3");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("node 'h' input 1"), HasSubstr("unknown tensor 'w3'")));
}

} // namespace
} // namespace einsummable::graphdef
