// run_f32's checks and its lookup in the kernel registry, and the aggregation of copies the
// runtime calls between operators. The per-operator kernels live in their own files —
// einsum_f32.cc, rowwise_f32.cc, attention_f32.cc and one <kind>_f32.cc per other kind
// (f32_ops.h) — each registering its own kinds.

#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cpu {

KernelRegistry<CpuKernel>& cpu_kernels() {
    // Never destroyed: kernels register before main() and are looked up until exit.
    static auto* registry = new KernelRegistry<CpuKernel>();
    return *registry;
}

KernelRegistry<CpuPartialKernel>& cpu_partial_kernels() {
    static auto* registry = new KernelRegistry<CpuPartialKernel>();
    return *registry;
}

absl::Status partial_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                         absl::Span<const float* const> inputs, absl::Span<float* const> outputs,
                         absl::Span<float* const> stats) {
    const auto num_inputs = static_cast<size_t>(op.num_inputs());
    const auto num_outputs = static_cast<size_t>(op.num_outputs());
    if (inputs.size() != num_inputs || function.inputs.size() != num_inputs ||
        outputs.size() != num_outputs || stats.size() != num_outputs ||
        function.outputs.size() != num_outputs) {
        return block_error(op, absl::StrCat("partial results take ", num_inputs,
                                            " input blocks and write ", num_outputs, "; got ",
                                            inputs.size(), " and ", outputs.size(),
                                            " for a function spec with ", function.inputs.size(),
                                            " inputs and ", function.outputs.size(), " outputs"));
    }
    const CpuPartialKernel* kernel = cpu_partial_kernels().find(op.kind());
    if (kernel == nullptr) {
        return block_error(op, absl::StrCat("operator kind '", op.kind(),
                                            "' writes no partial results with statistics"));
    }
    return (*kernel)(op, function, inputs, outputs, stats);
}

absl::Status partial_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                         absl::Span<const float* const> inputs, float* output, float* stats) {
    float* const outputs[] = {output};
    float* const all_stats[] = {stats};
    return partial_f32(op, function, inputs, outputs, all_stats);
}

absl::Status block_error(const ir::Operator& op, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(op.describe(), ": ", message));
}

namespace {

// Checks one operand's block against its type: its rank, that it lies inside the type, and
// that a block holding elements has memory.
absl::Status check_block(const ir::Operator& op, absl::string_view role, size_t operand_idx,
                         const ir::TensorType& type, const ir::Box& box, const void* data) {
    bool inside = box.rank() == type.rank();
    for (int dim = 0; inside && dim < box.rank(); ++dim) {
        inside = box[dim].lower >= 0 && box[dim].lower <= box[dim].upper &&
                 box[dim].upper <= type.dims[dim].size;
    }
    if (!inside) {
        return block_error(op, absl::StrCat(role, " ", operand_idx, " block ", box.to_string(),
                                            " is not a block of ", type.to_string()));
    }
    if (data == nullptr && box.volume() > 0) {
        return block_error(
            op, absl::StrCat(role, " ", operand_idx, " block ", box.to_string(), " has no data"));
    }
    return absl::OkStatus();
}

} // namespace

absl::Status run_f32(const ir::Operator& op, const ir::FunctionSpec& function,
                     absl::Span<const float* const> inputs, absl::Span<float* const> outputs) {
    const auto num_inputs = static_cast<size_t>(op.num_inputs());
    const auto num_outputs = static_cast<size_t>(op.num_outputs());
    if (inputs.size() != num_inputs || function.inputs.size() != num_inputs ||
        outputs.size() != num_outputs || function.outputs.size() != num_outputs) {
        return block_error(op, absl::StrCat("expected ", num_inputs, " input and ", num_outputs,
                                            " output blocks, got ", inputs.size(), " input and ",
                                            outputs.size(),
                                            " output blocks for a function spec "
                                            "with ",
                                            function.inputs.size(), " inputs and ",
                                            function.outputs.size(), " outputs"));
    }
    for (size_t idx = 0; idx < num_inputs; ++idx) {
        EINSUMMABLE_RETURN_IF_ERROR(check_block(op, "input", idx, op.input_types()[idx],
                                                function.inputs[idx], inputs[idx]));
    }
    for (size_t idx = 0; idx < num_outputs; ++idx) {
        EINSUMMABLE_RETURN_IF_ERROR(check_block(op, "output", idx, op.output_types()[idx],
                                                function.outputs[idx], outputs[idx]));
    }

    const CpuKernel* kernel = cpu_kernels().find(op.kind());
    if (kernel == nullptr) {
        return block_error(op,
                           absl::StrCat("no f32 CPU kernel for operator kind '", op.kind(), "'"));
    }
    return (*kernel)(op, function, inputs, outputs);
}

void aggregate_f32(ir::AggOp op, absl::Span<const float* const> parts, float* out, int64_t n) {
    if (parts.empty() || n <= 0) {
        return;
    }
    std::memcpy(out, parts[0], static_cast<size_t>(n) * sizeof(float));
    for (size_t part = 1; part < parts.size(); ++part) {
        const float* in = parts[part];
        switch (op) {
        case ir::AggOp::sum:
            for (int64_t idx = 0; idx < n; ++idx) {
                out[idx] += in[idx];
            }
            break;
        // NaN in any part gives NaN, whatever the order of the parts (scalar_math.h).
        case ir::AggOp::max:
            for (int64_t idx = 0; idx < n; ++idx) {
                out[idx] = scalar_math::max(out[idx], in[idx]);
            }
            break;
        case ir::AggOp::min:
            for (int64_t idx = 0; idx < n; ++idx) {
                out[idx] = scalar_math::min(out[idx], in[idx]);
            }
            break;
        case ir::AggOp::none:        // copies never repeat: the first part is the value
        case ir::AggOp::log_sum_exp: // a block ⊕: aggregate_log_sum_exp_f32
        case ir::AggOp::arg_max:     // a block ⊕: aggregate_arg_max_f32
        case ir::AggOp::top_k:       // a block ⊕: aggregate_top_k_f32
            return;
        }
    }
}

void aggregate_log_sum_exp_f32(absl::Span<const float* const> values,
                               absl::Span<const float* const> lse, float* out_values,
                               float* out_lse, int64_t vectors, int64_t width) {
    const float minus_infinity = -std::numeric_limits<float>::infinity();
    for (int64_t vec = 0; vec < vectors; ++vec) {
        // NaN statistics (a NaN or +inf score) win whatever the order of the parts.
        float high = minus_infinity;
        for (const float* part : lse) {
            high = scalar_math::max(high, part[vec]);
        }
        float* out = out_values + vec * width;
        std::fill(out, out + width, 0.0f);
        if (high == minus_infinity) {
            // No part has a key of weight: values 0 (no key) or NaN (only -inf scores), kept by
            // adding, as ir::combine_log_sum_exp does.
            for (const float* part : values) {
                const float* in = part + vec * width;
                for (int64_t c = 0; c < width; ++c) {
                    out[c] += in[c];
                }
            }
            if (out_lse != nullptr) {
                out_lse[vec] = minus_infinity;
            }
            continue;
        }
        // In double: the weights exp(lse_i - combined) of near-equal parts lose bits in f32.
        double total = 0.0;
        for (const float* part : lse) {
            total += std::exp(static_cast<double>(part[vec]) - high);
        }
        const double combined = static_cast<double>(high) + std::log(total);
        for (size_t part = 0; part < values.size(); ++part) {
            const float weight = static_cast<float>(std::exp(lse[part][vec] - combined));
            if (weight == 0.0f) {
                continue; // left out, NaN values too (0·NaN would be NaN)
            }
            const float* in = values[part] + vec * width;
            for (int64_t c = 0; c < width; ++c) {
                out[c] += weight * in[c];
            }
        }
        if (out_lse != nullptr) {
            out_lse[vec] = static_cast<float>(combined);
        }
    }
}

void aggregate_arg_max_f32(absl::Span<const float* const> indices,
                           absl::Span<const float* const> stats, float* out_indices,
                           float* out_stats, int64_t vectors) {
    for (int64_t vec = 0; vec < vectors; ++vec) {
        float best = stats[0][vec];
        float index = indices[0][vec];
        for (size_t part = 1; part < indices.size(); ++part) {
            if (scalar_math::arg_max_wins(stats[part][vec], indices[part][vec], best, index)) {
                best = stats[part][vec];
                index = indices[part][vec];
            }
        }
        out_indices[vec] = index;
        if (out_stats != nullptr) {
            out_stats[vec] = best;
        }
    }
}

} // namespace einsummable::kernels::cpu
