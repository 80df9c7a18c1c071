#include "compiler/ir/ops/layernorm.h"

#include <cmath>

#include "compiler/ir/ops/norm_common.h"
#include "compiler/ir/ops/row_view.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> LayerNorm::make(const Attributes& attributes,
                                            std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"eps"};
    if (absl::Status status = attributes.check_known(kKnown); !status.ok()) {
        return status;
    }
    if (absl::Status status = check_norm_inputs("layernorm", inputs, 1, 2); !status.ok()) {
        return status;
    }
    absl::StatusOr<double> eps = norm_eps(attributes);
    if (!eps.ok()) {
        return eps.status();
    }
    return OperatorPtr(new LayerNorm({{"eps", *eps}}, std::move(inputs), *eps));
}

LayerNorm::LayerNorm(Attributes attributes, std::vector<TensorType> inputs, double eps)
    : Operator(std::move(attributes), inputs, {inputs[0]}), eps_(eps) {}

std::vector<ShardableIndex> LayerNorm::shardable_indices() const {
    return indices_for_dims(input_types()[0], leading_dims(input_types()[0]));
}

SpecLayout LayerNorm::layout() const {
    return norm_layout(input_types());
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
