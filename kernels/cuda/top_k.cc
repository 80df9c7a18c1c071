// The CUDA kernel of top_k (top_k.cu): one thread block per row of the block keeps the row's k
// best (value, absolute index) pairs in shared memory, best first by argmax's rule (larger, NaN
// larger than any number, ties to the smaller index), and writes them with the (-inf, vocab)
// padding where the block holds fewer than k columns — the pairs of the CPU kernel
// (kernels/cpu/top_k_f32.cc), which a vocabulary block's partial result feeds to the top_k ⊕
// (`enqueue_aggregate_top_k`, block_ops.h). Checks the blocks as the CPU kernel does
// (ir::TopK::check_blocks_line_up). Tests: tests/unit/kernels/cuda_rowwise_attention_test.cc
// (every kind's random cases against the CPU kernel, in every dtype; skipped without a GPU).

#include "compiler/ir/ops/top_k.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernel.h"
#include "kernels/cuda/top_k_launch.h"

namespace einsummable::kernels::cuda {
namespace {

static_assert(kMaxTopK == ir::TopK::kMaxK);

class TopKKernel final : public PreparedKernel {
public:
    TopKKernel(std::string op, std::string description, ir::DType x_dtype, int64_t rows,
               int64_t width, int64_t first_index, int64_t vocab, int64_t k)
        : operator_(std::move(op)), description_(std::move(description)), x_dtype_(x_dtype),
          rows_(rows), width_(width), first_index_(first_index), vocab_(vocab), k_(k) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 1 || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                operator_, ": ", description_, " takes 1 input and 1 output, the launch has ",
                launch.inputs.size(), " and ", launch.outputs.size()));
        }
        return cuda_status(launch_top_k(x_dtype_, launch.inputs[0], rows_, width_, first_index_,
                                        vocab_, k_, launch.outputs[0], launch.stream),
                           absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    ir::DType x_dtype_;
    int64_t rows_;
    int64_t width_;
    int64_t first_index_;
    int64_t vocab_;
    int64_t k_;
};

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_top_k(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::TopK*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    if (request.input_dtypes.size() != 1 || request.output_dtypes.size() != 1) {
        return request_error(*op, "the kernel request gives no input or output dtypes");
    }
    const ir::DType x_dtype = request.input_dtypes[0];
    const ir::DType out_dtype = request.output_dtypes[0];
    // The operator's pairs: f32, f64 for f64 x (ir::TopK::make).
    const ir::DType want = x_dtype == ir::DType::f64 ? ir::DType::f64 : ir::DType::f32;
    if (ir::is_integer(x_dtype) || out_dtype != want) {
        return request_error(
            *op, absl::StrCat("the CUDA top_k kernel reads floating-point x and writes its "
                              "(value, index) pairs in f32 (f64 for f64 x); got x ",
                              ir::dtype_name(x_dtype), ", pairs ", ir::dtype_name(out_dtype)));
    }
    const ir::FunctionSpec& function = *request.function;
    if (absl::Status status = op->check_blocks_line_up(function); !status.ok()) {
        return request_error(*op, status.message());
    }
    const ir::Box& x = function.inputs[0];
    const ir::Box& out = function.outputs[0];
    const int last = x.rank() - 1;
    const int64_t k = op->k();
    const int64_t rows = out.volume() / (2 * k);
    std::string description = absl::StrCat(
        "cuda top_k ", ir::dtype_name(x_dtype), " -> ", ir::dtype_name(out_dtype), ": ", rows,
        " rows of ", x[last].size(), " from column ", x[last].lower, ", k = ", k);
    return std::make_unique<TopKKernel>(op->describe(), std::move(description), x_dtype, rows,
                                        x[last].size(), x[last].lower, op->vocab(), k);
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::TopK>(&prepare_top_k);

} // namespace
} // namespace einsummable::kernels::cuda
