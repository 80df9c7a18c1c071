#include "compiler/ir/ops/rmsnorm.h"

#include <cmath>

#include "compiler/ir/ops/norm_common.h"
#include "compiler/ir/ops/row_view.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> RmsNorm::make(const Attributes& attributes,
                                          std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"eps"};
    if (absl::Status status = attributes.check_known(kKnown); !status.ok()) {
        return status;
    }
    if (absl::Status status = check_norm_inputs("rmsnorm", inputs, 1, 1); !status.ok()) {
        return status;
    }
    absl::StatusOr<double> eps = norm_eps(attributes);
    if (!eps.ok()) {
        return eps.status();
    }
    return OperatorPtr(new RmsNorm({{"eps", *eps}}, std::move(inputs), *eps));
}

RmsNorm::RmsNorm(Attributes attributes, std::vector<TensorType> inputs, double eps)
    : Operator(std::move(attributes), inputs, {inputs[0]}), eps_(eps) {}

std::vector<ShardableIndex> RmsNorm::shardable_indices() const {
    return indices_for_dims(input_types()[0], leading_dims(input_types()[0]));
}

SpecLayout RmsNorm::layout() const {
    return norm_layout(input_types());
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
