#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"

namespace einsummable::kernels::cuda {

// The work between operators that the CUDA runtime captures into a plan's graph beside the
// operators' kernels (runtime/cuda): aggregating copies of a block, region copies that memcpy
// nodes cannot express, and layout permutations for library calls. Each enqueues on `stream`
// only (capturable), takes device pointers on the stream's device, and checks its arguments
// before launching: InvalidArgument naming the argument, or the CUDA error of the launch.

// out[i] = parts[0][i] ⊕ parts[1][i] ⊕ ... for i < n, every block dense in `dtype`, computed
// in f32 (f64 in f64) like the CPU backend's aggregate_f32. AggOp::none copies parts[0]. Any
// number of parts: up to kMaxAggregatePartsPerLaunch in one launch, more by folding the next
// parts into `out` launch after launch (f16/bf16 then round to their dtype between launches;
// f32 and f64 stay bit for bit the CPU's). out may not alias a part. The block aggregations
// carry statistics or combine whole rows and have functions of their own (below): log_sum_exp,
// arg_max and top_k are InvalidArgument here.
inline constexpr int kMaxAggregatePartsPerLaunch = 256;
absl::Status enqueue_aggregate(ir::AggOp op, ir::DType dtype, absl::Span<const void* const> parts,
                               void* out, int64_t n, cudaStream_t stream);

// Partial results of attention split along its keys (ir::AggOp::log_sum_exp, docs/physical.md
// "Partial results"): out = parts[0] ⊕ parts[1] ⊕ ..., each part `vectors` rows of `width`
// values in `dtype` with its f32 log-sum-exp statistics (one per row) in part_stats; out_stats
// (null when the output carries none) gets the combined statistics. Computed as the CPU
// backend's aggregate_log_sum_exp_f32. Up to kMaxLogSumExpParts parts in one launch; more are
// folded into out launch after launch, which needs out_stats: without it, more parts are
// InvalidArgument. out may not alias a part.
absl::Status enqueue_aggregate_log_sum_exp(ir::DType dtype, absl::Span<const void* const> parts,
                                           absl::Span<const float* const> part_stats, void* out,
                                           float* out_stats, int64_t vectors, int64_t width,
                                           cudaStream_t stream);

// Partial results of argmax split along its vocabulary (ir::AggOp::arg_max): per vector
// v < vectors, out[v] = the int64 index of the part whose f32 statistic is largest (NaN largest,
// ties to the smaller index: ir::combine_arg_max), out_stats[v] (null when the output carries
// none) its statistic. Any number of parts: more than one launch takes are folded into out,
// which then needs out_stats. out may not alias a part.
absl::Status enqueue_aggregate_arg_max(absl::Span<const void* const> parts,
                                       absl::Span<const float* const> part_stats, void* out,
                                       float* out_stats, int64_t vectors, cudaStream_t stream);

// Partial results of top_k split along its vocabulary (ir::AggOp::top_k): every part `rows`
// rows of k (value, index) pairs in `dtype` (f32, or f64 for f64 logits: top_k's output; another
// dtype is refused), each row best first; out gets per row the k best pairs of all the parts, best
// first — ir::merge_top_k folded over the parts, as the CPU backend's aggregate_top_k_f32 (compared
// in f32, f64 in f64; of two equal pairs the earlier part's first). The block's elements are rows ·
// 2k: k is the size of its second-to-last dimension. Any number of parts: up to kMaxTopKParts
// (top_k_launch.h) in one launch, more folded into out launch after launch. 1 <= k <= kMaxTopK. out
// may be parts[0] itself (merged in place) but may overlap no other part, nor parts[0] other than
// exactly; the CUDA runtime passes an output of its own.
absl::Status enqueue_aggregate_top_k(ir::DType dtype, absl::Span<const void* const> parts,
                                     void* out, int64_t rows, int64_t k, cudaStream_t stream);

// Copies the elements of `region` from the dense block `src` (covering src_box) into the dense
// block `dst` (covering dst_box), as ir::copy_region does on the host; region lies inside both
// boxes. Any rank up to kMaxCopyRank.
inline constexpr int kMaxCopyRank = 8;
absl::Status enqueue_copy_region(const void* src, const ir::Box& src_box, void* dst,
                                 const ir::Box& dst_box, const ir::Box& region,
                                 int64_t element_bytes, cudaStream_t stream);

// dst = src with its dimensions reordered: dst dimension j is src dimension perm[j], for a
// dense row-major src of extents `src_dims` (rank up to kMaxCopyRank). Elements of
// `element_bytes` (2, 4 or 8) are moved, not converted.
absl::Status enqueue_permute(const void* src, absl::Span<const int64_t> src_dims,
                             absl::Span<const int> perm, int64_t element_bytes, void* dst,
                             cudaStream_t stream);

} // namespace einsummable::kernels::cuda
