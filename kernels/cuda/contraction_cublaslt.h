#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
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
// The algorithm is chosen here by cuBLASLt's heuristic with a 32 MiB workspace limit, once per
// alignment tier (kCublasLtAlignmentTiers, then the element size), and enqueue() takes the one
// the launch's pointers allow (cublaslt_alignment).
//
// Unimplemented (so that einsum.cc falls back to the generic kernel) when cuBLASLt cannot run
// the block: storage dtypes that differ, a batch beyond int32, a packing of more dimensions than
// enqueue_permute takes, or no algorithm from the heuristic. InvalidArgument naming the
// operator for blocks that are not a function spec of it; the failing call's status otherwise.
// The pointer alignments, strictest first, that a contraction's algorithms are chosen for
// besides the element size (CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES; an algorithm
// chosen for an alignment runs on any pointers that meet it):
//   256 B: what the heuristic assumes unless told otherwise, and what cudaMalloc gives;
//   16 B: the 128-bit vector loads cuBLASLt's fast kernels need. Every buffer of a plan sits on
//         a 64-byte boundary (compiler/physical/lower.cc, resident_layout.cc) and scratch on
//         256, so a block's operands meet it unless an offset into a buffer breaks it.
// Without the 16 B tier, every operand that is not 256-byte aligned — most of a plan's — fell to
// the algorithm for element-aligned pointers (scalar loads).
inline constexpr uint32_t kCublasLtAlignmentTiers[] = {256, 16};

// The alignment the algorithm for pointers at `addresses` is chosen for: the first of
// kCublasLtAlignmentTiers that every address is a multiple of, else `element_bytes`. Pure (no
// GPU), for enqueue and its test.
uint32_t cublaslt_alignment(absl::Span<const uintptr_t> addresses, uint32_t element_bytes);

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cublaslt_contraction(const KernelRequest& request, const ContractionPlan& plan);

} // namespace einsummable::kernels::cuda
