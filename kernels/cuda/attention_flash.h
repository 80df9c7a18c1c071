#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {

// ir::Attention by an own flash-style kernel (key tiles in shared memory, online softmax, f32
// accumulation): GQA, causal masks and packed sequences with positions taken from the blocks, as
// the CPU kernel does. For the cases cuDNN's fused SDPA refuses (f32 and f64 storage, head
// dimensions it does not take, engines missing); attention.cc tries cuDNN first.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_flash_attention(const KernelRequest& request);

} // namespace einsummable::kernels::cuda
