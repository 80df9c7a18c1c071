// The CUDA kernel of write_rows: the state block copied to the output (device to device, none
// when the runtime gives the output the state's buffer), then one scatter (write_rows.cu) of the
// rows whose slot falls in the block, moving their bits in the state's dtype. Checks the blocks
// as kernels/cpu/write_rows_f32.cc does. Slots outside the state, or written twice, are refused
// before a request runs (ir::check_input_values); the device kernel writes nothing for one
// outside the block. Tests: tests/unit/kernels/cuda_rowwise_attention_test.cc (every kind's
// random cases against the CPU kernel, in every dtype).

#include "compiler/ir/ops/write_rows.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/kernel.h"
#include "kernels/cuda/write_rows_launch.h"

namespace einsummable::kernels::cuda {
namespace {

class WriteRowsKernel final : public PreparedKernel {
public:
    WriteRowsKernel(std::string op, std::string description, ir::Interval block_rows, int64_t width,
                    int64_t n, int element_bytes, int slots_bytes)
        : operator_(std::move(op)), description_(std::move(description)), block_rows_(block_rows),
          width_(width), n_(n), element_bytes_(element_bytes), slots_bytes_(slots_bytes) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 3 || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                operator_, ": ", description_, " takes 3 inputs and 1 output, the launch has ",
                launch.inputs.size(), " and ", launch.outputs.size()));
        }
        const auto bytes = static_cast<size_t>(block_rows_.size() * width_ * element_bytes_);
        if (bytes > 0 && launch.outputs[0] != launch.inputs[0]) {
            EINSUMMABLE_RETURN_IF_ERROR(
                cuda_status(cudaMemcpyAsync(launch.outputs[0], launch.inputs[0], bytes,
                                            cudaMemcpyDeviceToDevice, launch.stream),
                            absl::StrCat(operator_, ": ", description_, ": the state's copy")));
        }
        return cuda_status(launch_write_rows_scatter(launch.inputs[1], n_, width_, element_bytes_,
                                                     launch.inputs[2], slots_bytes_,
                                                     block_rows_.lower, block_rows_.upper,
                                                     launch.outputs[0], launch.stream),
                           absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    ir::Interval block_rows_;
    int64_t width_;
    int64_t n_;
    int element_bytes_;
    int slots_bytes_;
};

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_write_rows(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::WriteRows*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    if (request.input_dtypes.size() != 3 || request.output_dtypes.size() != 1) {
        return request_error(*op, "the kernel request gives no input or output dtypes");
    }
    const ir::DType dtype = request.input_dtypes[0];
    if (request.input_dtypes[1] != dtype || request.output_dtypes[0] != dtype ||
        !ir::is_integer(request.input_dtypes[2])) {
        return request_error(*op, "the CUDA write_rows kernel moves rows unconverted: it needs "
                                  "state, rows and output in one dtype and integer slots");
    }
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& state = function.inputs[0];
    const ir::Box& rows = function.inputs[1];
    const ir::Box& out = function.outputs[0];
    if (state != out || rows.rank() != state.rank()) {
        return request_error(*op, absl::StrCat("blocks state ", state.to_string(), ", rows ",
                                               rows.to_string(), " and output ", out.to_string(),
                                               " do not line up"));
    }
    const int64_t width = out[0].size() == 0 ? 0 : out.volume() / out[0].size();
    std::string description =
        absl::StrCat("cuda write_rows ", ir::dtype_name(dtype), ": ", rows[0].size(), " rows of ",
                     width, " elements into state rows ", out[0].to_string());
    return std::make_unique<WriteRowsKernel>(
        op->describe(), std::move(description), out[0], width, rows[0].size(),
        static_cast<int>(ir::dtype_size(dtype)),
        static_cast<int>(ir::dtype_size(request.input_dtypes[2])));
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::WriteRows>(&prepare_write_rows);

} // namespace
} // namespace einsummable::kernels::cuda
