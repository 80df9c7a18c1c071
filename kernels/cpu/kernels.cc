// run_f32's checks and dispatch, and the kernels the runtime calls between operators:
// aggregation of copies, region copies and storage conversions. The per-operator kernels live
// in einsum_f32.cc, rowwise_f32.cc and attention_f32.cc (f32_ops.h).

#include "kernels/cpu/kernels.h"

#include <algorithm>
#include <array>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/cpu/f32_ops.h"

namespace einsummable::kernels::cpu {

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

template <typename T>
const T* as(const ir::Operator& op) {
    return dynamic_cast<const T*>(&op);
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
        if (absl::Status status = check_block(op, "input", idx, op.input_types()[idx],
                                              function.inputs[idx], inputs[idx]);
            !status.ok()) {
            return status;
        }
    }
    for (size_t idx = 0; idx < num_outputs; ++idx) {
        if (absl::Status status = check_block(op, "output", idx, op.output_types()[idx],
                                              function.outputs[idx], outputs[idx]);
            !status.ok()) {
            return status;
        }
    }

    const absl::string_view kind = op.kind();
    if (kind == "einsum") {
        if (const auto* einsum = as<ir::Einsum>(op)) {
            return run_einsum_f32(*einsum, function, inputs, outputs[0]);
        }
    } else if (kind == "softmax") {
        if (const auto* softmax = as<ir::Softmax>(op)) {
            return run_softmax_f32(*softmax, function, inputs[0], outputs[0]);
        }
    } else if (kind == "rmsnorm") {
        if (const auto* rmsnorm = as<ir::RmsNorm>(op)) {
            return run_rmsnorm_f32(*rmsnorm, function, inputs, outputs[0]);
        }
    } else if (kind == "layernorm") {
        if (const auto* layernorm = as<ir::LayerNorm>(op)) {
            return run_layernorm_f32(*layernorm, function, inputs, outputs[0]);
        }
    } else if (kind == "rope") {
        if (const auto* rope = as<ir::Rope>(op)) {
            return run_rope_f32(*rope, function, inputs[0], outputs[0]);
        }
    } else if (kind == "split_heads") {
        if (as<ir::SplitHeads>(op) != nullptr) {
            return run_heads_layout_f32(op, function, inputs[0], outputs[0]);
        }
    } else if (kind == "merge_heads") {
        if (as<ir::MergeHeads>(op) != nullptr) {
            return run_heads_layout_f32(op, function, inputs[0], outputs[0]);
        }
    } else if (kind == "attention") {
        if (const auto* attention = as<ir::Attention>(op)) {
            return run_attention_f32(*attention, function, inputs, outputs[0]);
        }
    }
    return block_error(op, absl::StrCat("no f32 CPU kernel for operator kind '", kind, "'"));
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
        case ir::AggOp::max:
            for (int64_t idx = 0; idx < n; ++idx) {
                out[idx] = std::max(out[idx], in[idx]);
            }
            break;
        case ir::AggOp::min:
            for (int64_t idx = 0; idx < n; ++idx) {
                out[idx] = std::min(out[idx], in[idx]);
            }
            break;
        case ir::AggOp::none: // copies never repeat: the first part is the value
            return;
        }
    }
}

void copy_region(const std::byte* src, const ir::Box& src_box, std::byte* dst,
                 const ir::Box& dst_box, const ir::Box& region, int64_t element_bytes) {
    const int rank = region.rank();
    if (region.empty()) {
        return;
    }
    if (rank == 0) {
        std::memcpy(dst, src, static_cast<size_t>(element_bytes));
        return;
    }
    // Trailing dimensions that the region covers whole in both blocks join the contiguous run.
    int run_dim = rank - 1; // dimensions [run_dim, rank) form one run
    int64_t run = region[rank - 1].size();
    while (run_dim > 0 && region[run_dim] == src_box[run_dim] &&
           region[run_dim] == dst_box[run_dim]) {
        --run_dim;
        run *= region[run_dim].size();
    }
    // Strides (in elements) of the outer dimensions, and the offsets of the region's origin.
    std::array<int64_t, 64> src_stride{};
    std::array<int64_t, 64> dst_stride{};
    int64_t src_step = 1;
    int64_t dst_step = 1;
    int64_t src_offset = 0;
    int64_t dst_offset = 0;
    for (int dim = rank - 1; dim >= 0; --dim) {
        src_stride[dim] = src_step;
        dst_stride[dim] = dst_step;
        src_offset += (region[dim].lower - src_box[dim].lower) * src_step;
        dst_offset += (region[dim].lower - dst_box[dim].lower) * dst_step;
        src_step *= src_box[dim].size();
        dst_step *= dst_box[dim].size();
    }
    const auto run_bytes = static_cast<size_t>(run * element_bytes);
    std::array<int64_t, 64> counter{};
    while (true) {
        std::memcpy(dst + dst_offset * element_bytes, src + src_offset * element_bytes, run_bytes);
        int dim = run_dim - 1;
        for (; dim >= 0; --dim) {
            src_offset += src_stride[dim];
            dst_offset += dst_stride[dim];
            if (++counter[dim] < region[dim].size()) {
                break;
            }
            src_offset -= src_stride[dim] * region[dim].size();
            dst_offset -= dst_stride[dim] * region[dim].size();
            counter[dim] = 0;
        }
        if (dim < 0) {
            return;
        }
    }
}

void to_f32(ir::DType dtype, const std::byte* src, float* dst, int64_t n) {
    if (n <= 0) {
        return;
    }
    switch (dtype) {
    case ir::DType::f32:
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    case ir::DType::f64:
        for (int64_t idx = 0; idx < n; ++idx) {
            double value;
            std::memcpy(&value, src + idx * sizeof(double), sizeof(double));
            dst[idx] = static_cast<float>(value);
        }
        return;
    case ir::DType::f16:
    case ir::DType::bf16: {
        const bool half = dtype == ir::DType::f16;
        for (int64_t idx = 0; idx < n; ++idx) {
            uint16_t bits;
            std::memcpy(&bits, src + idx * sizeof(uint16_t), sizeof(uint16_t));
            dst[idx] = half ? ir::f16_to_float(bits) : ir::bf16_to_float(bits);
        }
        return;
    }
    }
}

void from_f32(ir::DType dtype, const float* src, std::byte* dst, int64_t n) {
    if (n <= 0) {
        return;
    }
    switch (dtype) {
    case ir::DType::f32:
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    case ir::DType::f64:
        for (int64_t idx = 0; idx < n; ++idx) {
            const auto value = static_cast<double>(src[idx]);
            std::memcpy(dst + idx * sizeof(double), &value, sizeof(double));
        }
        return;
    case ir::DType::f16:
    case ir::DType::bf16: {
        const bool half = dtype == ir::DType::f16;
        for (int64_t idx = 0; idx < n; ++idx) {
            const uint16_t bits = half ? ir::float_to_f16(src[idx]) : ir::float_to_bf16(src[idx]);
            std::memcpy(dst + idx * sizeof(uint16_t), &bits, sizeof(uint16_t));
        }
        return;
    }
    }
}

} // namespace einsummable::kernels::cpu
