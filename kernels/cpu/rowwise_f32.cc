// f32 kernels of the operators that work along one axis of a block: softmax, rmsnorm,
// layernorm, rope, and the head layouts (split_heads, merge_heads). Each matches its operator's
// reference `compute` in compiler/ir/ops/; sums accumulate in double.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/layernorm.h"
#include "compiler/ir/ops/merge_heads.h"
#include "compiler/ir/ops/rmsnorm.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/sequence_ends.h"
#include "compiler/ir/ops/softmax.h"
#include "compiler/ir/ops/split_heads.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vector_math.h"

namespace einsummable::kernels::cpu {

namespace {

absl::Status shape_mismatch(const ir::Operator& op, const ir::Box& input, const ir::Box& output) {
    return block_error(op,
                       absl::StrCat("output block ", output.to_string(),
                                    " does not have the shape of input block ", input.to_string()));
}

// Elements before, along and after `axis` of a block.
struct AxisSplit {
    int64_t outer = 1;
    int64_t length = 1;
    int64_t inner = 1;
};

AxisSplit split_at(const ir::Box& box, int axis) {
    AxisSplit split;
    for (int dim = 0; dim < box.rank(); ++dim) {
        const int64_t size = box[dim].size();
        if (dim < axis) {
            split.outer *= size;
        } else if (dim == axis) {
            split.length = size;
        } else {
            split.inner *= size;
        }
    }
    return split;
}

// Softmax of one contiguous row.
void softmax_row(const float* x, float* y, int64_t length) {
    const float max = max_of(x, length);
    for (int64_t idx = 0; idx < length; ++idx) {
        y[idx] = fast_exp(x[idx] - max);
    }
    const auto inverse = static_cast<float>(1.0 / sum_of(y, length));
    for (int64_t idx = 0; idx < length; ++idx) {
        y[idx] *= inverse;
    }
}

// Softmax along the middle axis of x [length, inner] (inner > 1): the statistics of all
// `inner` columns advance together, so every pass reads contiguous rows.
void softmax_columns(const float* x, float* y, int64_t length, int64_t inner) {
    float* max = scratch<float>(ScratchSlot::row_stats_a, inner);
    float* sum = scratch<float>(ScratchSlot::row_stats_b, inner);
    std::fill(max, max + inner, -std::numeric_limits<float>::infinity());
    std::fill(sum, sum + inner, 0.0f);
    for (int64_t idx = 0; idx < length; ++idx) {
        const float* row = x + idx * inner;
        for (int64_t col = 0; col < inner; ++col) {
            max[col] = std::max(max[col], row[col]);
        }
    }
    for (int64_t idx = 0; idx < length; ++idx) {
        const float* row = x + idx * inner;
        float* out = y + idx * inner;
        for (int64_t col = 0; col < inner; ++col) {
            out[col] = fast_exp(row[col] - max[col]);
        }
        for (int64_t col = 0; col < inner; ++col) {
            sum[col] += out[col];
        }
    }
    for (int64_t col = 0; col < inner; ++col) {
        sum[col] = 1.0f / sum[col];
    }
    for (int64_t idx = 0; idx < length; ++idx) {
        float* out = y + idx * inner;
        for (int64_t col = 0; col < inner; ++col) {
            out[col] *= sum[col];
        }
    }
}

// Checks x's block against the output block and the parameter vectors of a norm, and returns
// the normalised length through `length`.
absl::Status check_norm_blocks(const ir::Operator& op, const ir::FunctionSpec& function,
                               int64_t* length) {
    const ir::Box& x = function.inputs[0];
    if (x.shape() != function.outputs[0].shape()) {
        return shape_mismatch(op, x, function.outputs[0]);
    }
    *length = x[x.rank() - 1].size();
    for (size_t param = 1; param < function.inputs.size(); ++param) {
        if (function.inputs[param][0].size() != *length) {
            return block_error(op, absl::StrCat("parameter block ", param, " ",
                                                function.inputs[param].to_string(),
                                                " does not match the normalised length ", *length,
                                                " of x's block ", x.to_string()));
        }
    }
    return absl::OkStatus();
}

absl::Status run_softmax_f32(const ir::Softmax& op, const ir::FunctionSpec& function,
                             F32Inputs inputs, F32Outputs outputs) {
    const float* input = inputs[0];
    float* output = outputs[0];
    const ir::Box& box = function.inputs[0];
    if (box.shape() != function.outputs[0].shape()) {
        return shape_mismatch(op, box, function.outputs[0]);
    }
    if (box.volume() == 0) {
        return absl::OkStatus();
    }
    const AxisSplit split = split_at(box, op.axis());
    const int64_t slab = split.length * split.inner;
    for (int64_t o = 0; o < split.outer; ++o) {
        if (split.inner == 1) {
            softmax_row(input + o * slab, output + o * slab, split.length);
        } else {
            softmax_columns(input + o * slab, output + o * slab, split.length, split.inner);
        }
    }
    return absl::OkStatus();
}

absl::Status run_rmsnorm_f32(const ir::RmsNorm& op, const ir::FunctionSpec& function,
                             F32Inputs inputs, F32Outputs outputs) {
    float* output = outputs[0];
    int64_t length = 0;
    EINSUMMABLE_RETURN_IF_ERROR(check_norm_blocks(op, function, &length));
    const int64_t volume = function.inputs[0].volume();
    if (volume == 0) {
        return absl::OkStatus();
    }
    const float* weight = inputs[1];
    const double eps = op.eps();
    for (int64_t offset = 0; offset < volume; offset += length) {
        const float* x = inputs[0] + offset;
        float* y = output + offset;
        const double sum_squares = sum_of(x, length, [](double value) { return value * value; });
        const auto inv_rms =
            static_cast<float>(1.0 / std::sqrt(sum_squares / static_cast<double>(length) + eps));
        for (int64_t idx = 0; idx < length; ++idx) {
            y[idx] = x[idx] * inv_rms * weight[idx];
        }
    }
    return absl::OkStatus();
}

absl::Status run_layernorm_f32(const ir::LayerNorm& op, const ir::FunctionSpec& function,
                               F32Inputs inputs, F32Outputs outputs) {
    float* output = outputs[0];
    int64_t length = 0;
    EINSUMMABLE_RETURN_IF_ERROR(check_norm_blocks(op, function, &length));
    const int64_t volume = function.inputs[0].volume();
    if (volume == 0) {
        return absl::OkStatus();
    }
    const float* gamma = inputs[1];
    const float* beta = inputs.size() > 2 ? inputs[2] : nullptr;
    const double eps = op.eps();
    for (int64_t offset = 0; offset < volume; offset += length) {
        const float* x = inputs[0] + offset;
        float* y = output + offset;
        const double mean = sum_of(x, length) / static_cast<double>(length);
        const double variance =
            sum_of(x, length, [mean](double value) { return (value - mean) * (value - mean); }) /
            static_cast<double>(length);
        const auto inv_std = static_cast<float>(1.0 / std::sqrt(variance + eps));
        const auto mean_f = static_cast<float>(mean);
        if (beta != nullptr) {
            for (int64_t idx = 0; idx < length; ++idx) {
                y[idx] = (x[idx] - mean_f) * inv_std * gamma[idx] + beta[idx];
            }
        } else {
            for (int64_t idx = 0; idx < length; ++idx) {
                y[idx] = (x[idx] - mean_f) * inv_std * gamma[idx];
            }
        }
    }
    return absl::OkStatus();
}

absl::Status run_rope_f32(const ir::Rope& op, const ir::FunctionSpec& function, F32Inputs inputs,
                          F32Outputs outputs) {
    const float* input = inputs[0];
    float* output = outputs[0];
    const ir::Box& block = function.inputs[0];
    if (block.shape() != function.outputs[0].shape()) {
        return shape_mismatch(op, block, function.outputs[0]);
    }
    const int64_t head_dim = block[block.rank() - 1].size();
    if (head_dim % 2 != 0) {
        return block_error(op, absl::StrCat("block ", block.to_string(),
                                            " splits the head dimension into an odd part"));
    }
    // Positions from the positions input (input 1), or from the sequence ends.
    const auto& values = op.attributes().values();
    auto ends_it = values.find("sequence_ends");
    const auto* ends =
        ends_it == values.end() ? nullptr : std::get_if<std::vector<int64_t>>(&ends_it->second);
    const float* positions = op.has_positions() ? inputs[1] : nullptr;
    if (positions == nullptr && (ends == nullptr || ends->empty())) {
        return block_error(op, "has no sequence_ends attribute");
    }
    if (block.volume() == 0) {
        return absl::OkStatus();
    }
    const std::vector<double>& frequencies = op.frequencies();
    if (static_cast<int64_t>(frequencies.size()) * 2 != head_dim) {
        return block_error(op, absl::StrCat("block ", block.to_string(), " has ", head_dim,
                                            " of d_head's ", 2 * frequencies.size(),
                                            " elements; d_head is never split"));
    }
    const int64_t half = head_dim / 2;
    int64_t rows_per_token = 1; // vectors of d_head values per token in this block
    for (int dim = 1; dim + 1 < block.rank(); ++dim) {
        rows_per_token *= block[dim].size();
    }
    // Angles in double, as the reference computes them: positions times small frequencies lose
    // too much in float.
    const double* frequency = frequencies.data();
    float* cosines = scratch<float>(ScratchSlot::row_stats_a, half);
    float* sines = scratch<float>(ScratchSlot::row_stats_b, half);
    for (int64_t token = block[0].lower; token < block[0].upper; ++token) {
        const float given = positions == nullptr ? 0.0f : positions[token - block[0].lower];
        if (positions != nullptr &&
            !(given >= 0.0f && given < static_cast<float>(ir::Rope::kMaxPosition))) {
            return block_error(op, absl::StrCat("token ", token, " has position ", given,
                                                ", outside [0, ", ir::Rope::kMaxPosition, ")"));
        }
        const auto position = positions != nullptr
                                  ? static_cast<double>(given)
                                  : static_cast<double>(token - ir::sequence_start(*ends, token));
        for (int64_t i = 0; i < half; ++i) {
            const double angle = position * frequency[i];
            cosines[i] = static_cast<float>(std::cos(angle));
            sines[i] = static_cast<float>(std::sin(angle));
        }
        for (int64_t row = 0; row < rows_per_token; ++row) {
            const int64_t offset = ((token - block[0].lower) * rows_per_token + row) * head_dim;
            const float* x = input + offset;
            float* y = output + offset;
            for (int64_t i = 0; i < half; ++i) {
                const float first = x[i];
                const float second = x[i + half];
                y[i] = first * cosines[i] - second * sines[i];
                y[i + half] = first * sines[i] + second * cosines[i];
            }
        }
    }
    return absl::OkStatus();
}

// split_heads (split) and merge_heads: [..., h·d] against [..., h, d], the same bytes.
absl::Status heads_layout_f32(const ir::Operator& op, bool split, const ir::FunctionSpec& function,
                              F32Inputs inputs, F32Outputs outputs) {
    const float* input = inputs[0];
    float* output = outputs[0];
    // [..., h·d] against [..., h, d]: equal leading dimensions and equal volumes.
    const ir::Box& merged = split ? function.inputs[0] : function.outputs[0];
    const ir::Box& heads = split ? function.outputs[0] : function.inputs[0];
    bool matches = heads.rank() == merged.rank() + 1 &&
                   merged[merged.rank() - 1].size() ==
                       heads[heads.rank() - 2].size() * heads[heads.rank() - 1].size();
    for (int dim = 0; matches && dim + 1 < merged.rank(); ++dim) {
        matches = merged[dim].size() == heads[dim].size();
    }
    if (!matches) {
        return block_error(op, absl::StrCat("input block ", function.inputs[0].to_string(),
                                            " and output block ", function.outputs[0].to_string(),
                                            " do not hold the same heads"));
    }
    const int64_t volume = merged.volume();
    if (volume > 0 && input != output) {
        std::memmove(output, input, static_cast<size_t>(volume) * sizeof(float));
    }
    return absl::OkStatus();
}

absl::Status run_split_heads_f32(const ir::SplitHeads& op, const ir::FunctionSpec& function,
                                 F32Inputs inputs, F32Outputs outputs) {
    return heads_layout_f32(op, true, function, inputs, outputs);
}

absl::Status run_merge_heads_f32(const ir::MergeHeads& op, const ir::FunctionSpec& function,
                                 F32Inputs inputs, F32Outputs outputs) {
    return heads_layout_f32(op, false, function, inputs, outputs);
}

[[maybe_unused]] const bool kRegistered =
    register_cpu_kernel<ir::Softmax>(&run_softmax_f32) &&
    register_cpu_kernel<ir::RmsNorm>(&run_rmsnorm_f32) &&
    register_cpu_kernel<ir::LayerNorm>(&run_layernorm_f32) &&
    register_cpu_kernel<ir::Rope>(&run_rope_f32) &&
    register_cpu_kernel<ir::SplitHeads>(&run_split_heads_f32) &&
    register_cpu_kernel<ir::MergeHeads>(&run_merge_heads_f32);

} // namespace
} // namespace einsummable::kernels::cpu
