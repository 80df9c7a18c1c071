#pragma once

// The launches behind block_ops.h (block_ops.cc checks the arguments and plans, block_ops.cu
// holds the kernels). C++17 and free of the ir box headers, which nvcc cannot compile as C++20.
// Every pointer is device memory; work is enqueued on `stream` only, and the result is the
// launch's error (cudaGetLastError after it).

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
