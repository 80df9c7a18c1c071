// The CUDA kernel of "attention": cuDNN's fused SDPA where it runs the block
// (attention_cudnn.h), the own flash kernel otherwise (attention_flash.h: f32 and f64, packed
// sequences, shapes cuDNN refuses).

#include "compiler/ir/ops/attention.h"

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {
namespace {

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_attention(const KernelRequest& request) {
    absl::StatusOr<std::unique_ptr<PreparedKernel>> cudnn = prepare_cudnn_attention(request);
    // Unimplemented: cuDNN does not run this block, the flash kernel does.
    if (!absl::IsUnimplemented(cudnn.status())) {
        return cudnn;
    }
    absl::StatusOr<std::unique_ptr<PreparedKernel>> flash = prepare_flash_attention(request);
    if (!flash.ok()) {
        // Both reasons: the flash kernel's failure, and why cuDNN was not used.
        return absl::Status(flash.status().code(),
                            absl::StrCat(flash.status().message(),
                                         " (cuDNN was not used: ", cudnn.status().message(), ")"));
    }
    return flash;
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::Attention>(&prepare_attention);

} // namespace
} // namespace einsummable::kernels::cuda
