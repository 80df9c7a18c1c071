// batched_tensors (compiler/ir/batch_rows.h): which tensors a batch of packed requests along
// dimension 0 reaches, and the operators that would mix the requests' rows, refused by name.

#include <set>
#include <string>
#include <vector>

#include "compiler/ir/batch_rows.h"
#include "compiler/ir/graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Attributes equation(const char* text) {
    return {{"equation", std::string(text)}};
}

Attributes equation(const char* text, const char* join) {
    return {{"equation", std::string(text)}, {"join", std::string(join)}};
}

// Two requests of 5 and 7 tokens.
const std::vector<int64_t> kRequestEnds = {5, 12};

// Builds a graph in topological order, failing the test on any error.
class Builder {
public:
    TensorId in(const char* name, std::vector<Dim> dims) {
        absl::StatusOr<TensorId> id = graph.add_input(name, DType::f32, std::move(dims));
        EXPECT_TRUE(id.ok()) << id.status();
        return *id;
    }
    TensorId op(const char* name, const char* kind, const Attributes& attributes,
                std::vector<TensorId> inputs) {
        absl::StatusOr<TensorId> id = graph.add(name, kind, attributes, std::move(inputs));
        EXPECT_TRUE(id.ok()) << id.status();
        return *id;
    }
    Graph graph;
};

// A small LLaMA-style block over `tokens` rows (as tests/unit/ir/graph_test.cc builds it), with
// `sequence_ends` for RoPE and attention (absent when empty), and one weights-only operator:
// the query weight scaled before use.
Graph llama_block(const std::vector<int64_t>& sequence_ends, int64_t tokens = 12) {
    const int64_t d_model = 16, heads_q = 4, heads_kv = 2, d_head = 4, d_ff = 24;
    Builder b;
    const Dim t{"tokens", tokens}, d{"d_model", d_model}, f{"d_ff", d_ff};
    Attributes packed;
    if (!sequence_ends.empty()) {
        packed.set("sequence_ends", sequence_ends);
    }
    Attributes causal = packed;
    causal.set("causal", true);
    const TensorId x = b.in("x", {t, d});
    const TensorId norm1_w = b.in("norm1_w", {d});
    const TensorId wq = b.in("wq", {d, {"q_out", heads_q * d_head}});
    const TensorId wk = b.in("wk", {d, {"kv_out", heads_kv * d_head}});
    const TensorId wv = b.in("wv", {d, {"kv_out", heads_kv * d_head}});
    const TensorId wo = b.in("wo", {{"q_out", heads_q * d_head}, d});
    const TensorId norm2_w = b.in("norm2_w", {d});
    const TensorId w1 = b.in("w1", {d, f});
    const TensorId w3 = b.in("w3", {d, f});
    const TensorId w2 = b.in("w2", {f, d});

    Attributes scale = equation("ij->ij", "scale");
    scale.set("constant", 0.5);
    const TensorId wq_scaled = b.op("wq_scaled", "einsum", scale, {wq});
    const TensorId n1 = b.op("n1", "rmsnorm", {{"eps", 1e-5}}, {x, norm1_w});
    const TensorId q = b.op("q", "einsum", equation("ij,jk->ik"), {n1, wq_scaled});
    const TensorId k = b.op("k", "einsum", equation("ij,jk->ik"), {n1, wk});
    const TensorId v = b.op("v", "einsum", equation("ij,jk->ik"), {n1, wv});
    const TensorId qh = b.op("qh", "split_heads",
                             {{"heads", heads_q}, {"heads_name", std::string("heads_q")}}, {q});
    const TensorId kh = b.op("kh", "split_heads",
                             {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {k});
    const TensorId vh = b.op("vh", "split_heads",
                             {{"heads", heads_kv}, {"heads_name", std::string("heads_kv")}}, {v});
    const TensorId qr = b.op("qr", "rope", packed, {qh});
    const TensorId kr = b.op("kr", "rope", packed, {kh});
    const TensorId attn = b.op("attn", "attention", causal, {qr, kr, vh});
    const TensorId merged = b.op("merged", "merge_heads", {}, {attn});
    const TensorId o = b.op("o", "einsum", equation("ij,jk->ik"), {merged, wo});
    const TensorId r1 = b.op("r1", "einsum", equation("ij,ij->ij", "add"), {x, o});
    const TensorId n2 = b.op("n2", "rmsnorm", {}, {r1, norm2_w});
    const TensorId gate = b.op("gate", "einsum", equation("ij,jk->ik"), {n2, w1});
    const TensorId up = b.op("up", "einsum", equation("ij,jk->ik"), {n2, w3});
    const TensorId act = b.op("act", "einsum", equation("ij->ij", "silu"), {gate});
    const TensorId prod = b.op("prod", "einsum", equation("ij,ij->ij"), {act, up});
    const TensorId down = b.op("down", "einsum", equation("ij,jk->ik"), {prod, w2});
    const TensorId out = b.op("out", "einsum", equation("ij,ij->ij", "add"), {r1, down});
    EXPECT_TRUE(b.graph.save(out).ok());
    return std::move(b.graph);
}

// The tensors reachable from `from` through operators, `from` included.
std::set<TensorId> downstream(const Graph& graph, TensorId from) {
    std::set<TensorId> reached = {from};
    for (const GraphNode& node : graph.nodes()) {
        for (TensorId input : node.inputs) {
            if (reached.count(input)) {
                reached.insert(node.outputs.begin(), node.outputs.end());
                break;
            }
        }
    }
    return reached;
}

absl::StatusOr<std::set<TensorId>> batched_x(const Graph& graph,
                                             const std::vector<int64_t>& request_ends) {
    return batched_tensors(graph, {*graph.find_tensor("x")}, request_ends);
}

TEST(BatchRows, LlamaBlockKeepsRequestsApart) {
    const Graph graph = llama_block(kRequestEnds);
    absl::StatusOr<std::set<TensorId>> batched = batched_x(graph, kRequestEnds);
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_EQ(*batched, downstream(graph, *graph.find_tensor("x")));
    EXPECT_TRUE(batched->count(*graph.find_tensor("out")));
    EXPECT_TRUE(batched->count(*graph.find_tensor("attn")));
    // The weights, and the weights-only operator, are no part of the batch.
    for (const char* name : {"wq", "wq_scaled", "norm1_w", "w2"}) {
        EXPECT_FALSE(batched->count(*graph.find_tensor(name))) << name;
    }
}

TEST(BatchRows, RequestsOfSeveralSequencesPass) {
    // Request 0 holds sequences [0,2) and [2,5), request 1 [5,9) and [9,12).
    const Graph graph = llama_block({2, 5, 9, 12});
    absl::StatusOr<std::set<TensorId>> batched = batched_x(graph, kRequestEnds);
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_EQ(*batched, downstream(graph, *graph.find_tensor("x")));
}

TEST(BatchRows, OneRequestPasses) {
    const Graph graph = llama_block({});
    absl::StatusOr<std::set<TensorId>> batched = batched_x(graph, {12});
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_EQ(*batched, downstream(graph, *graph.find_tensor("x")));
}

TEST(BatchRows, RopeWithoutTheRequestEndsAsSequenceEndsIsRefused) {
    // One sequence of 12: RoPE would give request 1's first token position 5, not 0 (and
    // attention would let it attend to request 0's tokens).
    const Graph graph = llama_block({});
    absl::StatusOr<std::set<TensorId>> batched = batched_x(graph, kRequestEnds);
    ASSERT_FALSE(batched.ok());
    EXPECT_EQ(batched.status().code(), absl::StatusCode::kInvalidArgument);
    // RoPE comes first in the graph and its rows are independent; its positions are not.
    EXPECT_THAT(batched.status().message(),
                AllOf(HasSubstr("operator 'qr' (rope)"), HasSubstr("request end 5"),
                      HasSubstr("sequence_ends must include every request end")));
}

TEST(BatchRows, AttentionWithoutTheRequestEndsAsSequenceEndsIsRefused) {
    // One sequence of 12 (no attribute), or sequences ending at 8 and 12: either way a query
    // of request 1 attends to keys of request 0: cut along queries and keys at 5, the spec
    // pairs request 1's queries with request 0's keys.
    for (const Attributes& packed :
         {Attributes{}, Attributes{{"sequence_ends", std::vector<int64_t>{8, 12}}}}) {
        SCOPED_TRACE(packed.to_string());
        Builder b;
        const TensorId x = b.in("x", {{"tokens", 12}, {"heads", 2}, {"d_head", 4}});
        const TensorId attn = b.op("attn", "attention", packed, {x, x, x});
        ASSERT_TRUE(b.graph.save(attn).ok());
        absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
        ASSERT_FALSE(batched.ok());
        EXPECT_EQ(batched.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(
            std::string(batched.status().message()),
            AllOf(HasSubstr("operator 'attn' (attention) mixes the rows of packed requests"),
                  HasSubstr("split along 'tokens' and 'keys' at the request ends"),
                  HasSubstr("function specs for 2 requests"),
                  HasSubstr("sequence_ends must include every request end")));
    }
}

TEST(BatchRows, ContractionOverTokensIsRefused) {
    Builder b;
    const TensorId x = b.in("x", {{"tokens", 12}, {"d", 4}});
    const TensorId gram = b.op("gram", "einsum", equation("ti,tj->ij"), {x, x});
    ASSERT_TRUE(b.graph.save(gram).ok());
    absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
    ASSERT_FALSE(batched.ok());
    EXPECT_EQ(batched.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(batched.status().message(),
                AllOf(HasSubstr("operator 'gram' (einsum) mixes the rows of packed requests"),
                      HasSubstr("combined (sum) into output 'gram'")));
}

TEST(BatchRows, ScoresOfEveryTokenAgainstEveryTokenAreRefused) {
    Builder b;
    const Dim t{"tokens", 12}, d{"d", 4};
    const TensorId x = b.in("x", {t, d});
    const TensorId wq = b.in("wq", {d, d});
    const TensorId wk = b.in("wk", {d, d});
    const TensorId q = b.op("q", "einsum", equation("ij,jk->ik"), {x, wq});
    const TensorId k = b.op("k", "einsum", equation("ij,jk->ik"), {x, wk});
    const TensorId scores = b.op("scores", "einsum", equation("td,sd->ts"), {q, k});
    ASSERT_TRUE(b.graph.save(scores).ok());
    absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
    ASSERT_FALSE(batched.ok());
    EXPECT_THAT(batched.status().message(),
                AllOf(HasSubstr("operator 'scores' (einsum) mixes the rows of packed requests"),
                      HasSubstr("request 0 (rows [0,5)) reads rows [0,12) of input 'k'")));
}

TEST(BatchRows, SoftmaxOverTokensIsRefusedAndOverFeaturesPasses) {
    Builder b;
    const TensorId x = b.in("x", {{"tokens", 12}, {"d", 4}});
    const TensorId rows = b.op("rows", "softmax", {}, {x});
    const TensorId columns = b.op("columns", "softmax", {{"axis", int64_t{0}}}, {rows});
    ASSERT_TRUE(b.graph.save(columns).ok());
    absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
    ASSERT_FALSE(batched.ok());
    EXPECT_THAT(batched.status().message(),
                AllOf(HasSubstr("operator 'columns' (softmax) mixes the rows of packed requests"),
                      HasSubstr("dimension 0 of input 'rows'")));
}

TEST(BatchRows, ReductionOverFeaturesPassesAndOverTokensIsRefused) {
    Builder b;
    const TensorId x = b.in("x", {{"tokens", 12}, {"d", 4}});
    const TensorId per_token = b.op("per_token", "einsum", equation("ti->t"), {x});
    const TensorId total = b.op("total", "einsum", equation("t->"), {per_token});
    ASSERT_TRUE(b.graph.save(total).ok());
    absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
    ASSERT_FALSE(batched.ok());
    EXPECT_THAT(batched.status().message(), HasSubstr("operator 'total' (einsum)"));
}

TEST(BatchRows, WeightsOnlyOperatorsAreNotBatched) {
    Builder b;
    const Dim t{"tokens", 12}, d{"d", 4};
    const TensorId x = b.in("x", {t, d});
    const TensorId w = b.in("w", {d, d});
    // w·wᵀ contracts over w's rows: harmless, since no request's rows are in it.
    const TensorId gram = b.op("gram", "einsum", equation("ij,kj->ik"), {w, w});
    const TensorId y = b.op("y", "einsum", equation("ij,jk->ik"), {x, gram});
    ASSERT_TRUE(b.graph.save(y).ok());
    absl::StatusOr<std::set<TensorId>> batched = batched_x(b.graph, kRequestEnds);
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_EQ(*batched, (std::set<TensorId>{x, y}));
}

TEST(BatchRows, BadArgumentsNameWhatIsWrong) {
    const Graph graph = llama_block(kRequestEnds);
    const TensorId x = *graph.find_tensor("x");
    EXPECT_THAT(batched_tensors(graph, {x}, {5, 10}).status().message(),
                HasSubstr("batched tensor 'x' has dimension 0 ('tokens') of size 12, but the "
                          "requests end at 10"));
    EXPECT_THAT(batched_tensors(graph, {x}, {5, 5, 12}).status().message(),
                HasSubstr("strictly increasing"));
    EXPECT_THAT(batched_tensors(graph, {x}, {}).status().message(), HasSubstr("no request ends"));
    EXPECT_THAT(batched_tensors(graph, {*graph.find_tensor("q")}, kRequestEnds).status().message(),
                HasSubstr("batched input 'q' is not a graph input"));
    EXPECT_THAT(batched_tensors(graph, {-1}, kRequestEnds).status().message(),
                HasSubstr("not a tensor of the graph"));
    // A weight of another length declared batched.
    EXPECT_THAT(batched_tensors(graph, {*graph.find_tensor("wq")}, kRequestEnds).status().message(),
                HasSubstr("batched tensor 'wq' has dimension 0 ('d_model') of size 16"));
}

} // namespace
} // namespace einsummable::ir
