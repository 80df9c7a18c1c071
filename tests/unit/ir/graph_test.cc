#include <iostream>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;

Attributes equation(const char* text) {
    return {{"equation", std::string(text)}};
}

TEST(Graph, BuildOrdersNodesTopologicallyAndLinksConsumers) {
    // Nodes listed consumer first.
    GraphDescription description = {
        {{"x", DType::f32, {{"tokens", 4}, {"d", 3}}}, {"w", DType::f32, {{"d", 3}, {"e", 2}}}},
        {{"out",
          "einsum",
          {{"equation", std::string("ij->ij")}, {"join", std::string("relu")}},
          {"mm"},
          {}},
         {"mm", "einsum", equation("ij,jk->ik"), {"x", "w"}, {}}},
        {"out"}};
    absl::StatusOr<Graph> graph = Graph::build(description);
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_EQ(graph->nodes().size(), 2u);
    EXPECT_EQ(graph->node(0).name, "mm");
    EXPECT_EQ(graph->node(1).name, "out");
    const TensorId mm = *graph->find_tensor("mm");
    EXPECT_EQ(graph->tensor(mm).producer, 0);
    EXPECT_EQ(graph->tensor(mm).consumers, (std::vector<NodeId>{1}));
    EXPECT_EQ(graph->tensor(mm).type.to_string(), "f32[tokens=4, e=2]");
    EXPECT_EQ(graph->saved(), (std::vector<TensorId>{*graph->find_tensor("out")}));
    EXPECT_THAT(graph->to_string(),
                HasSubstr("mm : f32[tokens=4, e=2] = einsum(agg=sum equation=ij,jk->ik "
                          "join=mul)(x, w)"));
}

// A small LLaMA-style block (docs/workloads.md) using every operator kind: RMSNorm, Q/K/V
// projections, split heads, RoPE, causal GQA over packed sequences, merge heads, output
// projection, residual, RMSNorm, SwiGLU FFN, residual.
Graph small_llama_block() {
    const int64_t tokens = 12, d_model = 16, heads_q = 4, heads_kv = 2, d_head = 4, d_ff = 24;
    const std::vector<int64_t> ends = {5, 12};
    Graph graph;
    auto in = [&](const char* name, std::vector<Dim> dims) {
        return *graph.add_input(name, DType::f32, std::move(dims));
    };
    auto op = [&](const char* name, const char* kind, Attributes attributes,
                  std::vector<TensorId> inputs) {
        absl::StatusOr<TensorId> id = graph.add(name, kind, attributes, std::move(inputs));
        EXPECT_TRUE(id.ok()) << id.status();
        return *id;
    };
    const Dim t{"tokens", tokens}, d{"d_model", d_model}, f{"d_ff", d_ff};
    const TensorId x = in("x", {t, d});
    const TensorId norm1_w = in("norm1_w", {d});
    const TensorId wq = in("wq", {d, {"q_out", heads_q * d_head}});
    const TensorId wk = in("wk", {d, {"kv_out", heads_kv * d_head}});
    const TensorId wv = in("wv", {d, {"kv_out", heads_kv * d_head}});
    const TensorId wo = in("wo", {{"q_out", heads_q * d_head}, d});
    const TensorId norm2_w = in("norm2_w", {d});
    const TensorId w1 = in("w1", {d, f});
    const TensorId w3 = in("w3", {d, f});
    const TensorId w2 = in("w2", {f, d});

    const TensorId n1 = op("n1", "rmsnorm", {{"eps", 1e-5}}, {x, norm1_w});
    const TensorId q = op("q", "einsum", equation("ij,jk->ik"), {n1, wq});
    const TensorId k = op("k", "einsum", equation("ij,jk->ik"), {n1, wk});
    const TensorId v = op("v", "einsum", equation("ij,jk->ik"), {n1, wv});
    const TensorId qh =
        op("qh", "split_heads", {{"heads", heads_q}, {"heads_name", std::string("heads_q")}}, {q});
    const TensorId kh = op("kh", "split_heads",
                           {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {k});
    const TensorId vh = op("vh", "split_heads",
                           {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {v});
    const TensorId qr = op("qr", "rope", {{"sequence_ends", ends}}, {qh});
    const TensorId kr = op("kr", "rope", {{"sequence_ends", ends}}, {kh});
    const TensorId attn =
        op("attn", "attention", {{"causal", true}, {"sequence_ends", ends}}, {qr, kr, vh});
    const TensorId merged = op("merged", "merge_heads", {}, {attn});
    const TensorId o = op("o", "einsum", equation("ij,jk->ik"), {merged, wo});
    const TensorId r1 =
        op("r1", "einsum", {{"equation", std::string("ij,ij->ij")}, {"join", std::string("add")}},
           {x, o});
    const TensorId n2 = op("n2", "rmsnorm", {}, {r1, norm2_w});
    const TensorId gate = op("gate", "einsum", equation("ij,jk->ik"), {n2, w1});
    const TensorId up = op("up", "einsum", equation("ij,jk->ik"), {n2, w3});
    const TensorId act =
        op("act", "einsum", {{"equation", std::string("ij->ij")}, {"join", std::string("silu")}},
           {gate});
    const TensorId prod = op("prod", "einsum", equation("ij,ij->ij"), {act, up});
    const TensorId down = op("down", "einsum", equation("ij,jk->ik"), {prod, w2});
    const TensorId out =
        op("out", "einsum", {{"equation", std::string("ij,ij->ij")}, {"join", std::string("add")}},
           {r1, down});
    EXPECT_TRUE(graph.save(out).ok());
    return graph;
}

NodeDescription relu_of(std::string name, std::string input) {
    return {std::move(name),
            "einsum",
            {{"equation", std::string("ij->ij")}, {"join", std::string("relu")}},
            {std::move(input)},
            {}};
}

// Build adds nodes in the order of passes over the description: each pass takes, in index
// order, every node whose inputs exist by then; what becomes ready behind it waits for the
// next pass. So the order (and with it the first error) is the same as a rescanning loop's.
TEST(Graph, BuildAddsNodesInPassOrder) {
    GraphDescription description = {{{"x", DType::f32, {{"i", 2}, {"j", 2}}}},
                                    {relu_of("c", "b"), relu_of("a", "x"), relu_of("b", "a"),
                                     relu_of("e", "c"), relu_of("d", "x")},
                                    {"e", "d"}};
    absl::StatusOr<Graph> graph = Graph::build(description);
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::vector<std::string> order;
    for (const GraphNode& node : graph->nodes()) {
        order.push_back(node.name);
    }
    // Pass 1: a, then b (ready after a, ahead of the pass), d; pass 2: c, then e.
    EXPECT_EQ(order, (std::vector<std::string>{"a", "b", "d", "c", "e"}));
}

// A long chain listed last node first: every node but the first waits for one behind it. Built
// without rescanning (a rescan per added node was cubic: passes times nodes times a lookup that
// scanned every tensor), so 5,000 nodes build at once; checked by the result, not timed.
TEST(Graph, BuildsALongChainListedBackwards) {
    constexpr int kNodes = 5000;
    GraphDescription description;
    description.inputs.push_back({"x", DType::f32, {{"i", 2}, {"j", 2}}});
    for (int i = kNodes - 1; i >= 0; --i) {
        description.nodes.push_back(
            relu_of(absl::StrCat("r", i), i == 0 ? std::string("x") : absl::StrCat("r", i - 1)));
    }
    description.saved.push_back(absl::StrCat("r", kNodes - 1));
    absl::StatusOr<Graph> graph = Graph::build(description);
    ASSERT_TRUE(graph.ok()) << graph.status();
    ASSERT_EQ(graph->nodes().size(), static_cast<size_t>(kNodes));
    for (int i = 0; i < kNodes; ++i) {
        ASSERT_EQ(graph->node(i).name, absl::StrCat("r", i));
    }
    EXPECT_EQ(graph->find_tensor(absl::StrCat("r", kNodes - 1)), kNodes);
}

TEST(Graph, SmallLlamaBlockTypesCheck) {
    const Graph graph = small_llama_block();
    ASSERT_TRUE(graph.validate().ok());
    EXPECT_EQ(graph.tensor(*graph.find_tensor("attn")).type.to_string(),
              "f32[tokens=12, heads_q=4, d_head=4]");
    EXPECT_EQ(graph.tensor(*graph.find_tensor("merged")).type.to_string(),
              "f32[tokens=12, heads_q*d_head=16]");
    EXPECT_EQ(graph.tensor(*graph.find_tensor("out")).type.to_string(),
              "f32[tokens=12, d_model=16]");
}

// Running every node with a random spec gives the same saved output as running every node
// whole: the core property composed through a whole block.
TEST(Graph, BlockWithRandomSpecsPerNodeEqualsWholeEvaluation) {
    const Graph graph = small_llama_block();
    const uint64_t seed = testing::test_seed();
    std::cout << "graph property: seed " << seed << "\n";
    for (int trial = 0; trial < 20; ++trial) {
        std::mt19937_64 rng(seed + trial);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial);
        std::map<std::string, HostTensor> inputs;
        std::vector<std::optional<HostTensor>> values(graph.tensors().size());
        for (TensorId id : graph.inputs()) {
            inputs[graph.tensor(id).name] = HostTensor::random(graph.tensor(id).type.box(), rng);
            values[id] = inputs[graph.tensor(id).name];
        }
        for (const GraphNode& node : graph.nodes()) {
            std::vector<HostTensor> node_inputs;
            for (TensorId id : node.inputs) {
                node_inputs.push_back(*values[id]);
            }
            const IntervalRequest request =
                testing::random_request(node.op->shardable_indices(), rng);
            absl::StatusOr<JoinAggSpec> spec = node.op->spec(request);
            ASSERT_TRUE(spec.ok()) << node.name << ": " << spec.status();
            absl::StatusOr<std::vector<HostTensor>> outputs =
                execute_spec(*node.op, *spec, node_inputs);
            ASSERT_TRUE(outputs.ok()) << node.name << ": " << outputs.status();
            values[node.outputs[0]] = (*outputs)[0];
        }
        absl::StatusOr<std::map<std::string, HostTensor>> whole = evaluate_graph(graph, inputs);
        ASSERT_TRUE(whole.ok()) << whole.status();
        EXPECT_LE(max_relative_error(*values[*graph.find_tensor("out")], whole->at("out")), 1e-9);
    }
}

TEST(Graph, EvaluateNamesMissingOrMisshapedInputs) {
    const Graph graph = small_llama_block();
    std::map<std::string, HostTensor> inputs;
    absl::StatusOr<std::map<std::string, HostTensor>> missing = evaluate_graph(graph, inputs);
    ASSERT_FALSE(missing.ok());
    EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no value for graph input 'x'"));
    for (TensorId id : graph.inputs()) {
        inputs[graph.tensor(id).name] = HostTensor(graph.tensor(id).type.box());
    }
    inputs["wq"] = HostTensor(Box({{0, 3}}));
    absl::StatusOr<std::map<std::string, HostTensor>> misshaped = evaluate_graph(graph, inputs);
    ASSERT_FALSE(misshaped.ok());
    EXPECT_THAT(std::string(misshaped.status().message()), HasSubstr("graph input 'wq'"));
}

} // namespace
} // namespace einsummable::ir
