#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/workloads/matrix_chain.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/workloads/type_of.h"

namespace einsummable::workloads {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr char kChains[] = {'A', 'B', 'C', 'D', 'E'};

using testing::type_of;

// The lists recorded in bench/WORKLOAD_DIMENSIONS.md.
TEST(ChainDims, AreTheDocumentedLists) {
    EXPECT_THAT(*chain_dims('A'),
                ElementsAre(10240, 16384, 6144, 16384, 6144, 16384, 6144, 16384, 6144, 10240));
    EXPECT_THAT(*chain_dims('B'), ElementsAre(9216, 20480, 5120, 20480, 5120, 9216));
    EXPECT_THAT(*chain_dims('C'), ElementsAre(10240, 12288, 32768, 2048));
    EXPECT_THAT(*chain_dims('D'),
                ElementsAre(24576, 1536, 20480, 20480, 20480, 20480, 20480, 20480, 1536, 24576));
    EXPECT_THAT(*chain_dims('E'), ElementsAre(49152, 1024, 20480, 20480, 20480, 20480, 20480, 20480,
                                              20480, 20480, 20480, 20480, 1024, 49152));
}

// docs/workloads.md: dims[0] = dims[n] = end; D and E: dims[1] = dims[n-1] = neck, the rest
// interior; A and B: the interior alternates starting with the first value given.
TEST(ChainDims, FollowTheWorkloadsMdRule) {
    struct Rule {
        char name;
        int matrices;
        int64_t end;
        int64_t neck;                  // 0: no neck
        std::vector<int64_t> interior; // cycled
    };
    const std::vector<Rule> rules = {{'A', 9, 10240, 0, {16384, 6144}},
                                     {'B', 5, 9216, 0, {20480, 5120}},
                                     {'D', 9, 24576, 1536, {20480}},
                                     {'E', 13, 49152, 1024, {20480}}};
    for (const Rule& rule : rules) {
        SCOPED_TRACE(rule.name);
        const std::vector<int64_t> dims = *chain_dims(rule.name);
        const int n = rule.matrices;
        ASSERT_EQ(dims.size(), static_cast<size_t>(n + 1));
        EXPECT_EQ(dims[0], rule.end);
        EXPECT_EQ(dims[n], rule.end);
        const int first_interior = rule.neck ? 2 : 1;
        if (rule.neck) {
            EXPECT_EQ(dims[1], rule.neck);
            EXPECT_EQ(dims[n - 1], rule.neck);
        }
        for (int k = first_interior; k <= n - first_interior; ++k) {
            EXPECT_EQ(dims[k], rule.interior[(k - first_interior) % rule.interior.size()]) << k;
        }
    }
}

TEST(ChainParenthesisation, ProductsOfEveryChain) {
    using P = ChainProduct;
    EXPECT_THAT(*parse_parenthesisation(*chain_parenthesisation('A')),
                ElementsAre(P{1, 1, 2}, P{3, 3, 4}, P{5, 5, 6}, P{7, 7, 8}, P{5, 6, 8}, P{3, 4, 8},
                            P{3, 8, 9}, P{1, 2, 9}));
    EXPECT_THAT(*parse_parenthesisation(*chain_parenthesisation('B')),
                ElementsAre(P{1, 1, 2}, P{3, 3, 4}, P{3, 4, 5}, P{1, 2, 5}));
    EXPECT_THAT(*parse_parenthesisation(*chain_parenthesisation('C')),
                ElementsAre(P{2, 2, 3}, P{1, 1, 3}));
    EXPECT_THAT(*parse_parenthesisation(*chain_parenthesisation('D')),
                ElementsAre(P{7, 7, 8}, P{6, 6, 8}, P{5, 5, 8}, P{4, 4, 8}, P{3, 3, 8}, P{2, 2, 8},
                            P{2, 8, 9}, P{1, 1, 9}));
    std::vector<ChainProduct> e = {{11, 11, 12}};
    for (int first = 10; first >= 2; --first) {
        e.push_back({first, first, 12});
    }
    e.push_back({2, 12, 13});
    e.push_back({1, 1, 13});
    EXPECT_THAT(*parse_parenthesisation(*chain_parenthesisation('E')), ElementsAreArray(e));
    // The text as docs/workloads.md writes it parses the same way.
    EXPECT_EQ(*parse_parenthesisation("M1((M2(M3(M4(M5(M6(M7 M8))))))M9)"),
              *parse_parenthesisation(*chain_parenthesisation('D')));
}

TEST(Chain, GraphsHaveTheChainShapes) {
    for (char name : kChains) {
        SCOPED_TRACE(name);
        absl::StatusOr<ir::Graph> graph = chain(name);
        ASSERT_TRUE(graph.ok()) << graph.status();
        const std::vector<int64_t> dims = *chain_dims(name);
        const int n = static_cast<int>(dims.size()) - 1;
        ASSERT_EQ(graph->inputs().size(), static_cast<size_t>(n));
        for (int i = 1; i <= n; ++i) {
            EXPECT_EQ(type_of(*graph, "M" + std::to_string(i)),
                      "f16[b" + std::to_string(i - 1) + "=" + std::to_string(dims[i - 1]) + ", b" +
                          std::to_string(i) + "=" + std::to_string(dims[i]) + "]");
        }
        // n - 1 matmuls, nothing else.
        ASSERT_EQ(graph->nodes().size(), static_cast<size_t>(n - 1));
        for (const ir::GraphNode& node : graph->nodes()) {
            const auto& einsum = dynamic_cast<const ir::Einsum&>(*node.op);
            EXPECT_THAT(einsum.input_terms(), ElementsAre("ij", "jk"));
            EXPECT_EQ(einsum.output_term(), "ik");
            EXPECT_EQ(einsum.join().fn, ir::ScalarFn::mul);
            EXPECT_EQ(einsum.agg(), ir::AggOp::sum);
        }
        const std::string root = "m1_" + std::to_string(n);
        ASSERT_EQ(graph->saved().size(), 1u);
        EXPECT_EQ(graph->tensor(graph->saved()[0]).name, root);
        // [end, end]; C is the one chain whose two ends differ (10240 and 2048).
        EXPECT_EQ(graph->tensor(graph->saved()[0]).type.shape(),
                  (std::vector<int64_t>{dims[0], dims[n]}));
        if (name != 'C') {
            EXPECT_EQ(dims[0], dims[n]);
        }
    }
}

TEST(Chain, RootOperandsOfA) {
    absl::StatusOr<ir::Graph> graph = chain('A');
    ASSERT_TRUE(graph.ok()) << graph.status();
    const ir::GraphNode& root = graph->nodes().back();
    EXPECT_EQ(root.name, "m1_9");
    ASSERT_EQ(root.inputs.size(), 2u);
    // (M1 M2) is [dims[0], dims[2]] = [10240, 6144]; the rest, M3..M9, [6144, 10240].
    EXPECT_EQ(graph->tensor(root.inputs[0]).name, "m1_2");
    EXPECT_EQ(graph->tensor(root.inputs[0]).type.to_string(), "f16[b0=10240, b2=6144]");
    EXPECT_EQ(graph->tensor(root.inputs[1]).name, "m3_9");
    EXPECT_EQ(graph->tensor(root.inputs[1]).type.to_string(), "f16[b2=6144, b9=10240]");
    EXPECT_EQ(type_of(*graph, "m5_8"), "f16[b4=6144, b8=6144]");
    EXPECT_EQ(type_of(*graph, "m3_8"), "f16[b2=6144, b8=6144]");
    EXPECT_EQ(type_of(*graph, "m1_9"), "f16[b0=10240, b9=10240]");
}

TEST(Chain, RootOperandsOfDAndE) {
    absl::StatusOr<ir::Graph> d = chain('D');
    ASSERT_TRUE(d.ok()) << d.status();
    EXPECT_EQ(d->tensor(d->nodes().back().inputs[0]).type.to_string(), "f16[b0=24576, b1=1536]");
    EXPECT_EQ(d->tensor(d->nodes().back().inputs[1]).type.to_string(), "f16[b1=1536, b9=24576]");
    absl::StatusOr<ir::Graph> e = chain('E', ir::DType::bf16);
    ASSERT_TRUE(e.ok()) << e.status();
    EXPECT_EQ(type_of(*e, "m2_12"), "bf16[b1=1024, b12=1024]");
    EXPECT_EQ(type_of(*e, "m1_13"), "bf16[b0=49152, b13=49152]");
}

TEST(ChainParenthesisation, ErrorsNameTheProblem) {
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"M1 M2 M3", "a third juxtaposed factor"},
        {"(M1 M2", "missing ')' for the '(' at offset 0"},
        {"M1 M2)", "unmatched ')' at offset 5"},
        {"M2 M1", "matrix 'M2' out of order: expected M1"},
        {"M1 M3", "matrix 'M3' out of order: expected M2"},
        {"M1 M01", "matrix 'M01' out of order: expected M2"},
        {"M1", "a chain needs at least two matrices, this one has 1"},
        {"M1 x M2", "unexpected 'x', expected 'M<k>' or '(' at offset 3"},
        {"", "unexpected end"},
        {"()", "unexpected ')'"},
        {"M1 M", "'M' without a matrix number"},
        {std::string(300, '(') + "M1 M2" + std::string(300, ')'), "nested deeper than 256"},
    };
    for (const auto& [text, message] : cases) {
        absl::StatusOr<std::vector<ChainProduct>> products = parse_parenthesisation(text);
        ASSERT_FALSE(products.ok()) << text;
        EXPECT_EQ(products.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(products.status().message()), HasSubstr(message)) << text;
    }
    EXPECT_THAT(parse_parenthesisation("((M1 M2))").value(), ElementsAre(ChainProduct{1, 1, 2}));
}

TEST(Chain, ErrorsForBadNamesAndDims) {
    for (char bad : {'F', 'a', '\0'}) {
        EXPECT_FALSE(chain_dims(bad).ok());
        EXPECT_FALSE(chain_parenthesisation(bad).ok());
        absl::StatusOr<ir::Graph> graph = chain(bad);
        ASSERT_FALSE(graph.ok());
        EXPECT_THAT(std::string(graph.status().message()), HasSubstr("unknown matrix chain"));
    }
    const std::vector<int64_t> three = {2, 3, 4};
    absl::StatusOr<ir::Graph> wrong = chain_from("M1 (M2 M3)", three);
    ASSERT_FALSE(wrong.ok());
    EXPECT_THAT(std::string(wrong.status().message()),
                HasSubstr("3 matrices need 4 boundary sizes, got 3"));
    const std::vector<int64_t> zero = {2, 0, 4};
    absl::StatusOr<ir::Graph> empty = chain_from("M1 M2", zero);
    ASSERT_FALSE(empty.ok());
    EXPECT_THAT(std::string(empty.status().message()), HasSubstr("'b1' has size 0"));
}

// Plain left-to-right product with naive loops.
ir::HostTensor naive_chain(const std::vector<ir::HostTensor>& matrices) {
    std::vector<double> acc = matrices[0].values();
    int64_t rows = matrices[0].shape()[0], cols = matrices[0].shape()[1];
    for (size_t idx = 1; idx < matrices.size(); ++idx) {
        const int64_t next_cols = matrices[idx].shape()[1];
        const std::vector<double>& rhs = matrices[idx].values();
        std::vector<double> product(rows * next_cols, 0.0);
        for (int64_t i = 0; i < rows; ++i) {
            for (int64_t j = 0; j < cols; ++j) {
                for (int64_t k = 0; k < next_cols; ++k) {
                    product[i * next_cols + k] += acc[i * cols + j] * rhs[j * next_cols + k];
                }
            }
        }
        acc = std::move(product);
        cols = next_cols;
    }
    return ir::HostTensor(ir::Box::from_shape({rows, cols}), acc);
}

// Every chain's parenthesisation on small random sizes equals the left-to-right product.
TEST(ChainNumerics, ParenthesisationsEqualLeftToRightProduct) {
    std::mt19937_64 rng(42);
    for (char name : kChains) {
        SCOPED_TRACE(name);
        const std::string text = *chain_parenthesisation(name);
        const size_t n = chain_dims(name)->size() - 1;
        for (int trial = 0; trial < 5; ++trial) {
            std::vector<int64_t> dims;
            for (size_t k = 0; k <= n; ++k) {
                dims.push_back(std::uniform_int_distribution<int64_t>(1, 6)(rng));
            }
            absl::StatusOr<ir::Graph> graph = chain_from(text, dims, ir::DType::f64);
            ASSERT_TRUE(graph.ok()) << graph.status();
            std::map<std::string, ir::HostTensor> inputs;
            std::vector<ir::HostTensor> matrices;
            for (size_t i = 1; i <= n; ++i) {
                matrices.push_back(
                    ir::HostTensor::random(ir::Box::from_shape({dims[i - 1], dims[i]}), rng));
                inputs["M" + std::to_string(i)] = matrices.back();
            }
            absl::StatusOr<std::map<std::string, ir::HostTensor>> out =
                ir::evaluate_graph(*graph, inputs);
            ASSERT_TRUE(out.ok()) << out.status();
            const ir::HostTensor& result = out->at("m1_" + std::to_string(n));
            for (double value : result.values()) {
                ASSERT_TRUE(std::isfinite(value));
            }
            EXPECT_LE(ir::max_relative_error(result, naive_chain(matrices)), 1e-9);
        }
    }
}

} // namespace
} // namespace einsummable::workloads
