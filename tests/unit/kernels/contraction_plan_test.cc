// The backend-neutral contraction plan (kernels/contraction_plan.h): how einsums classify as
// batched gemm (matmul, batched, transposed operands, broadcast batch, packed layouts, and the
// einsums that are not gemm), the gemm's sizes and leading dimensions, the checked extents of a
// function spec's blocks, and the reduced permutations the CUDA packing uses (against a direct
// letter-by-letter copy on random terms; replay with EINSUMMABLE_TEST_SEED=<printed seed>).

#include <array>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "compiler/ir/ops/einsum.h"
#include "gtest/gtest.h"
#include "kernels/contraction_plan.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/einsum_cases.h"

namespace einsummable::kernels {
namespace {

using cpu::einsum_cases::make_einsum;

// An einsum over `equation` whose letter c has extent extent_of(c) (2, 3, 4, ... by first
// appearance, so every group's size is recognisable).
ir::OperatorPtr einsum_with_extents(const std::string& equation, const std::string& join = "",
                                    const std::string& agg = "") {
    const std::string inputs = equation.substr(0, equation.find("->"));
    std::array<int64_t, 128> size_of{};
    int64_t next = 2;
    std::vector<ir::TensorType> types(1);
    for (char c : inputs) {
        if (c == ',') {
            types.emplace_back();
            continue;
        }
        int64_t& size = size_of[static_cast<unsigned char>(c)];
        if (size == 0) {
            size = next++;
        }
        types.back().dims.push_back({std::string(1, c), size});
    }
    return make_einsum(equation, types, join, agg);
}

IndexExtents whole_extents(const ir::Operator& op) {
    const auto& einsum = static_cast<const ir::Einsum&>(op);
    std::vector<ir::Box> boxes;
    for (const ir::TensorType& type : op.input_types()) {
        boxes.push_back(type.box());
    }
    return index_extents(einsum, boxes);
}

struct Expected {
    std::string equation;
    int lhs_input;
    std::string batch, m, n, k;
    bool lhs_transposed, lhs_packed, rhs_transposed, rhs_packed, out_direct;
};

void PrintTo(const Expected& e, std::ostream* os) {
    *os << e.equation;
}

class ClassifyTest : public ::testing::TestWithParam<Expected> {};

TEST_P(ClassifyTest, PlansTheExpectedGemm) {
    const Expected& e = GetParam();
    ir::OperatorPtr op = einsum_with_extents(e.equation);
    ASSERT_NE(op, nullptr);
    std::optional<ContractionPlan> plan = plan_contraction(*op);
    ASSERT_TRUE(plan.has_value()) << e.equation;
    EXPECT_EQ(plan->lhs_input, e.lhs_input);
    EXPECT_EQ(plan->rhs_input, 1 - e.lhs_input);
    EXPECT_EQ(plan->batch, e.batch);
    EXPECT_EQ(plan->m, e.m);
    EXPECT_EQ(plan->n, e.n);
    EXPECT_EQ(plan->k, e.k);
    EXPECT_EQ(plan->lhs_transposed, e.lhs_transposed);
    EXPECT_EQ(plan->lhs_packed, e.lhs_packed);
    EXPECT_EQ(plan->rhs_transposed, e.rhs_transposed);
    EXPECT_EQ(plan->rhs_packed, e.rhs_packed);
    EXPECT_EQ(plan->out_direct, e.out_direct);
    EXPECT_EQ(plan->lhs_gemm_term(), e.batch + e.m + e.k);
    EXPECT_EQ(plan->rhs_gemm_term(), e.batch + e.k + e.n);
    EXPECT_EQ(plan->out_gemm_term(), e.batch + e.m + e.n);
}

INSTANTIATE_TEST_SUITE_P(
    Contractions, ClassifyTest,
    ::testing::Values(
        // lhs batch m n k | lhs_T lhs_P rhs_T rhs_P out_direct
        Expected{"ij,jk->ik", 0, "", "i", "k", "j", false, false, false, false, true},
        Expected{"bij,bjk->bik", 0, "b", "i", "k", "j", false, false, false, false, true},
        Expected{"ji,jk->ik", 0, "", "i", "k", "j", true, false, false, false, true},
        Expected{"ij,kj->ik", 0, "", "i", "k", "j", false, false, true, false, true},
        Expected{"ji,kj->ik", 0, "", "i", "k", "j", true, false, true, false, true},
        // The output transposed: swapping the operands makes it direct.
        Expected{"ij,jk->ki", 1, "", "k", "i", "j", true, false, true, false, true},
        // Broadcast batch: b only in the lhs joins m.
        Expected{"bij,jk->bik", 0, "", "bi", "k", "j", false, false, false, false, true},
        // Broadcast batch in the rhs: no layout avoids copies; the rhs and the output are packed.
        Expected{"ij,bjk->bik", 0, "", "i", "bk", "j", false, false, false, true, false},
        Expected{"ibj,bkj->bki", 1, "b", "k", "i", "j", false, false, false, true, true},
        Expected{"bhqd,bhkd->bhqk", 0, "bh", "q", "k", "d", false, false, true, false, true},
        Expected{"abcd,cde->abe", 0, "", "ab", "e", "cd", false, false, false, false, true},
        Expected{"ij,j->i", 0, "", "i", "", "j", false, false, false, false, true},
        Expected{"i,i->", 0, "", "", "", "i", false, false, false, false, true},
        Expected{"i,j->ij", 0, "", "i", "j", "", false, false, false, false, true}),
    [](const ::testing::TestParamInfo<Expected>& info) {
        return "case" + std::to_string(info.index);
    });

TEST(ClassifyTest, EinsumsThatAreNotGemm) {
    struct NotGemm {
        std::string equation, join, agg;
    };
    for (const NotGemm& c : std::vector<NotGemm>{
             {"ij,jk->ik", "add", ""},      // join is not mul
             {"ij,jk->ik", "mul", "max"},   // tropical: agg is not sum
             {"ij,j->ij", "mul", ""},       // element-wise product with broadcasting
             {"ij,ij->ij", "mul", ""},      // element-wise product
             {"ij,jk->i", "mul", "sum"},    // k reduced inside the rhs alone
             {"ij->i", "", "sum"},          // one input
             {"ij,jk,k->ik", "mul", "sum"}, // three inputs
         }) {
        ir::OperatorPtr op = einsum_with_extents(c.equation, c.join, c.agg);
        ASSERT_NE(op, nullptr) << c.equation;
        EXPECT_FALSE(plan_contraction(*op).has_value())
            << c.equation << " join=" << c.join << " agg=" << c.agg;
    }
}

TEST(ClassifyTest, AggregationOnlyMattersWhenSomethingIsReduced) {
    ir::OperatorPtr op = einsum_with_extents("ij,jk->ijk", "mul", "max");
    ASSERT_NE(op, nullptr);
    std::optional<ContractionPlan> plan = plan_contraction(*op);
    ASSERT_TRUE(plan.has_value());
    EXPECT_EQ(plan->batch, "j");
    EXPECT_EQ(plan->k, "");
    EXPECT_FALSE(plan->out_direct);
}

TEST(GemmShapeTest, SizesAndLeadingDimensions) {
    // i=2, j=3, k=4 (extents by first appearance).
    ir::OperatorPtr matmul = einsum_with_extents("ij,jk->ik");
    ASSERT_NE(matmul, nullptr);
    GemmShape shape = gemm_shape(*plan_contraction(*matmul), whole_extents(*matmul));
    EXPECT_EQ(shape.batch, 1);
    EXPECT_EQ(shape.m, 2);
    EXPECT_EQ(shape.n, 4);
    EXPECT_EQ(shape.k, 3);
    EXPECT_EQ(shape.lda, 3);
    EXPECT_EQ(shape.ldb, 4);
    EXPECT_EQ(shape.ldc, 4);

    // Both operands transposed: A is stored k x m (lda = m), B n x k (ldb = k).
    ir::OperatorPtr transposed = einsum_with_extents("ji,kj->ik"); // j=2, i=3, k=4
    ASSERT_NE(transposed, nullptr);
    shape = gemm_shape(*plan_contraction(*transposed), whole_extents(*transposed));
    EXPECT_EQ(shape.m, 3);
    EXPECT_EQ(shape.n, 4);
    EXPECT_EQ(shape.k, 2);
    EXPECT_EQ(shape.lda, 3);
    EXPECT_EQ(shape.ldb, 2);
    EXPECT_EQ(shape.ldc, 4);

    // Batched: b=2, i=3, j=4, k=5; batch elements lie a whole matrix apart.
    ir::OperatorPtr batched = einsum_with_extents("bij,bjk->bik");
    ASSERT_NE(batched, nullptr);
    shape = gemm_shape(*plan_contraction(*batched), whole_extents(*batched));
    EXPECT_EQ(shape.batch, 2);
    EXPECT_EQ(shape.stride_a, 3 * 4);
    EXPECT_EQ(shape.stride_b, 4 * 5);
    EXPECT_EQ(shape.stride_c, 3 * 5);

    // Broadcast batch folds into m: b=2, i=3 give m=6.
    ir::OperatorPtr broadcast = einsum_with_extents("bij,jk->bik");
    ASSERT_NE(broadcast, nullptr);
    shape = gemm_shape(*plan_contraction(*broadcast), whole_extents(*broadcast));
    EXPECT_EQ(shape.batch, 1);
    EXPECT_EQ(shape.m, 6);

    // No k: the outer product is a gemm with k = 1.
    ir::OperatorPtr outer = einsum_with_extents("i,j->ij");
    ASSERT_NE(outer, nullptr);
    shape = gemm_shape(*plan_contraction(*outer), whole_extents(*outer));
    EXPECT_EQ(shape.k, 1);
    EXPECT_EQ(shape.m, 2);
    EXPECT_EQ(shape.n, 3);
}

TEST(CheckedExtentsTest, AcceptsMatchingBlocksAndNamesTheMismatch) {
    ir::OperatorPtr op = einsum_with_extents("ij,jk->ik"); // i=2, j=3, k=4
    ASSERT_NE(op, nullptr);
    const auto& einsum = static_cast<const ir::Einsum&>(*op);
    ir::FunctionSpec function;
    function.inputs = {ir::Box({{0, 2}, {1, 3}}), ir::Box({{1, 3}, {0, 4}})};
    function.outputs = {ir::Box({{0, 2}, {0, 4}})};
    absl::StatusOr<IndexExtents> extents = checked_index_extents(einsum, function);
    ASSERT_TRUE(extents.ok()) << extents.status();
    EXPECT_EQ((*extents)['i'], 2);
    EXPECT_EQ((*extents)['j'], 2);
    EXPECT_EQ((*extents)['k'], 4);

    function.inputs[1] = ir::Box({{0, 3}, {0, 4}}); // j spans 2 in the lhs, 3 here
    extents = checked_index_extents(einsum, function);
    ASSERT_FALSE(extents.ok());
    EXPECT_EQ(extents.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(extents.status().message(), op->describe())) << extents.status();
    EXPECT_TRUE(absl::StrContains(extents.status().message(), "index 'j' spans 3 in input 1"))
        << extents.status();

    function.inputs[1] = ir::Box({{1, 3}, {0, 4}});
    function.outputs[0] = ir::Box({{0, 2}, {0, 3}}); // k spans 4 in the rhs, 3 in the output
    extents = checked_index_extents(einsum, function);
    ASSERT_FALSE(extents.ok());
    EXPECT_TRUE(absl::StrContains(extents.status().message(), "in the output")) << extents.status();
}

// ---- permutations ---------------------------------------------------------------------------

TEST(TermPermutationTest, TransposeMergeAndDrop) {
    IndexExtents extents{};
    extents['a'] = 2;
    extents['b'] = 3;
    extents['c'] = 4;
    extents['u'] = 1;

    TermPermutation transpose = term_permutation("ab", "ba", extents);
    EXPECT_EQ(transpose.src_dims, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(transpose.perm, (std::vector<int>{1, 0}));
    EXPECT_FALSE(transpose.identity());

    // a and b stay neighbours: one dimension of 6.
    TermPermutation merged = term_permutation("abc", "cab", extents);
    EXPECT_EQ(merged.src_dims, (std::vector<int64_t>{6, 4}));
    EXPECT_EQ(merged.perm, (std::vector<int>{1, 0}));

    // Letters of extent 1 move nothing: the same bytes.
    TermPermutation dropped = term_permutation("aub", "uab", extents);
    EXPECT_TRUE(dropped.identity());
    EXPECT_EQ(dropped.src_dims, (std::vector<int64_t>{6}));

    TermPermutation scalar = term_permutation("u", "u", extents);
    EXPECT_TRUE(scalar.identity());
    EXPECT_TRUE(scalar.src_dims.empty());

    TermPermutation same = term_permutation("abc", "abc", extents);
    EXPECT_TRUE(same.identity());
    EXPECT_EQ(same.src_dims, (std::vector<int64_t>{24}));
}

// Walks dst in row-major order: dst dimension j has `extent[j]` and steps `step[j]` elements
// through src.
std::vector<int> gather(const std::vector<int64_t>& extent, const std::vector<int64_t>& step,
                        const std::vector<int>& src) {
    std::array<int64_t, 16> counter{};
    std::vector<int> dst;
    dst.reserve(src.size());
    for (size_t idx = 0; idx < src.size(); ++idx) {
        int64_t offset = 0;
        for (size_t dim = 0; dim < extent.size(); ++dim) {
            offset += counter[dim] * step[dim];
        }
        dst.push_back(src[static_cast<size_t>(offset)]);
        for (size_t dim = extent.size(); dim-- > 0;) {
            if (++counter[dim] < extent[dim]) {
                break;
            }
            counter[dim] = 0;
        }
    }
    return dst;
}

// dst = src permuted as `permutation` says (dst dimension j is src dimension perm[j]).
std::vector<int> permuted(const TermPermutation& permutation, const std::vector<int>& src) {
    const size_t rank = permutation.src_dims.size();
    std::vector<int64_t> src_stride(rank, 1);
    for (size_t dim = rank; dim-- > 1;) {
        src_stride[dim - 1] = src_stride[dim] * permutation.src_dims[dim];
    }
    std::vector<int64_t> extent;
    std::vector<int64_t> step;
    for (int src_dim : permutation.perm) {
        extent.push_back(permutation.src_dims[static_cast<size_t>(src_dim)]);
        step.push_back(src_stride[static_cast<size_t>(src_dim)]);
    }
    return gather(extent, step, src);
}

// dst = src laid out as dst_term, copied letter by letter.
std::vector<int> direct_copy(const std::string& src_term, const std::string& dst_term,
                             const IndexExtents& extents, const std::vector<int>& src) {
    std::array<int64_t, 128> letter_stride{};
    int64_t stride = 1;
    for (size_t dim = src_term.size(); dim-- > 0;) {
        letter_stride[static_cast<unsigned char>(src_term[dim])] = stride;
        stride *= extents[static_cast<unsigned char>(src_term[dim])];
    }
    std::vector<int64_t> extent;
    std::vector<int64_t> step;
    for (char c : dst_term) {
        extent.push_back(extents[static_cast<unsigned char>(c)]);
        step.push_back(letter_stride[static_cast<unsigned char>(c)]);
    }
    return gather(extent, step, src);
}

TEST(TermPermutationTest, RandomTermsMoveElementsAsADirectCopy) {
    const uint64_t seed = ir::testing::test_seed() + 17;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int64_t> extent_of(1, 3);
    for (int trial = 0; trial < 500; ++trial) {
        std::string src_term = std::string("abcdefg").substr(0, 1 + trial % 7);
        std::shuffle(src_term.begin(), src_term.end(), rng);
        std::string dst_term = src_term;
        std::shuffle(dst_term.begin(), dst_term.end(), rng);
        IndexExtents extents{};
        int64_t volume = 1;
        for (char c : src_term) {
            extents[static_cast<unsigned char>(c)] = extent_of(rng);
            volume *= extents[static_cast<unsigned char>(c)];
        }
        std::vector<int> src(static_cast<size_t>(volume));
        for (size_t idx = 0; idx < src.size(); ++idx) {
            src[idx] = static_cast<int>(idx);
        }
        const TermPermutation permutation = term_permutation(src_term, dst_term, extents);
        SCOPED_TRACE(::testing::Message() << "seed " << seed << " trial " << trial << ": "
                                          << src_term << " -> " << dst_term);
        int64_t reduced_volume = 1;
        for (int64_t dim : permutation.src_dims) {
            EXPECT_GT(dim, 1);
            reduced_volume *= dim;
        }
        ASSERT_EQ(reduced_volume, volume);
        const std::vector<int> expected = direct_copy(src_term, dst_term, extents, src);
        EXPECT_EQ(permutation.identity() ? src : permuted(permutation, src), expected);
        // Merging leaves no two neighbours that could still be one dimension.
        for (size_t dim = 1; dim < permutation.perm.size(); ++dim) {
            EXPECT_NE(permutation.perm[dim], permutation.perm[dim - 1] + 1);
        }
    }
}

} // namespace
} // namespace einsummable::kernels
