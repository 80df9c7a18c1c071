// GraphDef files and their conversion to ir: the example files parse and build, text format and
// JSON agree, and any ir graph survives from_graph -> text/JSON -> parse -> build unchanged.

#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "proto/graph_def.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::graphdef {
namespace {

using ::testing::HasSubstr;

std::string read_example(const std::string& name) {
    const std::string path = std::string(EINSUMMABLE_SOURCE_DIR) + "/proto/examples/" + name;
    std::ifstream file(path);
    EXPECT_TRUE(file.good()) << "cannot open " << path;
    std::stringstream contents;
    contents << file.rdbuf();
    return contents.str();
}

v1::GraphDef parse_example(const std::string& name) {
    absl::StatusOr<v1::GraphDef> graph_def = parse_graph_file(read_example(name), name);
    EXPECT_TRUE(graph_def.ok()) << graph_def.status();
    return graph_def.ok() ? *graph_def : v1::GraphDef();
}

bool same_message(const v1::GraphDef& a, const v1::GraphDef& b) {
    return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

const Bindings kTokens64 = {{"tokens", 64}};

TEST(GraphDefExamples, FfnTextprotoBuildsWithTokensBound) {
    const v1::GraphDef graph_def = parse_example("ffn.textproto");
    EXPECT_EQ(symbols(graph_def), (std::set<std::string>{"tokens"}));
    absl::StatusOr<ir::Graph> graph = build_graph(graph_def, kTokens64);
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_EQ(graph->nodes().size(), 3u);
    EXPECT_EQ(graph->tensor(*graph->find_tensor("x")).type.to_string(),
              "f32[tokens=64, d_model=1024]");
    EXPECT_EQ(graph->tensor(*graph->find_tensor("h")).type.to_string(),
              "f32[tokens=64, d_ff=4096]");
    const ir::TensorId y = *graph->find_tensor("y");
    EXPECT_EQ(graph->tensor(y).type.to_string(), "f32[tokens=64, d_model=1024]");
    EXPECT_EQ(graph->saved(), (std::vector<ir::TensorId>{y}));
    EXPECT_THAT(graph->to_string(), HasSubstr("a : f32[tokens=64, d_ff=4096] = einsum("));
    EXPECT_THAT(graph->to_string(), HasSubstr("join=relu)(h)"));
}

TEST(GraphDefExamples, FfnJsonBuildsWithTokensBound) {
    absl::StatusOr<ir::Graph> graph = build_graph(parse_example("ffn.json"), kTokens64);
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(graph->tensor(*graph->find_tensor("y")).type.to_string(),
              "f32[tokens=64, d_model=1024]");
}

TEST(GraphDefExamples, TextAndJsonAreTheSameGraph) {
    const v1::GraphDef text = parse_example("ffn.textproto");
    const v1::GraphDef json = parse_example("ffn.json");
    EXPECT_TRUE(same_message(text, json)) << to_text(text) << "\nvs\n" << to_text(json);
    absl::StatusOr<ir::Graph> from_text = build_graph(text, kTokens64);
    absl::StatusOr<ir::Graph> from_json = build_graph(json, kTokens64);
    ASSERT_TRUE(from_text.ok()) << from_text.status();
    ASSERT_TRUE(from_json.ok()) << from_json.status();
    EXPECT_EQ(from_text->to_string(), from_json->to_string());
}

TEST(GraphDefExamples, ABindingChangesOnlyTheSymbolicDimension) {
    absl::StatusOr<ir::Graph> graph =
        build_graph(parse_example("ffn.textproto"), {{"tokens", 4096}});
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(graph->tensor(*graph->find_tensor("y")).type.to_string(),
              "f32[tokens=4096, d_model=1024]");
}

TEST(GraphDefFiles, FormatIsChosenByFileNameOrFirstCharacter) {
    const std::string json = read_example("ffn.json");
    const std::string text = read_example("ffn.textproto");
    // By contents: JSON under a name that says nothing.
    EXPECT_TRUE(parse_graph_file(json, "model.graph").ok());
    EXPECT_TRUE(parse_graph_file("  \n" + json, "model.graph").ok());
    EXPECT_TRUE(parse_graph_file(text, "model.graph").ok());
    // By name: a .json file is read as JSON even when it is not.
    absl::StatusOr<v1::GraphDef> wrong = parse_graph_file(text, "model.json");
    ASSERT_FALSE(wrong.ok());
    EXPECT_THAT(wrong.status().message(), HasSubstr("model.json: JSON"));
}

TEST(GraphDefFiles, SymbolicDimensionWithoutNameIsNamedAfterItsSymbol) {
    absl::StatusOr<v1::GraphDef> graph_def = parse_text(R"pb(
        inputs {
          name: "x"
          dtype: BF16
          dims { symbol: "tokens" }
          dims { name: "d" fixed: 8 }
        }
        operators {
          name: "y"
          kind: "einsum"
          attributes { key: "equation" value { string_value: "ij->ij" } }
          inputs: "x"
        }
        saved: "y"
    )pb");
    ASSERT_TRUE(graph_def.ok()) << graph_def.status();
    absl::StatusOr<ir::Graph> graph = build_graph(*graph_def, {{"tokens", 3}});
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(graph->tensor(*graph->find_tensor("y")).type.to_string(), "bf16[tokens=3, d=8]");
}

// A LLaMA-like graph of every operator kind there was when it was written, with every attribute
// value type: layernorm (with beta), projections, split_heads, rope, causal GQA attention over
// packed sequences, merge_heads, softmax, scaled einsum, rmsnorm, a max reduction; one node with
// a renamed output and two saved tensors. EveryKindRoundTrip covers every registered kind.
ir::Graph every_operator_graph() {
    const int64_t tokens = 12, d_model = 16, heads_q = 4, heads_kv = 2, d_head = 4;
    const std::vector<int64_t> ends = {5, 12};
    ir::Graph graph;
    auto in = [&](const char* name, std::vector<ir::Dim> dims) {
        absl::StatusOr<ir::TensorId> id = graph.add_input(name, ir::DType::f32, std::move(dims));
        EXPECT_TRUE(id.ok()) << id.status();
        return *id;
    };
    auto op = [&](const char* name, const char* kind, ir::Attributes attributes,
                  std::vector<ir::TensorId> inputs) {
        absl::StatusOr<ir::TensorId> id = graph.add(name, kind, attributes, std::move(inputs));
        EXPECT_TRUE(id.ok()) << name << ": " << id.status();
        return *id;
    };
    auto matmul = ir::Attributes{{"equation", std::string("ij,jk->ik")}};
    const ir::Dim t{"tokens", tokens}, d{"d_model", d_model};
    const ir::Dim q_out{"q_out", heads_q * d_head}, kv_out{"kv_out", heads_kv * d_head};
    const ir::TensorId x = in("x", {t, d});
    const ir::TensorId gamma = in("gamma", {d});
    const ir::TensorId beta = in("beta", {d});
    const ir::TensorId wq = in("wq", {d, q_out});
    const ir::TensorId wk = in("wk", {d, kv_out});
    const ir::TensorId wv = in("wv", {d, kv_out});
    const ir::TensorId wo = in("wo", {q_out, d});

    const ir::TensorId n = op("n", "layernorm", {{"eps", 1e-6}}, {x, gamma, beta});
    const ir::TensorId q = op("q", "einsum", matmul, {n, wq});
    const ir::TensorId k = op("k", "einsum", matmul, {n, wk});
    const ir::TensorId v = op("v", "einsum", matmul, {n, wv});
    const ir::TensorId qh = op("qh", "split_heads",
                               {{"heads", heads_q},
                                {"heads_name", std::string("heads_q")},
                                {"head_dim_name", std::string("d_head")}},
                               {q});
    const ir::TensorId kh = op("kh", "split_heads",
                               {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {k});
    const ir::TensorId vh = op("vh", "split_heads",
                               {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {v});
    const ir::TensorId qr = op("qr", "rope", {{"theta", 500000.0}, {"sequence_ends", ends}}, {qh});
    const ir::TensorId kr = op("kr", "rope", {{"sequence_ends", ends}}, {kh});
    const ir::TensorId attn =
        op("attn", "attention", {{"causal", true}, {"sequence_ends", ends}, {"scale", 0.3}},
           {qr, kr, vh});
    const ir::TensorId merged =
        op("merged", "merge_heads", {{"dim_name", std::string("q_out")}}, {attn});
    absl::StatusOr<std::vector<ir::TensorId>> o =
        graph.add_node("proj", "einsum", matmul, {merged, wo}, {"o"});
    EXPECT_TRUE(o.ok()) << o.status();
    const ir::TensorId p = op("p", "softmax", {{"axis", int64_t{-1}}}, {o->front()});
    const ir::TensorId s = op(
        "s", "einsum",
        {{"equation", std::string("ij->ij")}, {"join", std::string("scale")}, {"constant", 0.125}},
        {p});
    const ir::TensorId r = op("r", "rmsnorm", {{"eps", 1e-5}}, {s, gamma});
    const ir::TensorId m =
        op("m", "einsum", {{"equation", std::string("ij->i")}, {"agg", std::string("max")}}, {r});
    EXPECT_TRUE(graph.save(r).ok());
    EXPECT_TRUE(graph.save(m).ok());
    EXPECT_TRUE(graph.validate().ok());
    return graph;
}

// A graph of one operator: a random case of `kind` (tests/unit/ir/random_cases.h) on inputs of
// its input types, saved.
ir::Graph random_case_graph(absl::string_view kind, std::mt19937_64& rng) {
    const ir::testing::RandomCase random = ir::testing::random_case(kind, rng);
    ir::Graph graph;
    if (random.op == nullptr) {
        return graph;
    }
    std::vector<ir::TensorId> inputs;
    for (const ir::TensorType& type : random.op->input_types()) {
        absl::StatusOr<ir::TensorId> id =
            graph.add_input(absl::StrCat("in", inputs.size()), type.dtype, type.dims);
        EXPECT_TRUE(id.ok()) << random.description << ": " << id.status();
        inputs.push_back(id.ok() ? *id : ir::TensorId{});
    }
    absl::StatusOr<ir::TensorId> output =
        graph.add("op", random.op->kind(), random.op->attributes(), std::move(inputs));
    EXPECT_TRUE(output.ok()) << random.description << ": " << output.status();
    if (output.ok()) {
        EXPECT_TRUE(graph.save(*output).ok());
    }
    return graph;
}

// Every registered operator kind, on random cases of its attributes and input types, survives
// text format and JSON: a new operator's attributes are covered without an edit here.
// `graph` written in the text format (into `text`) parses and builds back to the same graph.
void expect_text_round_trip(const ir::Graph& graph, std::string& text) {
    text = to_text(from_graph(graph));
    absl::StatusOr<v1::GraphDef> parsed = parse_text(text);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << text;
    absl::StatusOr<ir::Graph> rebuilt = build_graph(*parsed);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status() << "\n" << text;
    EXPECT_EQ(rebuilt->to_string(), graph.to_string());
}

// `graph` written as JSON parses to the same message and builds back to the same graph.
void expect_json_round_trip(const ir::Graph& graph) {
    absl::StatusOr<std::string> json = to_json(from_graph(graph));
    ASSERT_TRUE(json.ok()) << json.status();
    absl::StatusOr<v1::GraphDef> parsed = parse_graph_file(*json, "graph.json");
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << *json;
    absl::StatusOr<ir::Graph> rebuilt = build_graph(*parsed);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status() << "\n" << *json;
    EXPECT_EQ(rebuilt->to_string(), graph.to_string());
    EXPECT_TRUE(same_message(*parsed, from_graph(graph))) << *json;
}

class EveryKindRoundTrip : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryKindRoundTrip, TextAndJsonGiveTheSameGraph) {
    std::mt19937_64 rng(ir::testing::test_seed());
    for (int case_idx = 0; case_idx < 20; ++case_idx) {
        const ir::Graph graph = random_case_graph(GetParam(), rng);
        ASSERT_FALSE(::testing::Test::HasFailure());
        std::string text;
        expect_text_round_trip(graph, text);
        expect_json_round_trip(graph);
    }
}

std::vector<std::string> all_kinds() {
    std::vector<std::string> kinds;
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        kinds.emplace_back(kind.name);
    }
    return kinds;
}

INSTANTIATE_TEST_SUITE_P(GraphDef, EveryKindRoundTrip, ::testing::ValuesIn(all_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

TEST(GraphDefRoundTrip, TextRoundTripGivesTheSameGraph) {
    const ir::Graph graph = every_operator_graph();
    std::string text;
    expect_text_round_trip(graph, text);
    ASSERT_FALSE(::testing::Test::HasFailure());
    // print(parse(s)) is a fixpoint.
    absl::StatusOr<ir::Graph> rebuilt = build_graph(*parse_text(text));
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_EQ(to_text(from_graph(*rebuilt)), text);
}

TEST(GraphDefRoundTrip, JsonRoundTripGivesTheSameGraph) {
    expect_json_round_trip(every_operator_graph());
}

TEST(GraphDefRoundTrip, OutputNamesAreWrittenOnlyWhenNotTheDefault) {
    const v1::GraphDef graph_def = from_graph(every_operator_graph());
    for (const v1::OperatorDef& op : graph_def.operators()) {
        if (op.name() == "proj") {
            EXPECT_THAT(op.outputs(), ::testing::ElementsAre("o"));
        } else {
            EXPECT_TRUE(op.outputs().empty()) << op.name();
        }
    }
    EXPECT_THAT(graph_def.saved(), ::testing::ElementsAre("r", "m"));
}

TEST(GraphDefRoundTrip, EveryDtypeSurvives) {
    ir::Graph graph;
    for (ir::DType dtype : {ir::DType::f16, ir::DType::bf16, ir::DType::f32, ir::DType::f64}) {
        const std::string name(ir::dtype_name(dtype));
        absl::StatusOr<ir::TensorId> input = graph.add_input(name, dtype, {{"n", 3}});
        ASSERT_TRUE(input.ok()) << input.status();
        absl::StatusOr<ir::TensorId> out =
            graph.add(name + "_out", "einsum", {{"equation", std::string("i->i")}}, {*input});
        ASSERT_TRUE(out.ok()) << out.status();
        ASSERT_TRUE(graph.save(*out).ok());
    }
    absl::StatusOr<v1::GraphDef> parsed = parse_text(to_text(from_graph(graph)));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<ir::Graph> rebuilt = build_graph(*parsed);
    ASSERT_TRUE(rebuilt.ok()) << rebuilt.status();
    EXPECT_EQ(rebuilt->to_string(), graph.to_string());
    EXPECT_THAT(rebuilt->to_string(), HasSubstr("input bf16 : bf16[n=3]"));
}

} // namespace
} // namespace einsummable::graphdef
