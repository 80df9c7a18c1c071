#include "compiler/ir/ops/rmsnorm.h"

#include <cmath>

#include "compiler/ir/ops/row_view.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> RmsNorm::make(const Attributes& attributes,
                                          std::vector<TensorType> inputs) {
    EINSUMMABLE_ASSIGN_OR_RETURN(double eps, check_norm(kKind, attributes, inputs, 1, 1));
    return OperatorPtr(new RmsNorm(std::move(inputs), eps));
}

double RmsNorm::flops(const FunctionSpec& function) const {
    return 4.0 * static_cast<double>(function.inputs[0].volume()); // square, sum, scale, weight
}

std::vector<HostTensor> RmsNorm::compute(absl::Span<const HostTensor> inputs,
                                         const FunctionSpec& function) const {
    HostTensor output(function.outputs[0]);
    const double* weight = inputs[1].data();
    const int axis = inputs[0].rank() - 1;
    for_each_row(inputs[0].box(), axis, [&](int64_t offset, int64_t stride, int64_t length) {
        const double* x = inputs[0].data() + offset;
        double* y = output.data() + offset;
        double sum_squares = 0.0;
        for (int64_t idx = 0; idx < length; ++idx) {
            sum_squares += x[idx * stride] * x[idx * stride];
        }
        const double inv_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(length) + eps_);
        for (int64_t idx = 0; idx < length; ++idx) {
            y[idx * stride] = x[idx * stride] * inv_rms * weight[idx];
        }
    });
    return {std::move(output)};
}

} // namespace einsummable::ir
