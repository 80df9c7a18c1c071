#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {

// Any ir::Einsum on the GPU by an own strided kernel: element-wise unary and binary joins with
// broadcasting, reductions with sum/max/min over the indices absent from the output, and
// transposes; one thread per output element (consecutive threads write consecutive output
// elements), loading in the storage dtype and computing in f32 (f64 for f64 storage) with the
// scalar math the CPU kernels share (kernels/scalar_math.h). Contractions take cuBLASLt instead
// (einsum.cc); this is their fallback only where cuBLASLt cannot run them.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_generic_einsum(const KernelRequest& request);

} // namespace einsummable::kernels::cuda
