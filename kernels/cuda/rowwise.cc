// The row-wise operators on the GPU — softmax, rmsnorm, layernorm, rope and the head layouts
// (split_heads, merge_heads) — registered in cuda_kernels(). Each factory checks the blocks as
// kernels/cpu/rowwise_f32.cc does, computes the launch shape (and for rope uploads its table of
// frequencies and positions), and returns a kernel whose enqueue() only launches
// (rowwise_launch.h, rowwise.cu). Tests: tests/unit/kernels/cuda_rowwise_attention_test.cc.

#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/ops/layernorm.h"
#include "compiler/ir/ops/merge_heads.h"
#include "compiler/ir/ops/rmsnorm.h"
#include "compiler/ir/ops/rope.h"
#include "compiler/ir/ops/sequence_ends.h"
#include "compiler/ir/ops/softmax.h"
#include "compiler/ir/ops/split_heads.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_table.h"
#include "kernels/cuda/kernel.h"
#include "kernels/cuda/rowwise_launch.h"

namespace einsummable::kernels::cuda {
namespace {

std::string dtype_list(const std::vector<ir::DType>& dtypes) {
    return absl::StrJoin(dtypes, ", ", [](std::string* out, ir::DType dtype) {
        absl::StrAppend(out, ir::dtype_name(dtype));
    });
}

// The one storage dtype of every block: these kernels convert at neither end.
absl::StatusOr<ir::DType> single_dtype(const KernelRequest& request) {
    if (request.input_dtypes.empty()) {
        return request_error(*request.op, "the kernel request gives no input dtypes");
    }
    const ir::DType dtype = request.input_dtypes[0];
    bool same = true;
    for (const std::vector<ir::DType>* dtypes : {&request.input_dtypes, &request.output_dtypes}) {
        for (ir::DType other : *dtypes) {
            same = same && other == dtype;
        }
    }
    if (!same) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA ", request.op->kind(),
                                          " kernel needs every block in one dtype; inputs are [",
                                          dtype_list(request.input_dtypes), "], outputs [",
                                          dtype_list(request.output_dtypes), "]"));
    }
    return dtype;
}

template <typename Op>
absl::StatusOr<const Op*> typed_op(const KernelRequest& request) {
    const auto* op = dynamic_cast<const Op*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    return op;
}

absl::Status shape_mismatch(const ir::Operator& op, const ir::Box& input, const ir::Box& output) {
    return request_error(op, absl::StrCat("output block ", output.to_string(),
                                          " does not have the shape of input block ",
                                          input.to_string()));
}

// A prepared row-wise kernel: the shapes live in `launch`, which only enqueues.
class RowwiseKernel final : public PreparedKernel {
public:
    using Launch = std::function<cudaError_t(const KernelLaunch& launch)>;

    RowwiseKernel(const KernelRequest& request, std::string description, Launch launch,
                  DeviceTable table = {})
        : operator_(request.op->describe()), num_inputs_(request.function->inputs.size()),
          num_outputs_(request.function->outputs.size()), description_(std::move(description)),
          launch_(std::move(launch)), table_(std::move(table)) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != num_inputs_ || launch.outputs.size() != num_outputs_) {
            return absl::InvalidArgumentError(absl::StrCat(
                operator_, ": ", description_, " takes ", num_inputs_, " inputs and ", num_outputs_,
                " outputs, the launch has ", launch.inputs.size(), " and ", launch.outputs.size()));
        }
        return cuda_status(launch_(launch), absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    size_t num_inputs_;
    size_t num_outputs_;
    std::string description_;
    Launch launch_;
    DeviceTable table_; // read by launch_ through a pointer taken before the move
};

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_softmax(const KernelRequest& request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::Softmax* op, typed_op<ir::Softmax>(request));
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype, single_dtype(request));
    const ir::Box& box = request.function->inputs[0];
    if (box.shape() != request.function->outputs[0].shape()) {
        return shape_mismatch(*op, box, request.function->outputs[0]);
    }
    RowShape shape;
    const int axis = op->axis();
    for (int dim = 0; dim < box.rank(); ++dim) {
        int64_t& extent = dim < axis ? shape.outer : dim == axis ? shape.length : shape.inner;
        extent *= box[dim].size();
    }
    std::string description =
        absl::StrCat("cuda softmax ", ir::dtype_name(dtype), " rows=", shape.outer * shape.inner,
                     " length=", shape.length, " stride=", shape.inner);
    return std::make_unique<RowwiseKernel>(
        request, std::move(description), [dtype, shape](const KernelLaunch& launch) {
            return launch_softmax(dtype, launch.inputs[0], launch.outputs[0], shape, launch.stream);
        });
}

// The normalised length of a norm's x block, checked against the output block and the
// parameter vectors as kernels/cpu/rowwise_f32.cc does.
absl::StatusOr<int64_t> norm_length(const KernelRequest& request) {
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& x = function.inputs[0];
    if (x.shape() != function.outputs[0].shape()) {
        return shape_mismatch(*request.op, x, function.outputs[0]);
    }
    const int64_t length = x[x.rank() - 1].size();
    for (size_t param = 1; param < function.inputs.size(); ++param) {
        if (function.inputs[param].rank() != 1 || function.inputs[param][0].size() != length) {
            return request_error(*request.op,
                                 absl::StrCat("parameter block ", param, " ",
                                              function.inputs[param].to_string(),
                                              " does not match the normalised length ", length,
                                              " of x's block ", x.to_string()));
        }
    }
    return length;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_rmsnorm(const KernelRequest& request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::RmsNorm* op, typed_op<ir::RmsNorm>(request));
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype, single_dtype(request));
    EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t length, norm_length(request));
    const int64_t rows = length == 0 ? 0 : request.function->inputs[0].volume() / length;
    std::string description =
        absl::StrCat("cuda rmsnorm ", ir::dtype_name(dtype), " rows=", rows, " length=", length);
    return std::make_unique<RowwiseKernel>(
        request, std::move(description),
        [dtype, rows, length, eps = op->eps()](const KernelLaunch& launch) {
            return launch_rmsnorm(dtype, launch.inputs[0], launch.inputs[1], launch.outputs[0],
                                  rows, length, eps, launch.stream);
        });
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_layernorm(const KernelRequest& request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::LayerNorm* op, typed_op<ir::LayerNorm>(request));
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype, single_dtype(request));
    EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t length, norm_length(request));
    const int64_t rows = length == 0 ? 0 : request.function->inputs[0].volume() / length;
    const bool has_beta = request.function->inputs.size() > 2;
    std::string description =
        absl::StrCat("cuda layernorm ", ir::dtype_name(dtype), " rows=", rows, " length=", length,
                     has_beta ? " with beta" : " without beta");
    return std::make_unique<RowwiseKernel>(
        request, std::move(description),
        [dtype, rows, length, eps = op->eps(), has_beta](const KernelLaunch& launch) {
            return launch_layernorm(dtype, launch.inputs[0], launch.inputs[1],
                                    has_beta ? launch.inputs[2] : nullptr, launch.outputs[0], rows,
                                    length, eps, launch.stream);
        });
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_rope(const KernelRequest& request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::Rope* op, typed_op<ir::Rope>(request));
    // With run-time positions, input 1 is i32 or i64 and x and y share the other dtype.
    int positions_bytes = 0;
    if (op->has_positions()) {
        if (request.input_dtypes.size() != 2 || request.output_dtypes.size() != 1 ||
            !ir::is_integer(request.input_dtypes[1]) ||
            request.input_dtypes[0] != request.output_dtypes[0]) {
            return request_error(*op, "the CUDA rope kernel takes x and y in one dtype and "
                                      "positions in i32 or i64");
        }
        positions_bytes = static_cast<int>(ir::dtype_size(request.input_dtypes[1]));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype,
                                 op->has_positions()
                                     ? absl::StatusOr<ir::DType>(request.output_dtypes[0])
                                     : single_dtype(request));
    const ir::Box& block = request.function->inputs[0];
    if (block.shape() != request.function->outputs[0].shape()) {
        return shape_mismatch(*op, block, request.function->outputs[0]);
    }
    const int64_t head_dim = block[block.rank() - 1].size();
    if (head_dim % 2 != 0) {
        return request_error(*op, absl::StrCat("block ", block.to_string(),
                                               " splits the head dimension into an odd part"));
    }
    const int64_t half = head_dim / 2;
    if (half > rope_max_half(dtype)) {
        return request_error(*op,
                             absl::StrCat("the CUDA rope kernel takes head dimensions up to ",
                                          2 * rope_max_half(dtype), " in ", ir::dtype_name(dtype),
                                          "; block ", block.to_string(), " has ", head_dim));
    }
    const ir::Attributes& attributes = op->attributes();
    const std::vector<double>& frequencies = op->frequencies();
    if (static_cast<int64_t>(frequencies.size()) * 2 != head_dim) {
        return request_error(*op, absl::StrCat("block ", block.to_string(), " has ", head_dim,
                                               " of d_head's ", 2 * frequencies.size(),
                                               " elements; d_head is never split"));
    }
    absl::StatusOr<std::vector<int64_t>> ends = attributes.get_ints("sequence_ends");
    if (!op->has_positions() && (!ends.ok() || ends->empty())) {
        return request_error(*op, "has no sequence_ends attribute");
    }
    const int64_t tokens = block[0].size();
    int64_t rows_per_token = 1; // vectors of head_dim values per token in this block
    for (int dim = 1; dim + 1 < block.rank(); ++dim) {
        rows_per_token *= block[dim].size();
    }
    // Frequencies, then positions: both in double, as the CPU kernel computes angles.
    std::vector<double> table(static_cast<size_t>(half + tokens));
    for (int64_t i = 0; i < half; ++i) {
        table[i] = frequencies[i];
    }
    for (int64_t token = block[0].lower; token < block[0].upper && !op->has_positions(); ++token) {
        table[half + token - block[0].lower] =
            static_cast<double>(token - ir::sequence_start(*ends, token));
    }
    DeviceTable device_table;
    if (block.volume() > 0) {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            device_table, DeviceTable::upload(table.data(), table.size() * sizeof(double),
                                              absl::StrCat(op->describe(), ": rope table")));
    }
    const double* table_data = device_table.as<double>();
    std::string description =
        absl::StrCat("cuda rope ", ir::dtype_name(dtype), " tokens=", block[0].lower, "..",
                     block[0].upper, " rows_per_token=", rows_per_token, " d=", head_dim);
    return std::make_unique<RowwiseKernel>(
        request, std::move(description),
        [dtype, tokens, rows_per_token, half, table_data,
         positions_bytes](const KernelLaunch& launch) {
            return launch_rope(dtype, launch.inputs[0], launch.outputs[0], tokens, rows_per_token,
                               half, table_data, positions_bytes > 0 ? launch.inputs[1] : nullptr,
                               positions_bytes, launch.stream);
        },
        std::move(device_table));
}

// split_heads (split) and merge_heads: [..., h·d] and [..., h, d] are the same bytes, so the
// kernel is one device-to-device copy (none when the runtime runs it in place).
absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_heads_layout(const KernelRequest& request,
                                                                     bool split) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const ir::DType dtype, single_dtype(request));
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& merged = split ? function.inputs[0] : function.outputs[0];
    const ir::Box& heads = split ? function.outputs[0] : function.inputs[0];
    bool matches = merged.rank() >= 1 && heads.rank() == merged.rank() + 1 &&
                   merged[merged.rank() - 1].size() ==
                       heads[heads.rank() - 2].size() * heads[heads.rank() - 1].size();
    for (int dim = 0; matches && dim + 1 < merged.rank(); ++dim) {
        matches = merged[dim].size() == heads[dim].size();
    }
    if (!matches) {
        return request_error(*request.op,
                             absl::StrCat("input block ", function.inputs[0].to_string(),
                                          " and output block ", function.outputs[0].to_string(),
                                          " do not hold the same heads"));
    }
    const auto bytes = static_cast<size_t>(merged.volume() * ir::dtype_size(dtype));
    std::string description = absl::StrCat("cuda ", request.op->kind(), " ", ir::dtype_name(dtype),
                                           " copy of ", bytes, " bytes");
    return std::make_unique<RowwiseKernel>(
        request, std::move(description), [bytes](const KernelLaunch& launch) {
            if (bytes == 0 || launch.inputs[0] == launch.outputs[0]) {
                return cudaSuccess;
            }
            return cudaMemcpyAsync(launch.outputs[0], launch.inputs[0], bytes,
                                   cudaMemcpyDeviceToDevice, launch.stream);
        });
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_split_heads(const KernelRequest& request) {
    return prepare_heads_layout(request, true);
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_merge_heads(const KernelRequest& request) {
    return prepare_heads_layout(request, false);
}

[[maybe_unused]] const bool kRegistered =
    cuda_kernels().add<ir::Softmax>(&prepare_softmax) &&
    cuda_kernels().add<ir::RmsNorm>(&prepare_rmsnorm) &&
    cuda_kernels().add<ir::LayerNorm>(&prepare_layernorm) &&
    cuda_kernels().add<ir::Rope>(&prepare_rope) &&
    cuda_kernels().add<ir::SplitHeads>(&prepare_split_heads) &&
    cuda_kernels().add<ir::MergeHeads>(&prepare_merge_heads);

} // namespace
} // namespace einsummable::kernels::cuda
