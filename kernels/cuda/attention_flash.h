#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/ops/attention.h"
#include "kernels/cuda/attention_flash_launch.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {

// ir::Attention by an own flash-style kernel (key tiles in shared memory, online softmax, f32
// accumulation): GQA, causal masks and packed sequences with positions taken from the blocks, as
// the CPU kernel does, over any block of queries and keys; an output marked for statistics
// (KernelRequest::output_stats) is a partial result with its log-sum-exp. Paged attention
// (ir::Attention::has_pages) reads its keys through the page table. For the cases cuDNN's
// fused SDPA refuses (f32 and f64 storage, head dimensions it does not take, engines missing,
// blocks cut inside a sequence or along the keys); attention.cc tries cuDNN first.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_flash_attention(const KernelRequest& request);

// The kernel's work list for a function spec of `op` (checked by the caller): the query block's
// rows cut into tiles of at most block_m rows that never cross a sequence end, each with the
// rows of the key block it attends to (FlashWorkItem) or, paged, its sequence's places (which of
// them the key block holds is the page table's, read at run time). Touches no GPU.
std::vector<FlashWorkItem> flash_work_items(const ir::Attention& op,
                                            const ir::FunctionSpec& function, int block_m);

} // namespace einsummable::kernels::cuda
