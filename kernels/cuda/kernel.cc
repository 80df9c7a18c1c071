#include "kernels/cuda/kernel.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace einsummable::kernels::cuda {

absl::Status request_error(const ir::Operator& op, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat(op.describe(), ": ", message));
}

namespace {

// A block's box has its operand's rank and lies inside its type.
absl::Status check_block(const ir::Operator& op, absl::string_view role, size_t operand_idx,
                         const ir::TensorType& type, const ir::Box& box) {
    bool inside = box.rank() == type.rank();
    for (int dim = 0; inside && dim < box.rank(); ++dim) {
        inside = box[dim].lower >= 0 && box[dim].lower <= box[dim].upper &&
                 box[dim].upper <= type.dims[dim].size;
    }
    if (!inside) {
        return request_error(op, absl::StrCat(role, " ", operand_idx, " block ", box.to_string(),
                                              " is not a block of ", type.to_string()));
    }
    return absl::OkStatus();
}

// Whether every output the request marks for statistics is one the operator aggregates by a
// block ⊕ with statistics (its partial results carry them: attention's log-sum-exp, argmax's
// arg-max).
bool stats_outputs_carry_statistics(const KernelRequest& request) {
    if (std::find(request.output_stats.begin(), request.output_stats.end(), true) ==
        request.output_stats.end()) {
        return true;
    }
    const std::vector<ir::AggOp> aggregations = request.op->whole_spec().aggregations;
    for (size_t idx = 0; idx < request.output_stats.size(); ++idx) {
        if (request.output_stats[idx] &&
            (idx >= aggregations.size() || !ir::carries_stats(aggregations[idx]))) {
            return false;
        }
    }
    return true;
}

} // namespace

KernelRegistry<CudaKernelFactory>& cuda_kernels() {
    // Never destroyed: kernels register before main() and are looked up until exit.
    static auto* registry = new KernelRegistry<CudaKernelFactory>();
    return *registry;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>> prepare_kernel(const KernelRequest& request) {
    if (request.op == nullptr || request.function == nullptr || request.libraries == nullptr) {
        return absl::InvalidArgumentError("a kernel request needs an operator, a function spec "
                                          "and the device's libraries");
    }
    const ir::Operator& op = *request.op;
    const ir::FunctionSpec& function = *request.function;
    const auto num_inputs = static_cast<size_t>(op.num_inputs());
    const auto num_outputs = static_cast<size_t>(op.num_outputs());
    if (function.inputs.size() != num_inputs || function.outputs.size() != num_outputs ||
        request.input_dtypes.size() != num_inputs || request.output_dtypes.size() != num_outputs) {
        return request_error(
            op, absl::StrCat("expected ", num_inputs, " inputs and ", num_outputs,
                             " outputs; the function spec has ", function.inputs.size(), " and ",
                             function.outputs.size(), ", the request ", request.input_dtypes.size(),
                             " and ", request.output_dtypes.size(), " dtypes"));
    }
    for (size_t idx = 0; idx < num_inputs; ++idx) {
        if (absl::Status status =
                check_block(op, "input", idx, op.input_types()[idx], function.inputs[idx]);
            !status.ok()) {
            return status;
        }
    }
    for (size_t idx = 0; idx < num_outputs; ++idx) {
        if (absl::Status status =
                check_block(op, "output", idx, op.output_types()[idx], function.outputs[idx]);
            !status.ok()) {
            return status;
        }
    }
    if (!request.output_stats.empty() && request.output_stats.size() != num_outputs) {
        return request_error(op, absl::StrCat("the request marks ", request.output_stats.size(),
                                              " outputs for statistics; the operator has ",
                                              num_outputs));
    }
    if (!stats_outputs_carry_statistics(request)) {
        return request_error(op, "only attention writes partial results with log-sum-exp "
                                 "statistics");
    }
    const CudaKernelFactory* factory = cuda_kernels().find(op.kind());
    if (factory == nullptr) {
        return request_error(op,
                             absl::StrCat("no CUDA kernel for operator kind '", op.kind(), "'"));
    }
    return (*factory)(request);
}

} // namespace einsummable::kernels::cuda
