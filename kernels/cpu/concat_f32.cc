// f32 kernel of concat: a copy of each input's rows into its part of the output's, matching
// ir::Concat's reference `compute` (compiler/ir/ops/concat.cc).

#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/concat.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/f32_ops.h"

namespace einsummable::kernels::cpu {

namespace {

// OK iff every input block has the output block's extent in each dimension but the axis and
// the input blocks' axes together are the output block's.
absl::Status check_concat_blocks(const ir::Concat& op, const ir::FunctionSpec& function) {
    const ir::Box& output = function.outputs[0];
    const int axis = op.axis();
    int64_t length = 0;
    for (const ir::Box& input : function.inputs) {
        for (int dim = 0; dim < output.rank(); ++dim) {
            if (dim != axis && input[dim].size() != output[dim].size()) {
                return block_error(op, absl::StrCat("input block ", input.to_string(),
                                                    " and output block ", output.to_string(),
                                                    " differ in dimension ", dim));
            }
        }
        length += input[axis].size();
    }
    if (length != output[axis].size()) {
        return block_error(op, absl::StrCat("the input blocks hold ", length,
                                            " elements along axis ", axis, ", output block ",
                                            output.to_string(), " ", output[axis].size()));
    }
    return absl::OkStatus();
}

// Each block is [outer, length, inner] around the axis: output row o is the inputs' rows o,
// one after another.
absl::Status run_concat_f32(const ir::Concat& op, const ir::FunctionSpec& function,
                            F32Inputs inputs, F32Outputs outputs) {
    EINSUMMABLE_RETURN_IF_ERROR(check_concat_blocks(op, function));
    const ir::Box& box = function.outputs[0];
    const int axis = op.axis();
    int64_t outer = 1;
    int64_t inner = 1;
    for (int dim = 0; dim < box.rank(); ++dim) {
        if (dim < axis) {
            outer *= box[dim].size();
        } else if (dim > axis) {
            inner *= box[dim].size();
        }
    }
    if (box.volume() == 0) {
        return absl::OkStatus();
    }
    const int64_t row = box[axis].size() * inner;
    int64_t offset = 0;
    for (size_t input = 0; input < inputs.size(); ++input) {
        const int64_t part = function.inputs[input][axis].size() * inner;
        if (part > 0) {
            for (int64_t o = 0; o < outer; ++o) {
                std::memcpy(outputs[0] + o * row + offset, inputs[input] + o * part,
                            static_cast<size_t>(part) * sizeof(float));
            }
        }
        offset += part;
    }
    return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::Concat>(&run_concat_f32);

} // namespace
} // namespace einsummable::kernels::cpu
