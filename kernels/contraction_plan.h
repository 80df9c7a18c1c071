#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "compiler/ir/ops/einsum.h"

namespace einsummable::kernels {

// Einsum contractions as batched gemm, shared by every backend: the CPU kernels run the plan
// through the gemm library (kernels/cpu/contraction.h), the CUDA kernels through cuBLASLt
// (kernels/cuda/contraction_cublaslt.h). A contraction is an ir::Einsum with two inputs, join
// mul and agg sum whose every index is in both inputs or in the output. Its indices are
// classified into batch (both inputs and the output), m (lhs and output), n (rhs and output)
// and k (both inputs, not the output): C[batch, m, n] = sum_k A[batch, m, k] B[batch, k, n].
// Examples of every layout: tests/unit/kernels/contraction_plan_test.cc.

// Extent of every index letter in one block (indexed by the letter's character code).
using IndexExtents = std::array<int64_t, 128>;

// How one contraction maps onto gemm, with A the block of input `lhs_input` and B that of the
// other input. Index groups are strings of letters in the order the gemm's operands use.
struct ContractionPlan {
    int lhs_input = 0;
    int rhs_input = 1;
    std::string batch;
    std::string m;
    std::string n;
    std::string k;
    // An operand is used as stored ("batch+m+k" for the lhs, "batch+k+n" for the rhs), as
    // stored but transposed within each batch element, or packed to the untransposed layout.
    bool lhs_transposed = false;
    bool lhs_packed = false;
    bool rhs_transposed = false;
    bool rhs_packed = false;
    // The output is written in place when its term is batch+m+n; otherwise through a buffer.
    bool out_direct = true;

    // The layouts the gemm reads and writes: what packed operands and the output buffer hold.
    std::string lhs_gemm_term() const { return batch + m + k; }
    std::string rhs_gemm_term() const { return batch + k + n; }
    std::string out_gemm_term() const { return batch + m + n; }

    int copies() const {
        return static_cast<int>(lhs_packed) + static_cast<int>(rhs_packed) +
               static_cast<int>(!out_direct);
    }
};

// The cheapest plan (fewest copies; ties keep the inputs' order and the lhs's k order), or
// nullopt when `op` is not a contraction gemm can run well (element-wise products with
// broadcasting, which would be gemm calls of size 1, are left to loops). Decided from the
// operator's kind and attributes alone, so a backend can choose its kernel before it sees a
// block.
std::optional<ContractionPlan> plan_contraction(const ir::Operator& op);

// The extent of every index letter of `einsum` in blocks with boxes `input_boxes` (one per
// input, ranks matching the terms); letters that appear nowhere are 0.
IndexExtents index_extents(const ir::Einsum& einsum, absl::Span<const ir::Box> input_boxes);

// The same for the blocks of `function`, checked: every letter spans one extent in every input
// and in the output, as the kernels assume. InvalidArgument naming the operator, the letter and
// the block otherwise.
absl::StatusOr<IndexExtents> checked_index_extents(const ir::Einsum& einsum,
                                                   const ir::FunctionSpec& function);

// `plan` in numbers: the gemm sizes and the row-major layout of each operand as the gemm reads
// it (packed operands: their packed layout). Per batch element A is m x k (k x m when
// lhs_transposed) with leading dimension lda, B is k x n (n x k when rhs_transposed), C is
// m x n; batch elements lie stride_* elements apart.
struct GemmShape {
    int64_t batch = 1;
    int64_t m = 1;
    int64_t n = 1;
    int64_t k = 1;
    int64_t lda = 1;
    int64_t ldb = 1;
    int64_t ldc = 1;
    int64_t stride_a = 0;
    int64_t stride_b = 0;
    int64_t stride_c = 0;
};
GemmShape gemm_shape(const ContractionPlan& plan, const IndexExtents& extents);

// A copy of a dense row-major block laid out as one term into another order of the same
// letters, reduced to its essentials for a device permute kernel: letters of extent 1 are
// dropped and letters that stay neighbours in both orders are merged, so dst dimension j is
// src dimension perm[j] of a block of extents src_dims. An identity (also for rank 0) means the
// two layouts hold the same bytes and no copy is needed.
struct TermPermutation {
    std::vector<int64_t> src_dims;
    std::vector<int> perm;

    bool identity() const;
};
TermPermutation term_permutation(const std::string& src_term, const std::string& dst_term,
                                 const IndexExtents& extents);

} // namespace einsummable::kernels
