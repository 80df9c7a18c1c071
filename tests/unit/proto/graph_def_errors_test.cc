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

// A name long enough to overflow gRPC's metadata limit in an error message that echoes it. Every
// name a graph gives is capped; the error shows the name's start and length.
TEST(GraphDefErrors, LongNamesAreRefusedWithTheirStartAndLength) {
    const std::string long_name(20000, 'x');
    const auto expect_refused = [&](const v1::GraphDef& graph_def, absl::string_view what) {
        const std::string message = error_message(build_graph(graph_def, kTokens));
        EXPECT_THAT(message, AllOf(HasSubstr(what), HasSubstr("(20000 characters)"),
                                   HasSubstr("at most 256 characters")));
        EXPECT_LT(message.size(), 250u) << message.substr(0, 300);
    };
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(0)->set_name(long_name);
    expect_refused(graph_def, "input tensor name 'xxxxxxxx");
    graph_def = ffn();
    graph_def.mutable_inputs(1)->mutable_dims(0)->set_name(long_name);
    expect_refused(graph_def, "input tensor 'w1' dimension 0 name");
    graph_def = ffn();
    graph_def.mutable_inputs(0)->mutable_dims(0)->set_symbol(long_name);
    expect_refused(graph_def, "input tensor 'x' dimension 0 symbol");
    graph_def = ffn();
    graph_def.mutable_operators(1)->set_name(long_name);
    expect_refused(graph_def, "operator 1 name");
    graph_def = ffn();
    graph_def.mutable_operators(1)->set_kind(long_name);
    expect_refused(graph_def, "operator 'a' kind");
    graph_def = ffn();
    (*graph_def.mutable_operators(1)->mutable_attributes())[long_name].set_int_value(1);
    expect_refused(graph_def, "operator 'a' attribute name");
    graph_def = ffn();
    graph_def.mutable_operators(1)->set_inputs(0, long_name);
    expect_refused(graph_def, "operator 'a' input 0");
    graph_def = ffn();
    graph_def.mutable_operators(1)->add_outputs(long_name);
    expect_refused(graph_def, "operator 'a' output 0");
    graph_def = ffn();
    graph_def.set_saved(0, long_name);
    expect_refused(graph_def, "saved tensor 0");

    graph_def = ffn();
    graph_def.mutable_inputs(0)->set_name(std::string(kMaxNameLength, 'x'));
    graph_def.mutable_operators(0)->set_inputs(0, std::string(kMaxNameLength, 'x'));
    EXPECT_TRUE(build_graph(graph_def, kTokens).ok()) << "256 characters are allowed";
}

// A newline in a name would forge a log line: control characters are refused, the error shows
// the name escaped and the character's code, and stays one line.
TEST(GraphDefErrors, ControlCharactersInNamesAreRefusedEscaped) {
    for (char c : {'\n', '\t', '\0', '\x1b', '\x7f', '\r'}) {
        v1::GraphDef graph_def = ffn();
        const std::string name = absl::StrCat("a", std::string(1, c), "b");
        graph_def.mutable_inputs(0)->set_name(name);
        graph_def.mutable_operators(0)->set_inputs(0, name);
        const std::string message = error_message(build_graph(graph_def, kTokens));
        EXPECT_THAT(message, AllOf(StartsWith("input tensor name 'a"),
                                   HasSubstr(absl::StrCat("contains control character \\x",
                                                          absl::Hex(static_cast<unsigned char>(c),
                                                                    absl::kZeroPad2)))));
        for (char m : message) {
            EXPECT_FALSE(static_cast<unsigned char>(m) < 0x20 || m == '\x7f') << message;
        }
    }
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_inputs(0)->set_name("a\nb");
    EXPECT_EQ(error_message(build_graph(graph_def, kTokens)),
              "input tensor name 'a\\nb' contains control character \\x0a");
    graph_def = ffn();
    (*graph_def.mutable_operators(0)->mutable_attributes())["equation"].set_string_value(
        "ij,jk->ik\n");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                HasSubstr("operator 'h' attribute 'equation': the string contains control "
                          "character \\x0a"));
    // UTF-8 beyond ASCII is a name like any other.
    graph_def = ffn();
    graph_def.mutable_inputs(0)->set_name("x\xc3\xa9");
    graph_def.mutable_operators(0)->set_inputs(0, "x\xc3\xa9");
    EXPECT_TRUE(build_graph(graph_def, kTokens).ok());
}

TEST(GraphDefErrors, QuoteNameEscapesAndCuts) {
    EXPECT_EQ(quote_name("abc"), "'abc'");
    EXPECT_EQ(quote_name("a\nb\x01'\\"), "'a\\nb\\x01\\'\\\\'");
    EXPECT_EQ(quote_name(std::string(80, 'y')),
              absl::StrCat("'", std::string(64, 'y'), "...' (80 characters)"));
    // Not cut inside a UTF-8 character: 63 ASCII bytes, then a 2-byte é.
    EXPECT_EQ(quote_name(absl::StrCat(std::string(63, 'z'), "\xc3\xa9", "tail")),
              absl::StrCat("'", std::string(63, 'z'), "...' (69 characters)"));
}

// An einsum given two outputs, the second the name of the next node, is reported against the
// einsum, not that next node ("node 'a' output 'a': tensor name already used").
TEST(GraphDefErrors, TooManyOutputsNamesTheOperatorThatHasThem) {
    v1::GraphDef graph_def = ffn();
    graph_def.mutable_operators(0)->add_outputs("h");
    graph_def.mutable_operators(0)->add_outputs("a");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(StartsWith("node 'h' (einsum"), HasSubstr("names 2 outputs, the operator "
                                                                "has 1")));
    // Whatever the order of the operators in the file.
    graph_def.mutable_operators()->SwapElements(0, 1);
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(StartsWith("node 'h' (einsum"), HasSubstr("names 2 outputs")));
    graph_def = ffn();
    graph_def.mutable_operators(0)->add_outputs("h1");
    graph_def.mutable_operators(0)->add_outputs("h2");
    graph_def.mutable_operators(1)->set_inputs(0, "h1");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(StartsWith("node 'h' (einsum"), HasSubstr("names 2 outputs")));
    // Outputs of new names, the next node still reading the einsum's own name: the einsum is
    // reported, not that input ("node 'a' input 0: unknown tensor 'h'").
    graph_def = ffn();
    graph_def.mutable_operators(0)->add_outputs("h1");
    graph_def.mutable_operators(0)->add_outputs("h2");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(StartsWith("node 'h' (einsum"), HasSubstr("names 2 outputs")));
    graph_def.mutable_operators()->SwapElements(0, 1);
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(StartsWith("node 'h' (einsum"), HasSubstr("names 2 outputs")));
    // A tensor nobody gives is still reported as such.
    graph_def = ffn();
    graph_def.mutable_operators(1)->set_inputs(0, "hh");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                HasSubstr("node 'a' input 0: unknown tensor 'hh'"));
    // Two nodes giving one name: the second is named, and the first as its owner.
    graph_def = ffn();
    graph_def.mutable_operators(1)->add_outputs("h");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                AllOf(HasSubstr("node 'a'"), HasSubstr("output 0 'h'"),
                      HasSubstr("already exists (output 0 of node 'h')")));
    graph_def = ffn();
    graph_def.mutable_operators(1)->add_outputs("w1");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                HasSubstr("node 'a' output 'w1': tensor name already used by a graph input"));
    graph_def = ffn();
    graph_def.mutable_operators(1)->add_outputs("t");
    graph_def.mutable_operators(1)->add_outputs("t");
    EXPECT_THAT(error_message(build_graph(graph_def, kTokens)),
                HasSubstr("node 'a' output 't': named twice"));
}

} // namespace
} // namespace einsummable::graphdef
