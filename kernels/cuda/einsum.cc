// The CUDA kernel of "einsum": contractions through cuBLASLt (contraction_cublaslt.h), every
// other einsum — and a contraction cuBLASLt refuses — through the generic strided kernel
// (einsum_generic.h). The choice is the contraction plan's, as on the CPU
// (kernels/cpu/einsum_f32.cc).

#include "compiler/ir/ops/einsum.h"

#include <memory>
#include <optional>

#include "absl/status/status.h"
#include "kernels/contraction_plan.h"
#include "kernels/cuda/contraction_cublaslt.h"
#include "kernels/cuda/einsum_generic.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {
namespace {

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_einsum(const KernelRequest& request) {
    if (std::optional<ContractionPlan> plan = plan_contraction(*request.op)) {
        absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
            prepare_cublaslt_contraction(request, *plan);
        // Unimplemented: cuBLASLt cannot run this block, the generic kernel can.
        if (!absl::IsUnimplemented(kernel.status())) {
            return kernel;
        }
    }
    return prepare_generic_einsum(request);
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::Einsum>(&prepare_einsum);

} // namespace
} // namespace einsummable::kernels::cuda
