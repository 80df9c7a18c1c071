#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/ops/attention.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/workloads/by_name.h"
#include "compiler/workloads/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workloads/type_of.h"

namespace einsummable::workloads {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::type_of;

const ir::GraphNode& node_named(const ir::Graph& graph, const std::string& name) {
    for (const ir::GraphNode& node : graph.nodes()) {
        if (node.name == name) {
            return node;
        }
    }
    ADD_FAILURE() << "no node " << name;
    return graph.nodes().front();
}

std::vector<int64_t> ints_attribute(const ir::Graph& graph, const std::string& node,
                                    const std::string& attribute) {
    absl::StatusOr<std::vector<int64_t>> values =
        node_named(graph, node).op->attributes().get_ints(attribute);
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? *values : std::vector<int64_t>{};
}

TEST(LlamaConfig, DefaultsAreTheWorkloadsMdBlock) {
    const LlamaConfig config = LlamaConfig::single(1024);
    EXPECT_EQ(config.d_model, 4096);
    EXPECT_EQ(config.heads_q, 32);
    EXPECT_EQ(config.heads_kv, 8);
    EXPECT_EQ(config.d_head, 128);
    EXPECT_EQ(config.d_ff, 14336);
    EXPECT_EQ(config.dtype, ir::DType::f16);
    EXPECT_EQ(config.rope_theta, 10000.0);
    EXPECT_EQ(config.eps, 1e-5);
    EXPECT_EQ(config.tokens(), 1024);
    EXPECT_THAT(config.sequence_ends(), ElementsAre(1024));
    EXPECT_EQ(config.q_out(), 4096);
    EXPECT_EQ(config.kv_out(), 1024);
    EXPECT_TRUE(config.validate().ok());
}

TEST(LlamaConfig, BatchPacksSequencesEndToEnd) {
    const LlamaConfig config = LlamaConfig::batch(8, 1024);
    EXPECT_EQ(config.tokens(), 8192);
    EXPECT_THAT(config.sequence_ends(),
                ElementsAre(1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192));
    LlamaConfig uneven;
    uneven.sequence_lengths = {5, 7, 3};
    EXPECT_THAT(uneven.sequence_ends(), ElementsAre(5, 12, 15));
}

TEST(LlamaConfig, ValidateNamesTheBadField) {
    struct Case {
        std::function<void(LlamaConfig&)> change;
        const char* message;
    };
    const std::vector<Case> cases = {
        {[](LlamaConfig& c) { c.heads_kv = 5; }, "heads_q (32) is not a multiple of heads_kv (5)"},
        {[](LlamaConfig& c) { c.d_head = 7; }, "d_head (7) is odd"},
        {[](LlamaConfig& c) { c.d_ff = 0; }, "d_ff is 0"},
        {[](LlamaConfig& c) { c.sequence_lengths.clear(); }, "sequence_lengths is empty"},
        {[](LlamaConfig& c) {
             c.sequence_lengths = {4, -1};
         },
         "sequence 1 has length -1"},
        {[](LlamaConfig& c) { c.rope_theta = 0; }, "rope_theta is 0"},
        {[](LlamaConfig& c) { c.eps = -1; }, "eps is -1"},
        {[](LlamaConfig& c) { c.heads_q = c.heads_kv = c.d_head = int64_t{1} << 40; },
         "overflows int64"},
    };
    for (const Case& test : cases) {
        LlamaConfig config = LlamaConfig::single(64);
        test.change(config);
        const absl::Status status = config.validate();
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << test.message;
        EXPECT_THAT(std::string(status.message()), HasSubstr(test.message));
        absl::StatusOr<ir::Graph> graph = llama_block(config);
        ASSERT_FALSE(graph.ok());
        EXPECT_EQ(graph.status(), status);
    }
}

TEST(LlamaBlock, TypesAtKeyPointsFor1KTokens) {
    absl::StatusOr<ir::Graph> graph = llama_block(LlamaConfig::single(1024));
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(type_of(*graph, "x"), "f16[tokens=1024, d_model=4096]");
    EXPECT_EQ(type_of(*graph, "attn_norm"), "f16[d_model=4096]");
    EXPECT_EQ(type_of(*graph, "wq"), "f16[d_model=4096, q_out=4096]");
    EXPECT_EQ(type_of(*graph, "wk"), "f16[d_model=4096, kv_out=1024]");
    EXPECT_EQ(type_of(*graph, "wv"), "f16[d_model=4096, kv_out=1024]");
    EXPECT_EQ(type_of(*graph, "wo"), "f16[q_out=4096, d_model=4096]");
    EXPECT_EQ(type_of(*graph, "w1"), "f16[d_model=4096, d_ff=14336]");
    EXPECT_EQ(type_of(*graph, "w3"), "f16[d_model=4096, d_ff=14336]");
    EXPECT_EQ(type_of(*graph, "w2"), "f16[d_ff=14336, d_model=4096]");
    EXPECT_EQ(type_of(*graph, "q"), "f16[tokens=1024, q_out=4096]");
    EXPECT_EQ(type_of(*graph, "k"), "f16[tokens=1024, kv_out=1024]");
    EXPECT_EQ(type_of(*graph, "q_heads"), "f16[tokens=1024, heads_q=32, d_head=128]");
    EXPECT_EQ(type_of(*graph, "k_heads"), "f16[tokens=1024, heads_kv=8, d_head=128]");
    EXPECT_EQ(type_of(*graph, "v_heads"), "f16[tokens=1024, heads_kv=8, d_head=128]");
    EXPECT_EQ(type_of(*graph, "q_rope"), "f16[tokens=1024, heads_q=32, d_head=128]");
    EXPECT_EQ(type_of(*graph, "attn"), "f16[tokens=1024, heads_q=32, d_head=128]");
    EXPECT_EQ(type_of(*graph, "attn_merged"), "f16[tokens=1024, q_out=4096]");
    EXPECT_EQ(type_of(*graph, "h"), "f16[tokens=1024, d_model=4096]");
    EXPECT_EQ(type_of(*graph, "gate"), "f16[tokens=1024, d_ff=14336]");
    EXPECT_EQ(type_of(*graph, "ffn_hidden"), "f16[tokens=1024, d_ff=14336]");
    EXPECT_EQ(type_of(*graph, "y"), "f16[tokens=1024, d_model=4096]");
    EXPECT_EQ(graph->saved(), std::vector<ir::TensorId>{*graph->find_tensor("y")});

    const auto& attention = dynamic_cast<const ir::Attention&>(*node_named(*graph, "attn").op);
    EXPECT_TRUE(attention.causal());
    EXPECT_EQ(attention.group_size(), 4);
    EXPECT_THAT(attention.sequence_ends(), ElementsAre(1024));
    EXPECT_THAT(ints_attribute(*graph, "attn", "sequence_ends"), ElementsAre(1024));
    EXPECT_THAT(ints_attribute(*graph, "q_rope", "sequence_ends"), ElementsAre(1024));
    EXPECT_EQ(*node_named(*graph, "k_rope").op->attributes().get_double("theta"), 10000.0);
    EXPECT_EQ(*node_named(*graph, "attn_in").op->attributes().get_double("eps"), 1e-5);
}

// The block is exactly the operator sequence of docs/workloads.md, reading the tensors it should.
TEST(LlamaBlock, OperatorSequenceAndWiring) {
    LlamaConfig config = LlamaConfig::single(64);
    absl::StatusOr<ir::Graph> graph = llama_block(config);
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::vector<std::string> lines;
    for (const ir::GraphNode& node : graph->nodes()) {
        std::string line = node.name + " = " + node.op->describe() + "(";
        for (size_t idx = 0; idx < node.inputs.size(); ++idx) {
            line += (idx ? ", " : "") + graph->tensor(node.inputs[idx]).name;
        }
        lines.push_back(line + ")");
    }
    EXPECT_THAT(
        lines,
        ElementsAre(
            "attn_in = rmsnorm(eps=1e-05)(x, attn_norm)",
            "q = einsum(agg=sum equation=ij,jk->ik join=mul)(attn_in, wq)",
            "k = einsum(agg=sum equation=ij,jk->ik join=mul)(attn_in, wk)",
            "v = einsum(agg=sum equation=ij,jk->ik join=mul)(attn_in, wv)",
            "q_heads = split_heads(head_dim_name=d_head heads=32 heads_name=heads_q)(q)",
            "k_heads = split_heads(head_dim_name=d_head heads=8 heads_name=heads_kv)(k)",
            "v_heads = split_heads(head_dim_name=d_head heads=8 heads_name=heads_kv)(v)",
            "q_rope = rope(sequence_ends=[64] theta=10000)(q_heads)",
            "k_rope = rope(sequence_ends=[64] theta=10000)(k_heads)",
            "attn = attention(causal=true scale=0.0883883 sequence_ends=[64])(q_rope, k_rope, "
            "v_heads)",
            "attn_merged = merge_heads(dim_name=q_out)(attn)",
            "attn_out = einsum(agg=sum equation=ij,jk->ik join=mul)(attn_merged, wo)",
            "h = einsum(agg=sum equation=ij,ij->ij join=add)(x, attn_out)",
            "ffn_in = rmsnorm(eps=1e-05)(h, ffn_norm)",
            "gate = einsum(agg=sum equation=ij,jk->ik join=mul)(ffn_in, w1)",
            "up = einsum(agg=sum equation=ij,jk->ik join=mul)(ffn_in, w3)",
            "gate_silu = einsum(agg=sum equation=ij->ij join=silu)(gate)",
            "ffn_hidden = einsum(agg=sum equation=ij,ij->ij join=mul)(gate_silu, up)",
            "ffn_out = einsum(agg=sum equation=ij,jk->ik join=mul)(ffn_hidden, w2)",
            "y = einsum(agg=sum equation=ij,ij->ij join=add)(h, ffn_out)"));
}

TEST(LlamaBlock, BatchOf8x1KHasSequenceEndsEvery1K) {
    absl::StatusOr<ir::Graph> graph = llama_block(LlamaConfig::batch(8, 1024));
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(type_of(*graph, "x"), "f16[tokens=8192, d_model=4096]");
    for (const char* node : {"attn", "q_rope", "k_rope"}) {
        EXPECT_THAT(ints_attribute(*graph, node, "sequence_ends"),
                    ElementsAre(1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192))
            << node;
    }
    // Attention carries them too: cut at them, queries and keys together, each query block
    // meets only its own sequence (8 functions, not 64).
    const ir::Operator& attn = *node_named(*graph, "attn").op;
    absl::StatusOr<std::vector<int64_t>> attn_ends = attn.attributes().get_ints("sequence_ends");
    ASSERT_TRUE(attn_ends.ok()) << attn_ends.status();
    EXPECT_THAT(*attn_ends, ElementsAre(1024, 2048, 3072, 4096, 5120, 6144, 7168, 8192));
    absl::StatusOr<ir::IntervalRequest> request =
        ir::make_request(attn.shardable_indices(), {8, 1, 1});
    ASSERT_TRUE(request.ok()) << request.status();
    absl::StatusOr<ir::JoinAggSpec> spec = attn.spec(attn.refine_request(*request));
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->functions.size(), 8u);
}

// A decode step: one new token per sequence against caches of `cached` keys each, resident
// (weights), read by attention with key_ends every `cached` keys; the step's keys and values
// are saved beside y for the loop to append.
TEST(LlamaDecode, AttentionReadsTheResidentCachesAndTheStepsKeysAreSaved) {
    LlamaConfig config = LlamaConfig::batch(3, 1);
    config.d_model = 64;
    config.heads_q = 8;
    config.heads_kv = 2;
    config.d_head = 8;
    config.d_ff = 96;
    absl::StatusOr<ir::Graph> graph = llama_decode(config, 10);
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(type_of(*graph, "x"), "f16[tokens=3, d_model=64]");
    for (const char* cache : {"k_cache", "v_cache"}) {
        EXPECT_EQ(type_of(*graph, cache), "f16[keys=30, heads_kv=2, d_head=8]") << cache;
        EXPECT_TRUE(graph->tensor(*graph->find_tensor(cache)).weight) << cache;
    }
    const auto& attention = dynamic_cast<const ir::Attention&>(*node_named(*graph, "attn").op);
    EXPECT_TRUE(attention.causal());
    EXPECT_TRUE(attention.has_key_ends());
    EXPECT_THAT(attention.sequence_ends(), ElementsAre(1, 2, 3));
    EXPECT_THAT(attention.key_ends(), ElementsAre(10, 20, 30));
    EXPECT_EQ(node_named(*graph, "attn").inputs[1], *graph->find_tensor("k_cache"));
    std::vector<std::string> saved;
    for (ir::TensorId tensor : graph->saved()) {
        saved.push_back(graph->tensor(tensor).name);
    }
    EXPECT_THAT(saved, ::testing::UnorderedElementsAre("y", "k_rope", "v_heads"));
    // Each sequence's query with its own cache: 3 functions when both are cut at the sequences.
    absl::StatusOr<ir::IntervalRequest> request =
        ir::make_request(attention.shardable_indices(), {3, 1, 1});
    ASSERT_TRUE(request.ok()) << request.status();
    absl::StatusOr<ir::JoinAggSpec> spec = attention.spec(attention.refine_request(*request));
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->functions.size(), 3u);

    absl::StatusOr<ir::Graph> named =
        by_name("llama-decode:batch=3,cached=10,d_model=64,heads_q=8,heads_kv=2,d_head=8,d_ff=96");
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_EQ(type_of(*named, "k_cache"), "f16[keys=30, heads_kv=2, d_head=8]");
    EXPECT_THAT(llama_decode(config, 0).status().message(), HasSubstr("cached is 0"));
    EXPECT_THAT(by_name("llama-decode:batch=2,cached=0").status().message(),
                HasSubstr("cached is 0"));
}

TEST(LlamaStack, BlocksChainWithTheirOwnWeights) {
    absl::StatusOr<ir::Graph> graph = llama_stack(LlamaConfig::single(128), 3);
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(graph->nodes().size(), 3u * 20u);
    EXPECT_EQ(graph->inputs().size(), 1u + 3u * 9u);
    for (const char* weight : {"b0.wq", "b1.wq", "b2.wq", "b0.attn_norm", "b2.w2", "b1.ffn_norm"}) {
        ASSERT_TRUE(graph->find_tensor(weight).has_value()) << weight;
        EXPECT_TRUE(graph->tensor(*graph->find_tensor(weight)).is_input()) << weight;
    }
    EXPECT_FALSE(graph->find_tensor("wq").has_value());
    EXPECT_EQ(graph->tensor(node_named(*graph, "b0.attn_in").inputs[0]).name, "x");
    EXPECT_EQ(graph->tensor(node_named(*graph, "b1.attn_in").inputs[0]).name, "b0.y");
    EXPECT_EQ(graph->tensor(node_named(*graph, "b2.h").inputs[0]).name, "b1.y");
    EXPECT_EQ(graph->saved(), std::vector<ir::TensorId>{*graph->find_tensor("b2.y")});
    EXPECT_EQ(type_of(*graph, "b2.y"), "f16[tokens=128, d_model=4096]");

    absl::StatusOr<ir::Graph> none = llama_stack(LlamaConfig::single(128), 0);
    ASSERT_FALSE(none.ok());
    EXPECT_THAT(std::string(none.status().message()), HasSubstr("blocks is 0"));
}

// Tiny shapes, so the reference operators can run the whole graph.
LlamaConfig tiny_config(std::vector<int64_t> lengths) {
    LlamaConfig config;
    config.d_model = 16;
    config.heads_q = 4;
    config.heads_kv = 2;
    config.d_head = 4;
    config.d_ff = 24;
    config.dtype = ir::DType::f32;
    config.sequence_lengths = std::move(lengths);
    return config;
}

std::map<std::string, ir::HostTensor> random_inputs(const ir::Graph& graph, std::mt19937_64& rng) {
    std::map<std::string, ir::HostTensor> inputs;
    for (ir::TensorId id : graph.inputs()) {
        inputs[graph.tensor(id).name] =
            ir::HostTensor::random(graph.tensor(id).type.box(), rng, -0.5, 0.5);
    }
    return inputs;
}

// Rows [begin, end) of a [tokens, d] tensor, moved to start at row 0.
ir::HostTensor rows(const ir::HostTensor& tensor, int64_t begin, int64_t end) {
    const int64_t width = tensor.shape()[1];
    const ir::HostTensor part = tensor.slice(ir::Box({{begin, end}, {0, width}}));
    return ir::HostTensor(ir::Box::from_shape({end - begin, width}), part.values());
}

TEST(LlamaBlockNumerics, TinyBlockRunsAndPackedSequencesStayApart) {
    absl::StatusOr<ir::Graph> packed = llama_block(tiny_config({5, 7}));
    ASSERT_TRUE(packed.ok()) << packed.status();
    std::mt19937_64 rng(20240611);
    std::map<std::string, ir::HostTensor> inputs = random_inputs(*packed, rng);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> out = ir::evaluate_graph(*packed, inputs);
    ASSERT_TRUE(out.ok()) << out.status();
    const ir::HostTensor& y = out->at("y");
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{12, 16}));
    double largest = 0;
    for (double value : y.values()) {
        ASSERT_TRUE(std::isfinite(value));
        largest = std::max(largest, std::abs(value));
    }
    EXPECT_GT(largest, 0.0);

    // Each packed sequence gives what it gives alone: attention never crosses a sequence end and
    // RoPE restarts positions at each start.
    for (const auto& [begin, end] : {std::pair<int64_t, int64_t>{0, 5}, {5, 12}}) {
        absl::StatusOr<ir::Graph> alone = llama_block(tiny_config({end - begin}));
        ASSERT_TRUE(alone.ok()) << alone.status();
        std::map<std::string, ir::HostTensor> alone_inputs = inputs;
        alone_inputs["x"] = rows(inputs.at("x"), begin, end);
        absl::StatusOr<std::map<std::string, ir::HostTensor>> alone_out =
            ir::evaluate_graph(*alone, alone_inputs);
        ASSERT_TRUE(alone_out.ok()) << alone_out.status();
        EXPECT_LE(ir::max_relative_error(rows(y, begin, end), alone_out->at("y")), 1e-12)
            << "sequence [" << begin << ", " << end << ")";
    }
}

TEST(LlamaStackNumerics, StackEqualsBlocksAppliedInTurn) {
    const LlamaConfig config = tiny_config({3, 6});
    absl::StatusOr<ir::Graph> stack = llama_stack(config, 2);
    absl::StatusOr<ir::Graph> block = llama_block(config);
    ASSERT_TRUE(stack.ok()) << stack.status();
    ASSERT_TRUE(block.ok()) << block.status();
    std::mt19937_64 rng(7);
    const std::map<std::string, ir::HostTensor> inputs = random_inputs(*stack, rng);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> stacked =
        ir::evaluate_graph(*stack, inputs);
    ASSERT_TRUE(stacked.ok()) << stacked.status();

    ir::HostTensor x = inputs.at("x");
    for (int b = 0; b < 2; ++b) {
        std::map<std::string, ir::HostTensor> block_inputs = {{"x", x}};
        for (ir::TensorId id : block->inputs()) {
            const std::string& name = block->tensor(id).name;
            if (name != "x") {
                block_inputs[name] = inputs.at("b" + std::to_string(b) + "." + name);
            }
        }
        absl::StatusOr<std::map<std::string, ir::HostTensor>> out =
            ir::evaluate_graph(*block, block_inputs);
        ASSERT_TRUE(out.ok()) << out.status();
        x = out->at("y");
    }
    EXPECT_LE(ir::max_relative_error(stacked->at("b1.y"), x), 1e-12);
}

} // namespace
} // namespace einsummable::workloads
