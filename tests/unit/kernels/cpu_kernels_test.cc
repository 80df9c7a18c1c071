// kernels/cpu run_block against the operators' reference implementations: contractions through
// gemm_invariant (matmul, batched, transposed, several batch and contracted indices), the fallback
// for everything else, split blocks with non-zero lower bounds, and argument checks.

#include <algorithm>
#include <array>
#include <cstdint>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/spec_execution.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "tests/unit/kernels/einsum_cases.h"

namespace einsummable::kernels::cpu {
namespace {

using einsum_cases::make_einsum;
using einsum_cases::random_types;

using ir::Box;
using ir::HostTensor;

constexpr double kTolerance = 1e-12;
constexpr uint64_t kBaseSeed = 0x5eed2024;

// A seed per equation that is the same on every platform (FNV-1a).
uint64_t equation_seed(const std::string& equation) {
    uint64_t hash = 1469598103934665603ull;
    for (char c : equation) {
        hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    return kBaseSeed + hash % 100000;
}

std::vector<HostTensor> random_inputs(const ir::Operator& op, std::mt19937_64& rng) {
    std::vector<HostTensor> inputs;
    for (const ir::TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng));
    }
    return inputs;
}

// run_block equals op.reference on the whole tensors, on every block of a random split, and
// through execute_spec.
void check_against_reference(const ir::Operator& op, std::mt19937_64& rng) {
    const std::vector<HostTensor> inputs = random_inputs(op, rng);
    const ir::FunctionSpec whole = op.whole_spec().functions[0];
    absl::StatusOr<std::vector<HostTensor>> expected = op.reference(inputs, whole);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<std::vector<HostTensor>> got = run_block(op, inputs, whole);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->size(), 1u);
    ASSERT_EQ((*got)[0].box(), (*expected)[0].box());
    EXPECT_LE(ir::max_relative_error((*got)[0], (*expected)[0]), kTolerance) << "whole block";

    // A split with up to 3 intervals per index: blocks whose lower bounds are not zero.
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    std::vector<int64_t> counts;
    for (const ir::ShardableIndex& index : indices) {
        counts.push_back(std::uniform_int_distribution<int64_t>(
            1, std::min<int64_t>(3, index.max_parts()))(rng));
    }
    absl::StatusOr<ir::IntervalRequest> request = ir::make_request(indices, counts);
    ASSERT_TRUE(request.ok()) << request.status();
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(*request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    SCOPED_TRACE(absl::StrCat("split ", ir::request_to_string(indices, *request)));
    for (const ir::FunctionSpec& function : spec->functions) {
        std::vector<HostTensor> blocks;
        for (size_t input_idx = 0; input_idx < inputs.size(); ++input_idx) {
            blocks.push_back(inputs[input_idx].slice(function.inputs[input_idx]));
        }
        absl::StatusOr<std::vector<HostTensor>> block_expected = op.reference(blocks, function);
        ASSERT_TRUE(block_expected.ok()) << block_expected.status();
        absl::StatusOr<std::vector<HostTensor>> block_got = run_block(op, blocks, function);
        ASSERT_TRUE(block_got.ok()) << block_got.status();
        ASSERT_EQ((*block_got)[0].box(), function.outputs[0]);
        EXPECT_LE(ir::max_relative_error((*block_got)[0], (*block_expected)[0]), kTolerance)
            << "block " << function.outputs[0].to_string();
    }
    absl::StatusOr<std::vector<HostTensor>> executed =
        ir::execute_spec(op, *spec, inputs, run_block);
    ASSERT_TRUE(executed.ok()) << executed.status();
    EXPECT_LE(ir::max_relative_error((*executed)[0], (*expected)[0]), 1e-12) << "execute_spec";
}

struct Case {
    std::string equation;
    std::string join;
    std::string agg;
    bool blas; // whether run_block should take the dgemm path
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.equation << (c.join.empty() ? "" : " join=" + c.join)
        << (c.agg.empty() ? "" : " agg=" + c.agg);
}

// "ij_jk_to_ik_join_mul_agg_max": test names may hold only letters, digits and underscores.
std::string case_name(const testing::TestParamInfo<Case>& info) {
    std::string name;
    for (char c : info.param.equation) {
        name += c == ','   ? std::string("_")
                : c == '-' ? std::string("_to")
                : c == '>' ? "_"
                           : std::string(1, c);
    }
    if (!info.param.join.empty()) {
        name += "_join_" + info.param.join;
    }
    if (!info.param.agg.empty()) {
        name += "_agg_" + info.param.agg;
    }
    return name;
}

class RunBlockTest : public testing::TestWithParam<Case> {};

TEST_P(RunBlockTest, MatchesReference) {
    const Case& c = GetParam();
    for (int trial = 0; trial < 6; ++trial) {
        const uint64_t seed = equation_seed(c.equation) + trial;
        SCOPED_TRACE(absl::StrCat(c.equation, " seed=", seed));
        std::mt19937_64 rng(seed);
        // Extents up to 9 for low ranks, up to 4 for the five-index cases.
        const int64_t max_extent = c.equation.size() > 14 ? 4 : 9;
        ir::OperatorPtr op =
            make_einsum(c.equation, random_types(c.equation, rng, max_extent), c.join, c.agg);
        ASSERT_NE(op, nullptr);
        EXPECT_EQ(uses_gemm(*op), c.blas);
        check_against_reference(*op, rng);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Contractions, RunBlockTest,
    testing::Values(Case{"ij,jk->ik", "", "", true},        // matmul
                    Case{"bij,bjk->bik", "", "", true},     // batched matmul
                    Case{"ji,kj->ik", "", "", true},        // both operands transposed
                    Case{"ij,kj->ki", "", "", true},        // transposed output
                    Case{"ji,jk->ik", "", "", true},        // lhs transposed
                    Case{"ij,jk->ki", "", "", true},        // output permuted
                    Case{"abcd,cde->abe", "", "", true},    // two k indices
                    Case{"pqik,qpkj->qpji", "", "", true},  // two batch indices, packing
                    Case{"abcde,ecbfa->dfb", "", "", true}, // batch b, k a c e, m d, n f
                    Case{"bhqd,bhkd->bhqk", "", "", true},  // attention scores
                    Case{"i,j->ij", "", "", true},          // outer product, no k
                    Case{"i,i->", "", "", true},            // dot product, scalar output
                    Case{"bi,bi->b", "", "", true},         // batched dot
                    Case{"ij,jk->ik", "mul", "sum", true}), // explicit attributes
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Fallback, RunBlockTest,
    testing::Values(Case{"ijx,jk->ik", "", "", false},      // x reduced inside one operand
                    Case{"ij,jky->ik", "", "", false},      // y reduced inside one operand
                    Case{"ij,jk->ik", "mul", "max", false}, // not a sum
                    Case{"ij,jk->ik", "add", "sum", false}, // not a product
                    Case{"ij,ij->ij", "add", "", false},    // element-wise add
                    Case{"ij,ij->ij", "", "", false},       // element-wise product
                    Case{"ij,j->ij", "", "", false},        // broadcast product
                    Case{"ij->ij", "relu", "", false},      // unary relu
                    Case{"ij->ji", "", "", false},          // transpose
                    Case{"ij->i", "", "max", false}),       // max reduction
    case_name);

TEST(RunBlockTest, BlockMismatchingFunctionSpecIsInvalidArgument) {
    std::mt19937_64 rng(kBaseSeed);
    std::cout << "seed " << kBaseSeed << "\n";
    ir::OperatorPtr op = make_einsum("ij,jk->ik", random_types("ij,jk->ik", rng, 8));
    ASSERT_NE(op, nullptr);
    ASSERT_TRUE(uses_gemm(*op));
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    const std::vector<ir::ShardableIndex> indices = op->shardable_indices();
    absl::StatusOr<ir::IntervalRequest> request = ir::make_request(indices, {2, 2, 2});
    ASSERT_TRUE(request.ok()) << request.status();
    absl::StatusOr<ir::JoinAggSpec> spec = op->spec(*request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const ir::FunctionSpec& function = spec->functions.back();

    // Whole tensors handed to a function spec that reads blocks.
    absl::StatusOr<std::vector<HostTensor>> got = run_block(*op, inputs, function);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();

    // Blocks of another function spec.
    std::vector<HostTensor> blocks;
    for (int input_idx = 0; input_idx < 2; ++input_idx) {
        blocks.push_back(inputs[input_idx].slice(spec->functions.front().inputs[input_idx]));
    }
    got = run_block(*op, blocks, function);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();

    // Boxes that match the function spec, which itself is inconsistent: the lhs reads the first
    // half of j, the rhs the second.
    ir::FunctionSpec inconsistent = op->whole_spec().functions[0];
    const int64_t j = op->input_types()[0].dims[1].size;
    ASSERT_GE(j, 2);
    inconsistent.inputs[0] = Box({inconsistent.inputs[0][0], {0, j / 2}});
    inconsistent.inputs[1] = Box({{j - j / 2, j}, inconsistent.inputs[1][1]});
    blocks = {inputs[0].slice(inconsistent.inputs[0]), inputs[1].slice(inconsistent.inputs[1])};
    got = run_block(*op, blocks, inconsistent);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
    EXPECT_EQ(op->reference(blocks, inconsistent).status().code(),
              absl::StatusCode::kInvalidArgument);

    // A wrong number of inputs.
    got = run_block(*op, absl::MakeConstSpan(inputs).subspan(0, 1), op->whole_spec().functions[0]);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();

    // The fallback path reports mismatches the same way.
    ir::OperatorPtr relu = make_einsum("ij->ij", {op->input_types()[0]}, "relu");
    ASSERT_NE(relu, nullptr);
    got = run_block(*relu, {blocks[0]}, relu->whole_spec().functions[0]);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument) << got.status();
}

TEST(RunBlockTest, EmptyContractedExtentGivesZeros) {
    ir::OperatorPtr op =
        make_einsum("ij,jk->ik", {ir::TensorType{ir::DType::f32, {{"i", 3}, {"j", 4}}},
                                  ir::TensorType{ir::DType::f32, {{"j", 4}, {"k", 2}}}});
    ASSERT_NE(op, nullptr);
    std::mt19937_64 rng(kBaseSeed);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    // An empty interval of j: the sum over no terms.
    ir::FunctionSpec function{{Box({{0, 3}, {2, 2}}), Box({{2, 2}, {0, 2}})},
                              {Box({{0, 3}, {0, 2}})}};
    std::vector<HostTensor> blocks = {inputs[0].slice(function.inputs[0]),
                                      inputs[1].slice(function.inputs[1])};
    absl::StatusOr<std::vector<HostTensor>> expected = op->reference(blocks, function);
    absl::StatusOr<std::vector<HostTensor>> got = run_block(*op, blocks, function);
    ASSERT_EQ(expected.ok(), got.ok()) << expected.status() << " vs " << got.status();
    if (got.ok()) {
        EXPECT_EQ(ir::max_relative_error((*got)[0], (*expected)[0]), 0.0);
    }
}

TEST(RunBlockTest, LargeMatmulMatchesReference) {
    // Big enough for the gemm to cross its register tiles and panels many times.
    const uint64_t seed = kBaseSeed + 7;
    SCOPED_TRACE(absl::StrCat("seed=", seed));
    std::mt19937_64 rng(seed);
    ir::OperatorPtr op =
        make_einsum("ij,kj->ik", {ir::TensorType{ir::DType::f32, {{"i", 150}, {"j", 170}}},
                                  ir::TensorType{ir::DType::f32, {{"k", 130}, {"j", 170}}}});
    ASSERT_NE(op, nullptr);
    check_against_reference(*op, rng);
}

} // namespace
} // namespace einsummable::kernels::cpu
