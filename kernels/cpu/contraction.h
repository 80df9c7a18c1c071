#pragma once

#include <string>

#include "absl/status/status.h"
#include "compiler/ir/ops/einsum.h"
#include "kernels/contraction_plan.h"

namespace einsummable::kernels::cpu {

// Einsum contractions as gemms, shared by run_block (double: gemm_invariant's fixed order) and
// run_f32 (float: the tuned library of gemm.h, or gemm_invariant in batch-invariant mode). Which
// einsums are contractions and how they map onto gemm is the backend-neutral plan of
// kernels/contraction_plan.h.

// Whether every gemm dimension of `plan` fits the gemms' int arguments for these extents.
bool fits_gemm(const ContractionPlan& plan, const IndexExtents& extents);

// Copies a dense row-major block laid out as `src_term` into `dst`, laid out as `dst_term` (the
// same letters in another order). T is float or double.
template <typename T>
void permute(const T* src, const std::string& src_term, const std::string& dst_term,
             const IndexExtents& extents, T* dst);

// Runs `plan` (fits_gemm) on dense row-major blocks: `inputs` in the einsum's input order, `out`
// laid out as its output term; every output element is written. Packing buffers come from
// thread-local scratch. T is float or double. Internal when the gemm library refuses a call.
template <typename T>
absl::Status run_contraction(const ContractionPlan& plan, const ir::Einsum& einsum,
                             const IndexExtents& extents, const T* input0, const T* input1, T* out);

} // namespace einsummable::kernels::cpu
