// The CUDA kernel of argmax (argmax.cu): one warp per row of the block finds the first largest
// element (NaN largest) and writes its absolute index as int64 — and, for a partial result over
// a block of the vocabulary (KernelRequest::output_stats), that element as the index's f32
// statistic for the arg_max ⊕. Checks the blocks as kernels/cpu/argmax_f32.cc does. Tests:
// tests/unit/kernels/cuda_rowwise_attention_test.cc (every kind's random cases against the CPU
// kernel, in every dtype; skipped without a GPU).

#include "compiler/ir/ops/argmax.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "kernels/cuda/argmax_launch.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {
namespace {

class ArgMaxKernel final : public PreparedKernel {
public:
    ArgMaxKernel(std::string op, std::string description, ir::DType dtype, int64_t rows,
                 int64_t width, int64_t first_index, bool stats)
        : operator_(std::move(op)), description_(std::move(description)), dtype_(dtype),
          rows_(rows), width_(width), first_index_(first_index), stats_(stats) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 1 || launch.outputs.size() != 1 ||
            (stats_ && (launch.output_stats.empty() || launch.output_stats[0] == nullptr))) {
            return absl::InvalidArgumentError(
                absl::StrCat(operator_, ": ", description_, " takes 1 input and 1 output",
                             stats_ ? " with statistics" : "", ", the launch has ",
                             launch.inputs.size(), " and ", launch.outputs.size()));
        }
        return cuda_status(
            launch_argmax(dtype_, launch.inputs[0], rows_, width_, first_index_,
                          static_cast<int64_t*>(launch.outputs[0]),
                          stats_ ? static_cast<float*>(launch.output_stats[0]) : nullptr,
                          launch.stream),
            absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    ir::DType dtype_;
    int64_t rows_;
    int64_t width_;
    int64_t first_index_;
    bool stats_;
};

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_argmax(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::ArgMax*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    if (request.input_dtypes.size() != 1 || request.output_dtypes.size() != 1) {
        return request_error(*op, "the kernel request gives no input or output dtypes");
    }
    const ir::DType dtype = request.input_dtypes[0];
    if (ir::is_integer(dtype) || request.output_dtypes[0] != ir::DType::i64) {
        return request_error(
            *op, absl::StrCat("the CUDA argmax kernel reads floating-point x and writes i64 "
                              "indices; got x ",
                              ir::dtype_name(dtype), ", indices ",
                              ir::dtype_name(request.output_dtypes[0])));
    }
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& x = function.inputs[0];
    const ir::Box& out = function.outputs[0];
    const int last = x.rank() - 1;
    if (absl::Status status = op->check_blocks_line_up(function); !status.ok()) {
        return request_error(*op, status.message());
    }
    const bool stats = request.stats_for(0);
    std::string description =
        absl::StrCat("cuda argmax ", ir::dtype_name(dtype), ": ", out.volume(), " rows of ",
                     x[last].size(), " from column ", x[last].lower, stats ? " (partial)" : "");
    return std::make_unique<ArgMaxKernel>(op->describe(), std::move(description), dtype,
                                          out.volume(), x[last].size(), x[last].lower, stats);
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::ArgMax>(&prepare_argmax);

} // namespace
} // namespace einsummable::kernels::cuda
