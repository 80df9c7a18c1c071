#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/operator.h"
#include "compiler/ir/ops/einsum.h"

namespace einsummable::kernels::cpu {

// Einsum contractions through BLAS gemm, shared by run_block (double, cblas_dgemm) and run_f32
// (float, cblas_sgemm). A contraction is an ir::Einsum with two inputs, join mul and agg sum
// whose every index is in both inputs or in the output. Its indices are classified into batch
// (both inputs and the output), m (lhs and output), n (rhs and output) and k (both inputs, not
// the output): C[batch, m, n] = sum_k A[batch, m, k] B[batch, k, n], one gemm per batch element.

// Extent of every index letter in one block (indexed by the letter's character code).
using IndexExtents = std::array<int64_t, 128>;

// How one contraction maps onto gemm calls, with A the block of input `lhs_input` and B that of
// the other input. Index groups are strings of letters in the order the packed operands use.
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

    int copies() const {
        return static_cast<int>(lhs_packed) + static_cast<int>(rhs_packed) +
               static_cast<int>(!out_direct);
    }
};

// The cheapest plan (fewest copies; ties keep the inputs' order and the lhs's k order), or
// nullopt when `op` is not a contraction gemm can run well (element-wise products with
// broadcasting, which would be gemm calls of size 1, are left to loops). Decided from the
// operator's kind and attributes alone.
std::optional<ContractionPlan> plan_contraction(const ir::Operator& op);

// The extent of every index letter of `einsum` in blocks with boxes `input_boxes` (one per
// input, ranks matching the terms); letters that appear nowhere are 0.
IndexExtents index_extents(const ir::Einsum& einsum, absl::Span<const ir::Box> input_boxes);

// Whether every gemm dimension of `plan` fits BLAS's int arguments for these extents.
bool fits_blas(const ContractionPlan& plan, const IndexExtents& extents);

// Copies a dense row-major block laid out as `src_term` into `dst`, laid out as `dst_term` (the
// same letters in another order). T is float or double.
template <typename T>
void permute(const T* src, const std::string& src_term, const std::string& dst_term,
             const IndexExtents& extents, T* dst);

// Runs `plan` (fits_blas) on dense row-major blocks: `inputs` in the einsum's input order, `out`
// laid out as its output term; every output element is written. Packing buffers come from
// thread-local scratch. T is float (cblas_sgemm) or double (cblas_dgemm).
template <typename T>
void run_contraction(const ContractionPlan& plan, const ir::Einsum& einsum,
                     const IndexExtents& extents, const T* input0, const T* input1, T* out);

} // namespace einsummable::kernels::cpu
