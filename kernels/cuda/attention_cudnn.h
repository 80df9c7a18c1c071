#pragma once

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {

// ir::Attention through cuDNN's fused scaled dot-product attention (the cuDNN frontend's SDPA
// graph): f16 or bf16 blocks, f32 softmax and accumulation, GQA through the kv heads' count,
// causal masks, the operator's scale. The [sequence, heads, dim] blocks are handed to cuDNN as
// [batch 1, heads, sequence, dim] through strides, without copies. Graphs are built, their plans
// chosen, once per process for each physical GPU, dtype, shape, mask and scale, and shared by
// every kernel prepared for that key on any logical device (attention_cudnn_cache.h; why they are
// used with one cuDNN handle per GPU, under a lock: attention_cudnn.cc). enqueue() sets that
// handle's stream to the launch's and executes the plan with scratch as workspace. The prepared
// kernel holds its graph: it must outlive any CUDA graph captured from its launches.
//
// Only blocks of whole sequences over their own keys (Attention::require_whole_sequences): a
// block that starts or ends inside its sequence, or holds only some of its keys, is refused
// before any library call and runs on the flash kernel, which takes the query positions from
// the blocks.
//
// Unimplemented, naming why, when cuDNN does not run the block, so that attention.cc falls
// back to the flash kernel: dtypes other than one of f16/bf16 for all four blocks, a block cut
// inside a sequence or along the keys, a block holding parts of several packed sequences, a
// partial output (log-sum-exp statistics), an empty block, shapes no cuDNN engine takes
// (head dims, strides, GPU), a cuDNN that fails to load, or a build without the cuDNN frontend
// (cmake/cuda.cmake). InvalidArgument naming the operator for blocks that are not a function
// spec of it.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cudnn_attention(const KernelRequest& request);

// Whether this build has the cuDNN path (the frontend's and cuDNN's headers were found).
bool cudnn_attention_built();

// How many graphs this process has built, or tried to build, so far: one per physical GPU,
// dtype, shape, mask and scale, however many kernels share it.
int64_t cudnn_attention_graphs();

} // namespace einsummable::kernels::cuda
