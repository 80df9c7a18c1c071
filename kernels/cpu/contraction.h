#pragma once

#include <string>

#include "compiler/ir/ops/einsum.h"
#include "kernels/contraction_plan.h"

namespace einsummable::kernels::cpu {

// Einsum contractions through BLAS gemm, shared by run_block (double, cblas_dgemm) and run_f32
// (float, cblas_sgemm). Which einsums are contractions and how they map onto gemm is the
// backend-neutral plan of kernels/contraction_plan.h.

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
