// f32 kernels of argmax, matching ir::ArgMax's reference (compiler/ir/ops/argmax.cc): per row of
// the block, the absolute index of the first largest element (NaN largest), written as f32
// (exact below 2^24, the operator's limit on the vocabulary); the partial kernel also writes
// that element as the index's statistic, for the arg_max ⊕ across vocabulary blocks.

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/argmax.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cpu {

namespace {

absl::Status argmax_rows(const ir::ArgMax& op, const ir::FunctionSpec& function, F32Inputs inputs,
                         F32Outputs outputs, F32Outputs stats) {
    const ir::Box& x = function.inputs[0];
    const ir::Box& out = function.outputs[0];
    const int last = x.rank() - 1;
    if (absl::Status status = op.check_blocks_line_up(function); !status.ok()) {
        return block_error(op, status.message());
    }
    const int64_t width = x[last].size();
    const int64_t rows = out.volume();
    const auto first = static_cast<float>(x[last].lower);
    float* const index_stats = stats.empty() ? nullptr : stats[0];
    for (int64_t row = 0; row < rows; ++row) {
        const float* values = inputs[0] + row * width;
        int64_t best = 0;
        for (int64_t idx = 1; idx < width; ++idx) {
            if (scalar_math::arg_max_wins(values[idx], idx, values[best], best)) {
                best = idx;
            }
        }
        outputs[0][row] = first + static_cast<float>(best);
        if (index_stats != nullptr) {
            index_stats[row] = values[best];
        }
    }
    return absl::OkStatus();
}

absl::Status run_argmax_f32(const ir::ArgMax& op, const ir::FunctionSpec& function,
                            F32Inputs inputs, F32Outputs outputs) {
    return argmax_rows(op, function, inputs, outputs, {});
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::ArgMax>(&run_argmax_f32);
[[maybe_unused]] const bool kPartialRegistered =
    register_cpu_partial_kernel<ir::ArgMax>(&argmax_rows);

} // namespace
} // namespace einsummable::kernels::cpu
