#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/contraction_plan.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {

// An einsum contraction (kernels/contraction_plan.h) as one strided-batched cuBLASLt matmul.
// Row-major blocks are handed to the column-major library as their transposes
// (Cᵀ = Bᵀ·Aᵀ), so no operand that the plan uses as stored or transposed is copied; operands
// the plan packs, and an output whose term is not batch+m+n, go through scratch with
// enqueue_permute (kernels/cuda/block_ops.h). f16, bf16 and f32 compute in f32 without TF32
// (CUBLAS_COMPUTE_32F, so results stay close to the CPU kernels), f64 in f64.
//
// The algorithm is chosen here by cuBLASLt's heuristic with a 32 MiB workspace limit, twice:
// once for 256-byte aligned blocks and once for blocks aligned only to their element size, and
// enqueue() takes the one the launch's pointers allow.
//
// Unimplemented (so that einsum.cc falls back to the generic kernel) when cuBLASLt cannot run
// the block: storage dtypes that differ, a batch beyond int32, a packing of more dimensions than
// enqueue_permute takes, or no algorithm from the heuristic. InvalidArgument naming the
// operator for blocks that are not a function spec of it; the failing call's status otherwise.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cublaslt_contraction(const KernelRequest& request, const ContractionPlan& plan);

} // namespace einsummable::kernels::cuda
