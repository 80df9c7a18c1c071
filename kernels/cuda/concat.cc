// The CUDA kernel of concat: one region copy per input (block_ops.h's enqueue_copy_region),
// each of the input's rows into its part of the output's rows — a single device-to-device
// memcpy where the part is contiguous (concatenating along the first dimension), a strided copy
// otherwise. Any dtype: elements are moved, not converted. Checks the blocks as
// kernels/cpu/concat_f32.cc does. Tests: tests/unit/kernels/cuda_rowwise_attention_test.cc
// (every kind's random cases against the CPU kernel, in every dtype).

#include "compiler/ir/ops/concat.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/block_ops.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {
namespace {

// Every block is [outer, length·inner] around the axis; input `i` fills the columns
// parts[i] of the output's [outer, row] block, which is src_boxes[i] in the output's
// coordinates (the box its dense block covers there).
class ConcatKernel final : public PreparedKernel {
public:
    ConcatKernel(std::string op, std::string description, std::vector<ir::Box> src_boxes,
                 ir::Box dst_box, int64_t element_bytes)
        : operator_(std::move(op)), description_(std::move(description)),
          src_boxes_(std::move(src_boxes)), dst_box_(std::move(dst_box)),
          element_bytes_(element_bytes) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != src_boxes_.size() || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(operator_, ": ", description_, " takes ", src_boxes_.size(),
                             " inputs and 1 output, the launch has ", launch.inputs.size(), " and ",
                             launch.outputs.size()));
        }
        for (size_t input = 0; input < src_boxes_.size(); ++input) {
            const ir::Box& src_box = src_boxes_[input];
            if (absl::Status status =
                    enqueue_copy_region(launch.inputs[input], src_box, launch.outputs[0], dst_box_,
                                        src_box, element_bytes_, launch.stream);
                !status.ok()) {
                return absl::Status(status.code(),
                                    absl::StrCat(operator_, ": ", description_, ": input ", input,
                                                 ": ", status.message()));
            }
        }
        return absl::OkStatus();
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    std::vector<ir::Box> src_boxes_;
    ir::Box dst_box_;
    int64_t element_bytes_;
};

// The one storage dtype of every block: a copy converts at neither end.
absl::StatusOr<ir::DType> single_dtype(const KernelRequest& request) {
    if (request.input_dtypes.empty() || request.output_dtypes.size() != 1) {
        return request_error(*request.op, "the kernel request gives no input or output dtypes");
    }
    const ir::DType dtype = request.output_dtypes[0];
    for (ir::DType other : request.input_dtypes) {
        if (other != dtype) {
            return request_error(
                *request.op,
                absl::StrCat("the CUDA concat kernel needs every block in one dtype; "
                             "an input is ",
                             ir::dtype_name(other), ", the output ", ir::dtype_name(dtype)));
        }
    }
    return dtype;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_concat(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::Concat*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype, single_dtype(request));
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& output = function.outputs[0];
    const int axis = op->axis();
    int64_t outer = 1;
    int64_t inner = 1;
    for (int dim = 0; dim < output.rank(); ++dim) {
        if (dim < axis) {
            outer *= output[dim].size();
        } else if (dim > axis) {
            inner *= output[dim].size();
        }
    }
    std::vector<ir::Box> src_boxes;
    int64_t column = 0; // where the next input's part starts in an output row
    int64_t length = 0; // the input blocks' elements along the axis
    for (const ir::Box& input : function.inputs) {
        for (int dim = 0; dim < output.rank(); ++dim) {
            if (dim != axis && input[dim].size() != output[dim].size()) {
                return request_error(*op, absl::StrCat("input block ", input.to_string(),
                                                       " and output block ", output.to_string(),
                                                       " differ in dimension ", dim));
            }
        }
        const int64_t part = input[axis].size() * inner;
        src_boxes.push_back(ir::Box({{0, outer}, {column, column + part}}));
        column += part;
        length += input[axis].size();
    }
    if (length != output[axis].size()) {
        return request_error(*op, absl::StrCat("the input blocks hold ", length,
                                               " elements along axis ", axis, ", output block ",
                                               output.to_string(), " ", output[axis].size()));
    }
    std::string description =
        absl::StrCat("cuda concat ", ir::dtype_name(dtype), " of ", function.inputs.size(),
                     " inputs: ", outer, " rows of ", column, " elements");
    return std::make_unique<ConcatKernel>(op->describe(), std::move(description),
                                          std::move(src_boxes), ir::Box({{0, outer}, {0, column}}),
                                          ir::dtype_size(dtype));
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::Concat>(&prepare_concat);

} // namespace
} // namespace einsummable::kernels::cuda
