#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "kernels/kernel_registry.h"

namespace einsummable::kernels::cpu {

// The CPU runtime's kernels (runtime/cpu): f32 compute on dense row-major blocks. A block's
// shape is its box's shape; absolute positions (RoPE, causal masks, sequence ends) come from
// the boxes in `function`. Nothing here allocates per call in steady state: temporaries live in
// thread-local scratch that only grows.

// One operator kind's f32 kernel, called by run_f32 after its checks, with the blocks in the
// function spec's order.
using CpuKernel = std::function<absl::Status(
    const ir::Operator& op, const ir::FunctionSpec& function, absl::Span<const float* const> inputs,
    absl::Span<float* const> outputs)>;
// The CPU backend's kernels by operator kind; each kernel file registers its own kinds.
KernelRegistry<CpuKernel>& cpu_kernels();
// A kernel that writes one function's partial results: every output as run_f32 does and, for
// each output aggregated with statistics (ir::carries_stats), one f32 statistic per vector
// along its block's last dimension into stats[o] (ir::PartialBlock; null for the other
// outputs). Registered by the kinds that have such an output, beside their kernels
// (register_cpu_partial_kernel, f32_ops.h).
using CpuPartialKernel = std::function<absl::Status(
    const ir::Operator& op, const ir::FunctionSpec& function, absl::Span<const float* const> inputs,
    absl::Span<float* const> outputs, absl::Span<float* const> stats)>;
KernelRegistry<CpuPartialKernel>& cpu_partial_kernels();

// Runs `op` on one function spec. inputs[i] holds function.inputs[i], outputs[j] receives
// function.outputs[j] (every element written). Every operator kind registered in ir has a kernel
// in cpu_kernels():
//   einsum  — contractions (two operands, join mul, agg sum) through gemm_f32 (gemm.h), one call
//             per batch element, packing operands only when they are not already [b, m, k] /
//             [b, k, n] or a transpose of it; other einsums (unary/binary scalar joins with
//             broadcasting, reductions with sum/max/min, transposes) through strided loops;
//   softmax, rmsnorm, layernorm, rope, split_heads, merge_heads (rowwise_f32.cc);
//   attention — flash-style (key tiles, online softmax), GQA, causal, packed sequences;
//   any other kind — its own file, <kind>_f32.cc (docs/operators.md "Adding an operator").
// InvalidArgument naming the operator for a kind without a kernel or a block count mismatch.
absl::Status run_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                     absl::Span<const float* const> inputs, absl::Span<float* const> outputs);

// Batch-invariant kernels (runtime::CompileOptions::batch_invariant, docs/server.md "Dynamic
// batching"): while a BatchInvariantScope that is on lives on a thread, every kernel run on it
// computes each output element the same way whatever block it lies in. Contractions and
// attention's tiles then skip the gemm library, whose kernels may round the last rows and
// columns of a block differently from the others (OpenBLAS: a block of 3 rows gave its third
// row other bits than a block of 4), and add the products of each output element in one fixed
// order (the contracted index ascending), vectorised across the output's columns
// (gemm_invariant.h). Slower than the library; the other kernels already compute a row from
// that row alone. Scopes nest; the previous mode returns at the scope's end.
class BatchInvariantScope {
public:
    explicit BatchInvariantScope(bool on);
    ~BatchInvariantScope();
    BatchInvariantScope(const BatchInvariantScope&) = delete;
    BatchInvariantScope& operator=(const BatchInvariantScope&) = delete;

private:
    bool previous_;
};
// Whether this thread runs batch-invariant kernels now.
bool batch_invariant();

// out[i] = parts[0][i] ⊕ parts[1][i] ⊕ ... for i < n (n >= 1 part; out may alias no part), for
// the element-wise aggregations (max and min NaN when any part is: ir::aggregate).
void aggregate_f32(ir::AggOp op, absl::Span<const float* const> parts, float* out, int64_t n);

// The log-sum-exp ⊕ (ir::combine_log_sum_exp, whose rules for NaN and -inf statistics it keeps)
// of partial results: values[p] holds `vectors` vectors of `width` (row-major), lse[p] their
// statistics. Writes the combined values, and the combined statistics when out_lse is not null
// (a partial result still). Outputs alias no part.
void aggregate_log_sum_exp_f32(absl::Span<const float* const> values,
                               absl::Span<const float* const> lse, float* out_values,
                               float* out_lse, int64_t vectors, int64_t width);

// The arg-max ⊕ (ir::combine_arg_max: the larger statistic, NaN largest, ties to the smaller
// index) of partial results: indices[p] holds `vectors` indices (as f32, exact below 2^24),
// stats[p] the element each names. Writes the winning indices, and their statistics when
// out_stats is not null (a partial result still). Outputs may alias part 0.
void aggregate_arg_max_f32(absl::Span<const float* const> indices,
                           absl::Span<const float* const> stats, float* out_indices,
                           float* out_stats, int64_t vectors);

// The top_k ⊕ (ir::merge_top_k) of partial results: parts[p] holds `rows` rows of k (value,
// index) pairs (indices as f32, exact below 2^24), each best first. Writes per row the k best of
// all parts, best first. `out` aliases no part.
void aggregate_top_k_f32(absl::Span<const float* const> parts, float* out, int64_t rows, int64_t k);

// One function's partial results of an operator with an output that carries statistics,
// through its registered partial kernel (cpu_partial_kernels): attention over its function's
// block of keys — the output normalised over those keys, and lse[row · heads_q + head] for
// every row and query head (-inf where no key of the block has weight, NaN for a NaN row) — or
// argmax over its block of the vocabulary — the index of each row's largest element with that
// element as its statistic, and the element. InvalidArgument for a kind without one or blocks
// that do not match the function.
absl::Status partial_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                         absl::Span<const float* const> inputs, absl::Span<float* const> outputs,
                         absl::Span<float* const> stats);
// The same for an operator with one output.
absl::Status partial_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                         absl::Span<const float* const> inputs, float* output, float* stats);

} // namespace einsummable::kernels::cpu
