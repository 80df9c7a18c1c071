// f32 kernel of write_rows: the state block copied, then each row whose slot falls in the
// block's rows written over its slot, matching ir::WriteRows' reference `compute`
// (compiler/ir/ops/write_rows.cc). The slots arrive converted to f32 like every operand (exact
// below 2^24); the request's slots were checked whole before it ran (ir::check_input_values),
// and a slot outside the state is refused here too, so no path writes outside the block.

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/write_rows.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/cpu/kernels.h"

namespace einsummable::kernels::cpu {

namespace {

absl::Status run_write_rows_f32(const ir::WriteRows& op, const ir::FunctionSpec& function,
                                F32Inputs inputs, F32Outputs outputs) {
    const ir::Box& state = function.inputs[0];
    const ir::Box& rows = function.inputs[1];
    const ir::Box& out = function.outputs[0];
    if (state != out || rows.rank() != state.rank()) {
        return block_error(op, absl::StrCat("blocks state ", state.to_string(), ", rows ",
                                            rows.to_string(), " and output ", out.to_string(),
                                            " do not line up"));
    }
    const int64_t volume = out.volume();
    if (volume == 0) {
        return absl::OkStatus();
    }
    const int64_t block_rows = out[0].size();
    const int64_t width = volume / block_rows;
    if (outputs[0] != inputs[0]) {
        std::memcpy(outputs[0], inputs[0], static_cast<size_t>(volume) * sizeof(float));
    }
    const int64_t n = rows[0].size();
    for (int64_t i = 0; i < n; ++i) {
        const float slot = inputs[2][i];
        if (slot == static_cast<float>(ir::WriteRows::kNotWritten)) {
            continue;
        }
        if (!(slot >= 0.0f && slot < static_cast<float>(op.state_rows()))) {
            return block_error(op,
                               absl::StrCat("slots[", i, "] = ", slot, " is outside the state's ",
                                            op.state_rows(), " rows"));
        }
        const auto row = static_cast<int64_t>(slot);
        if (row >= out[0].lower && row < out[0].upper) {
            std::memcpy(outputs[0] + (row - out[0].lower) * width, inputs[1] + i * width,
                        static_cast<size_t>(width) * sizeof(float));
        }
    }
    return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::WriteRows>(&run_write_rows_f32);

} // namespace
} // namespace einsummable::kernels::cpu
