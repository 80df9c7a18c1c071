#include "compiler/ir/ops/layernorm.h"

#include <cmath>

#include "compiler/ir/ops/row_view.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> LayerNorm::make(const Attributes& attributes,
                                            std::vector<TensorType> inputs) {
    EINSUMMABLE_ASSIGN_OR_RETURN(double eps, check_norm(kKind, attributes, inputs, 1, 2));
    return OperatorPtr(new LayerNorm(std::move(inputs), eps));
}

double LayerNorm::flops(const FunctionSpec& function) const {
    return 7.0 * static_cast<double>(function.inputs[0].volume());
}

std::vector<HostTensor> LayerNorm::compute(absl::Span<const HostTensor> inputs,
                                           const FunctionSpec& function) const {
    HostTensor output(function.outputs[0]);
    const double* gamma = inputs[1].data();
    const double* beta = inputs.size() > 2 ? inputs[2].data() : nullptr;
    const int axis = inputs[0].rank() - 1;
    for_each_row(inputs[0].box(), axis, [&](int64_t offset, int64_t stride, int64_t length) {
        const double* x = inputs[0].data() + offset;
        double* y = output.data() + offset;
        double mean = 0.0;
        for (int64_t idx = 0; idx < length; ++idx) {
            mean += x[idx * stride];
        }
        mean /= static_cast<double>(length);
        double variance = 0.0;
        for (int64_t idx = 0; idx < length; ++idx) {
            const double centred = x[idx * stride] - mean;
            variance += centred * centred;
        }
        variance /= static_cast<double>(length);
        const double inv_std = 1.0 / std::sqrt(variance + eps_);
        for (int64_t idx = 0; idx < length; ++idx) {
            y[idx * stride] =
                (x[idx * stride] - mean) * inv_std * gamma[idx] + (beta ? beta[idx] : 0.0);
        }
    });
    return {std::move(output)};
}

} // namespace einsummable::ir
