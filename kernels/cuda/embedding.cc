// The CUDA kernel of embedding: one gather (embedding.cu) of the table block's rows that the
// ids of the block select, zeros for the others, moving the rows' bits in the table's dtype.
// Checks the blocks as kernels/cpu/embedding_f32.cc does. Ids outside the table are refused
// before a request runs (ir::check_input_values); the device kernel reads nothing for them.
// Tests: tests/unit/kernels/cuda_rowwise_attention_test.cc (every kind's random cases against
// the CPU kernel, in every dtype).

#include "compiler/ir/ops/embedding.h"

#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/embedding_launch.h"
#include "kernels/cuda/kernel.h"

namespace einsummable::kernels::cuda {
namespace {

class EmbeddingKernel final : public PreparedKernel {
public:
    EmbeddingKernel(std::string op, std::string description, ir::Interval rows, int64_t width,
                    int element_bytes, int ids_bytes, int64_t tokens)
        : operator_(std::move(op)), description_(std::move(description)), rows_(rows),
          width_(width), element_bytes_(element_bytes), ids_bytes_(ids_bytes), tokens_(tokens) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != 2 || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                operator_, ": ", description_, " takes 2 inputs and 1 output, the launch has ",
                launch.inputs.size(), " and ", launch.outputs.size()));
        }
        return cuda_status(launch_embedding_gather(launch.inputs[0], rows_.lower, rows_.upper,
                                                   width_, element_bytes_, launch.inputs[1],
                                                   ids_bytes_, tokens_, launch.outputs[0],
                                                   launch.stream),
                           absl::StrCat(operator_, ": ", description_));
    }

    std::string describe() const override { return description_; }

private:
    std::string operator_;
    std::string description_;
    ir::Interval rows_;
    int64_t width_;
    int element_bytes_;
    int ids_bytes_;
    int64_t tokens_;
};

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_embedding(const KernelRequest& request) {
    const auto* op = dynamic_cast<const ir::Embedding*>(request.op);
    if (op == nullptr) {
        return request_error(*request.op,
                             absl::StrCat("the CUDA kernel of kind '", request.op->kind(),
                                          "' does not take this operator class"));
    }
    if (request.input_dtypes.size() != 2 || request.output_dtypes.size() != 1) {
        return request_error(*op, "the kernel request gives no input or output dtypes");
    }
    const ir::DType table_dtype = request.input_dtypes[0];
    const ir::DType ids_dtype = request.input_dtypes[1];
    if (request.output_dtypes[0] != table_dtype || !ir::is_integer(ids_dtype)) {
        return request_error(
            *op, absl::StrCat("the CUDA embedding kernel moves the table's rows unconverted: it "
                              "needs the output in the table's dtype and integer ids; got table ",
                              ir::dtype_name(table_dtype), ", ids ", ir::dtype_name(ids_dtype),
                              ", output ", ir::dtype_name(request.output_dtypes[0])));
    }
    const ir::FunctionSpec& function = *request.function;
    const ir::Box& table = function.inputs[0];
    const ir::Box& ids = function.inputs[1];
    const ir::Box& out = function.outputs[0];
    if (ids[0] != out[0] || table[1] != out[1]) {
        return request_error(*op, absl::StrCat("blocks table ", table.to_string(), ", ids ",
                                               ids.to_string(), " and output ", out.to_string(),
                                               " do not line up"));
    }
    std::string description = absl::StrCat(
        "cuda embedding ", ir::dtype_name(table_dtype), " ids ", ir::dtype_name(ids_dtype), ": ",
        out[0].size(), " tokens of ", out[1].size(), " elements from rows ", table[0].to_string());
    return std::make_unique<EmbeddingKernel>(
        op->describe(), std::move(description), table[0], out[1].size(),
        static_cast<int>(ir::dtype_size(table_dtype)), static_cast<int>(ir::dtype_size(ids_dtype)),
        out[0].size());
}

[[maybe_unused]] const bool kRegistered = cuda_kernels().add<ir::Embedding>(&prepare_embedding);

} // namespace
} // namespace einsummable::kernels::cuda
