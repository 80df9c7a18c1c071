#include <string>
#include <vector>

#include "compiler/workloads/by_name.h"
#include "compiler/workloads/ffn.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workloads/type_of.h"

namespace einsummable::workloads {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::type_of;

std::string saved_type(const ir::Graph& graph) {
    EXPECT_EQ(graph.saved().size(), 1u);
    return graph.tensor(graph.saved().at(0)).type.to_string();
}

TEST(ReferenceNames, AreTheWorkloadsMdWorkloads) {
    EXPECT_THAT(reference_names(),
                ElementsAre("llama-block:tokens=1024", "llama-block:tokens=8192",
                            "llama-block:tokens=131072", "llama-block:seqs=8x1024",
                            "llama-block:seqs=128x1024", "chain:A", "chain:B", "chain:C", "chain:D",
                            "chain:E", "ffn"));
}

TEST(ReferenceNames, EveryOneBuilds) {
    for (const std::string& name : reference_names()) {
        absl::StatusOr<ir::Graph> graph = by_name(name);
        ASSERT_TRUE(graph.ok()) << name << ": " << graph.status();
        EXPECT_TRUE(graph->validate().ok()) << name;
        EXPECT_FALSE(graph->nodes().empty()) << name;
    }
    EXPECT_EQ(saved_type(*by_name("llama-block:tokens=131072")),
              "f16[tokens=131072, d_model=4096]");
    EXPECT_EQ(saved_type(*by_name("llama-block:seqs=128x1024")),
              "f16[tokens=131072, d_model=4096]");
}

TEST(Ffn, DefaultsAndOverrides) {
    absl::StatusOr<ir::Graph> graph = ffn();
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_EQ(type_of(*graph, "x"), "f32[tokens=4096, d_model=1024]");
    EXPECT_EQ(type_of(*graph, "w1"), "f32[d_model=1024, d_ff=4096]");
    EXPECT_EQ(type_of(*graph, "w2"), "f32[d_ff=4096, d_model=1024]");
    EXPECT_EQ(type_of(*graph, "h"), "f32[tokens=4096, d_ff=4096]");
    EXPECT_THAT(graph->node(1).op->describe(), HasSubstr("join=relu"));
    EXPECT_EQ(saved_type(*graph), "f32[tokens=4096, d_model=1024]");
    EXPECT_EQ(graph->tensor(graph->saved()[0]).name, "y");
    EXPECT_EQ(graph->to_string(), by_name("ffn")->to_string());

    absl::StatusOr<ir::Graph> small = by_name("ffn:tokens=8,d_ff=16,dtype=bf16");
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ(type_of(*small, "h"), "bf16[tokens=8, d_ff=16]");
    EXPECT_EQ(saved_type(*small), "bf16[tokens=8, d_model=1024]");
}

TEST(Matmul, ByNameForms) {
    absl::StatusOr<ir::Graph> square = by_name("matmul:64");
    ASSERT_TRUE(square.ok()) << square.status();
    EXPECT_EQ(type_of(*square, "a"), "f32[m=64, k=64]");
    EXPECT_EQ(type_of(*square, "b"), "f32[k=64, n=64]");
    EXPECT_EQ(saved_type(*square), "f32[m=64, n=64]");
    absl::StatusOr<ir::Graph> rect = by_name("matmul:2x3x5,dtype=f16");
    ASSERT_TRUE(rect.ok()) << rect.status();
    EXPECT_EQ(type_of(*rect, "a"), "f16[m=2, k=3]");
    EXPECT_EQ(saved_type(*rect), "f16[m=2, n=5]");
    EXPECT_EQ(rect->tensor(rect->saved()[0]).name, "c");
}

TEST(ByName, LlamaForms) {
    absl::StatusOr<ir::Graph> batch = by_name("llama-block:seqs=8x1024");
    ASSERT_TRUE(batch.ok()) << batch.status();
    EXPECT_EQ(type_of(*batch, "x"), "f16[tokens=8192, d_model=4096]");
    EXPECT_THAT(batch->to_string(),
                HasSubstr("attention(causal=true scale=0.0883883 "
                          "sequence_ends=[1024,2048,3072,4096,5120,6144,7168,8192])"));

    absl::StatusOr<ir::Graph> stack = by_name("llama-stack:blocks=32,tokens=8192");
    ASSERT_TRUE(stack.ok()) << stack.status();
    EXPECT_EQ(stack->nodes().size(), 32u * 20u);
    EXPECT_EQ(stack->tensor(stack->saved()[0]).name, "b31.y");
    EXPECT_EQ(saved_type(*stack), "f16[tokens=8192, d_model=4096]");

    absl::StatusOr<ir::Graph> small = by_name(
        "llama-stack:seqs=2x8,blocks=2,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=64,dtype=f32");
    ASSERT_TRUE(small.ok()) << small.status();
    EXPECT_EQ(type_of(*small, "b1.q_heads"), "f32[tokens=16, heads_q=4, d_head=8]");
    EXPECT_EQ(type_of(*small, "b0.k_heads"), "f32[tokens=16, heads_kv=2, d_head=8]");
    EXPECT_EQ(type_of(*small, "b1.ffn_hidden"), "f32[tokens=16, d_ff=64]");
}

TEST(ByName, Chains) {
    absl::StatusOr<ir::Graph> c = by_name("chain:C,dtype=f32");
    ASSERT_TRUE(c.ok()) << c.status();
    EXPECT_EQ(saved_type(*c), "f32[b0=10240, b3=2048]"); // C's ends differ
    EXPECT_EQ(saved_type(*by_name("chain:E")), "f16[b0=49152, b13=49152]");
}

TEST(ByName, BadNamesNameTheProblemAndListTheForms) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"", "empty workload name"},
        {"gpt", "unknown workload 'gpt'"},
        {"llama_block:tokens=8", "unknown workload 'llama_block'"},
        {"matmul", "matmul needs a parameter after ':'"},
        {"matmul:2x3", "matmul shape '2x3' has 2 'x'-separated numbers, expected 1 or 3"},
        {"matmul:0", "matmul shape is 0"},
        {"matmul:abc", "matmul shape 'abc' is not a decimal number"},
        {"matmul:-4", "is not a decimal number"},
        {"matmul:4,tokens=3", "unknown parameter 'tokens' for matmul (known: dtype)"},
        {"ffn:", "parameter 1 is empty"},
        {"ffn:tokens=8,", "parameter 2 is empty"},
        {"ffn:tokens", "parameter 'tokens' is not key=value"},
        {"ffn:foo=1", "unknown parameter 'foo' for ffn (known: tokens, d_model, d_ff, dtype)"},
        {"ffn:tokens=1,tokens=2", "parameter 'tokens' given twice"},
        {"ffn:dtype=f64", "dtype 'f64' is not one of f32, f16, bf16"},
        {"ffn:tokens=99999999999999", "is not a decimal number of at most 13 digits"},
        {"ffn:tokens=2000000000000", "tokens 2000000000000 is larger than 1099511627776"},
        {"ffn:tokens=1099511627776,d_model=1099511627776", "tensor 'x' is too large"},
        {"llama-block", "llama-block needs one of tokens=T"},
        {"llama-block:tokens=8,seqs=2x4", "llama-block takes only one of tokens=T"},
        {"llama-block:seqs=8", "seqs '8' has 1 'x'-separated numbers, expected 2"},
        {"llama-block:seqs=2000000x1", "more than the limit of 1048576"},
        {"llama-block:tokens=1024,heads_kv=5", "heads_q (32) is not a multiple of heads_kv (5)"},
        {"llama-block:tokens=1024,blocks=2", "unknown parameter 'blocks' for llama-block"},
        {"llama-stack:tokens=1024", "llama-stack needs blocks=B"},
        {"llama-stack:blocks=2000,tokens=8", "blocks: 2000 is more than the limit of 1024"},
        {"chain", "chain needs a parameter after ':'"},
        {"chain:", "parameter 1 is empty"},
        {"chain:F", "unknown matrix chain 'F' (known: A to E)"},
        {"chain:AB", "unknown matrix chain 'AB'"},
        {"chain:A,dtype=int8", "dtype 'int8'"},
        {"chain:A\n", "unknown matrix chain 'A\\n'"},
    };
    for (const auto& [spec, problem] : cases) {
        absl::StatusOr<ir::Graph> graph = by_name(spec);
        ASSERT_FALSE(graph.ok()) << spec;
        EXPECT_EQ(graph.status().code(), absl::StatusCode::kInvalidArgument) << spec;
        const std::string message(graph.status().message());
        EXPECT_THAT(message, HasSubstr(problem)) << spec;
        EXPECT_THAT(message, HasSubstr("Known forms: ffn, ffn:tokens=T,d_model=D,d_ff=F")) << spec;
        EXPECT_THAT(message, HasSubstr("llama-stack:blocks=B,seqs=SxL")) << spec;
    }
    // Long or odd names are echoed escaped and shortened.
    const std::string long_name = "x" + std::string(500, 'y');
    const std::string message(by_name(long_name).status().message());
    EXPECT_THAT(message, HasSubstr("...'"));
    EXPECT_LT(message.size(), 1000u);
}

} // namespace
} // namespace einsummable::workloads
