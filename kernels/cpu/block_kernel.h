#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"

namespace einsummable::kernels::cpu {

// An ir::BlockKernel (compiler/ir/spec_execution.h): runs `op` on the input blocks of one
// function spec and returns one block per output, with boxes function.outputs.
//
// Contractions — an ir::Einsum with two inputs, join mul and agg sum whose every index is
// either in both inputs or in the output — run as gemms in one fixed order (gemm_invariant.h),
// the same on every CPU: the indices are classified
// into batch (both inputs and the output), m (lhs and output), n (rhs and output) and k (both
// inputs, not the output); the operands are packed to [batch, m, k] and [batch, k, n] unless
// they are already in that layout or its transpose, one gemm runs per batch element, and the
// result is permuted into the output's index order. Everything else runs op.reference.
//
// Blocks are checked as op.reference checks them; a mismatch gets op.reference's
// InvalidArgument error.
absl::StatusOr<std::vector<ir::HostTensor>> run_block(const ir::Operator& op,
                                                      absl::Span<const ir::HostTensor> inputs,
                                                      const ir::FunctionSpec& function);

// Whether run_block (and run_f32) take the gemm path for `op` (decided from the operator's kind
// and attributes alone; every block of the operator takes the same path).
bool uses_gemm(const ir::Operator& op);

} // namespace einsummable::kernels::cpu
