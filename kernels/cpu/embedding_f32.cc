// f32 kernel of embedding: a gather of the table block's rows, matching ir::Embedding's
// reference `compute` (compiler/ir/ops/embedding.cc). The ids arrive converted to f32 like every
// operand (exact below 2^24, past any real vocabulary; the request's ids were checked whole
// before it ran, ir::check_input_values); an id outside the table is refused here too, so no
// path reads outside the table.

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/embedding.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/f32_ops.h"

namespace einsummable::kernels::cpu {

namespace {

// out [tokens block, d block] = the rows of table [vocab block, d block] the ids select, zero
// for an id in another block's rows.
absl::Status run_embedding_f32(const ir::Embedding& op, const ir::FunctionSpec& function,
                               F32Inputs inputs, F32Outputs outputs) {
    const ir::Box& table = function.inputs[0];
    const ir::Box& ids = function.inputs[1];
    const ir::Box& out = function.outputs[0];
    if (ids[0] != out[0] || table[1] != out[1]) {
        return block_error(op, absl::StrCat("blocks table ", table.to_string(), ", ids ",
                                            ids.to_string(), " and output ", out.to_string(),
                                            " do not line up"));
    }
    const int64_t width = out[1].size();
    const int64_t tokens = out[0].size();
    if (tokens * width == 0) {
        return absl::OkStatus();
    }
    std::memset(outputs[0], 0, static_cast<size_t>(tokens * width) * sizeof(float));
    for (int64_t t = 0; t < tokens; ++t) {
        const float value = inputs[1][t];
        if (!(value >= 0.0f && value < static_cast<float>(op.vocab()))) {
            const ir::IdOutOfRange bad{
                ids[0].lower + t, std::isfinite(value) ? static_cast<int64_t>(value) : int64_t{-1}};
            return block_error(op, describe_id_out_of_range(bad, op.vocab()));
        }
        const auto id = static_cast<int64_t>(value);
        if (id >= table[0].lower && id < table[0].upper) {
            std::memcpy(outputs[0] + t * width, inputs[0] + (id - table[0].lower) * width,
                        static_cast<size_t>(width) * sizeof(float));
        }
    }
    return absl::OkStatus();
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::Embedding>(&run_embedding_f32);

} // namespace
} // namespace einsummable::kernels::cpu
