#pragma once

// The launches behind block_ops.h (block_ops.cc checks the arguments and plans, block_ops.cu
// holds the kernels). C++17 and free of the ir box headers, which nvcc cannot compile as C++20.
// Every pointer is device memory; work is enqueued on `stream` only, and the result is the
// launch's error (cudaGetLastError after it).

#include <cmath>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::ir {
class Box; // box.h, which nvcc cannot compile
} // namespace einsummable::ir

namespace einsummable::kernels::cuda {

// ir::AggOp's ⊕ without ir::AggOp (join_agg_spec.h is C++20); none is a copy of part 0.
enum class AggregateKind { none, sum, max, min };

// Parts one aggregate launch takes: their pointers travel in the kernel's parameters (2 KB of
// the 4 KB CUDA allows), so no device table is needed.
inline constexpr int kMaxLaunchParts = 256;
inline constexpr int kMaxStridedRank = 8;

// out[i] = parts[0][i] ⊕ ... ⊕ parts[num_parts - 1][i] for i < n, computed in f32 (f64 for
// f64 storage) in part order. 1 <= num_parts <= kMaxLaunchParts, n > 0.
cudaError_t launch_aggregate(AggregateKind kind, ir::DType dtype, const void* const* parts,
                             int num_parts, void* out, int64_t n, cudaStream_t stream);

// Partial results of attention split along its keys (ir::AggOp::log_sum_exp): each part is
// `vectors` rows of `width` values in `dtype` with one f32 log-sum-exp per row, and
// out = parts[0] ⊕ ... as ir::combine_log_sum_exp defines it (out_lse, when not null, gets the
// combined statistics). Values are weighted in the compute type, weights computed in f64, as
// kernels/cpu's aggregate_log_sum_exp_f32 does. One warp per row; `out` (and `out_lse`) may be
// parts[0] (and lse[0]): every row reads its part statistics before any lane writes. The
// pointers travel in the kernel's parameters, values and statistics, so a launch takes half as
// many parts as launch_aggregate. 1 <= num_parts <= kMaxLogSumExpParts; vectors, width >= 0.
inline constexpr int kMaxLogSumExpParts = kMaxLaunchParts / 2;
cudaError_t launch_aggregate_log_sum_exp(ir::DType dtype, const void* const* parts,
                                         const float* const* lse, int num_parts, void* out,
                                         float* out_lse, int64_t vectors, int64_t width,
                                         cudaStream_t stream);

// The combine's per-row arithmetic, shared by the kernel and by emulate_aggregate_log_sum_exp,
// with ir::combine_log_sum_exp's rules for non-finite statistics (docs/operators.md "Non-finite
// inputs"): the combined log-sum-exp of row `row` over the parts' statistics — NaN when any is
// NaN, whatever the order of the parts; -inf when no part has a key of weight — and a part's
// weight in it. Where the combined statistic is -inf every part weighs 1, so the values add:
// 0 (no key) or NaN (only -inf scores) stay as they are. A part of weight 0 adds nothing, not
// 0·value (its values may be NaN from keys that had no weight themselves).
__host__ __device__ inline double combined_log_sum_exp(const float* const* lse, int num_parts,
                                                       int64_t row) {
    double high = -HUGE_VAL;
    for (int part = 0; part < num_parts; ++part) {
        const double value = lse[part][row];
        high = (high >= value || high != high) ? high : value; // scalar_math::max
    }
    if (high == -HUGE_VAL) {
        return high;
    }
    double total = 0.0;
    for (int part = 0; part < num_parts; ++part) {
        total += exp(static_cast<double>(lse[part][row]) - high);
    }
    return high + log(total);
}
__host__ __device__ inline float log_sum_exp_weight(float part_lse, double combined) {
    return combined == -HUGE_VAL
               ? 1.0f
               : static_cast<float>(exp(static_cast<double>(part_lse) - combined));
}
template <typename C>
__host__ __device__ inline C log_sum_exp_term(float weight, C value) {
    return weight != 0.0f ? static_cast<C>(weight) * value : C(0);
}

// launch_aggregate_log_sum_exp's arithmetic on the host over host memory, f32 values: lets
// tests hold the device combine to the CPU backend's without a GPU.
void emulate_aggregate_log_sum_exp(const float* const* parts, const float* const* lse,
                                   int num_parts, float* out, float* out_lse, int64_t vectors,
                                   int64_t width);

// dst[dst_offset + Σ i_d·dst_stride[d]] = src[src_offset + Σ i_d·src_stride[d]] for every
// i < extent (strides and offsets in elements; dimension rank-1 innermost). Elements of
// element_bytes are moved as raw bytes.
struct StridedCopy {
    int rank = 0;
    int64_t element_bytes = 0;
    int64_t extent[kMaxStridedRank] = {};
    int64_t src_stride[kMaxStridedRank] = {};
    int64_t dst_stride[kMaxStridedRank] = {};
    int64_t src_offset = 0;
    int64_t dst_offset = 0;
};
cudaError_t launch_strided_copy(const StridedCopy& copy, const void* src, void* dst,
                                cudaStream_t stream);

// The copies block_ops.cc launches, in steps the tests can check on the host (block_ops.cc):
// a region of a block into another, and a permutation of a dense block (in dst order), with one
// dimension per box or src dimension; then with extent-1 dimensions dropped, contiguous
// neighbours merged and contiguous runs moved in units of up to 16 bytes where `src` and `dst`
// are aligned for it. Arguments are checked by the callers (block_ops.h).
StridedCopy region_copy(const ir::Box& src_box, const ir::Box& dst_box, const ir::Box& region,
                        int64_t element_bytes);
StridedCopy permute_copy(const int64_t* src_dims, const int* perm, int rank, int64_t element_bytes);
StridedCopy collapse_and_widen(StridedCopy copy, const void* src, const void* dst);

// launch_strided_copy's own per-element code run on the host over host memory, one element
// after another: lets tests check the copy plans and the kernel's indexing without a GPU.
void emulate_strided_copy(const StridedCopy& copy, const void* src, void* dst);

} // namespace einsummable::kernels::cuda
