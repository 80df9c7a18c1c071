#include "compiler/ir/ops/softmax.h"

#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/row_view.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> Softmax::make(const Attributes& attributes,
                                          std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"axis"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("softmax takes 1 input, got ", inputs.size()));
    }
    const int rank = inputs[0].rank();
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t axis, attributes.get_int_or("axis", -1));
    if (rank == 0 || axis < -rank || axis >= rank) {
        return operand_error(
            "input", 0, inputs[0],
            absl::StrCat("softmax axis ", axis, " is out of range for rank ", rank));
    }
    const int normalised = static_cast<int>(axis < 0 ? axis + rank : axis);
    return OperatorPtr(new Softmax({{"axis", int64_t{normalised}}}, std::move(inputs), normalised));
}

Softmax::Softmax(Attributes attributes, std::vector<TensorType> inputs, int axis)
    : Operator(std::move(attributes), inputs, {inputs[0]}), axis_(axis) {}

std::vector<int> Softmax::other_dims() const {
    std::vector<int> dims;
    for (int dim = 0; dim < input_types()[0].rank(); ++dim) {
        if (dim != axis_) {
            dims.push_back(dim);
        }
    }
    return dims;
}

std::vector<ShardableIndex> Softmax::shardable_indices() const {
    return indices_for_dims(input_types()[0], other_dims());
}

std::vector<IndexRole> Softmax::index_roles(const OperandRoles& /*operands*/) const {
    return std::vector<IndexRole>(other_dims().size(), IndexRole::token);
}

SpecLayout Softmax::layout() const {
    const std::vector<DimBinding> bindings = bind_dims(input_types()[0], other_dims());
    return {{bindings}, {bindings}, {AggOp::none}};
}

double Softmax::flops(const FunctionSpec& function) const {
    return 4.0 * static_cast<double>(function.inputs[0].volume()); // max, exp, sum, divide
}

std::vector<HostTensor> Softmax::compute(absl::Span<const HostTensor> inputs,
                                         const FunctionSpec& function) const {
    HostTensor output(function.outputs[0]);
    for_each_row(inputs[0].box(), axis_, [&](int64_t offset, int64_t stride, int64_t length) {
        const double* x = inputs[0].data() + offset;
        double* y = output.data() + offset;
        double max = -std::numeric_limits<double>::infinity();
        for (int64_t idx = 0; idx < length; ++idx) {
            max = std::max(max, x[idx * stride]);
        }
        double sum = 0.0;
        for (int64_t idx = 0; idx < length; ++idx) {
            y[idx * stride] = std::exp(x[idx * stride] - max);
            sum += y[idx * stride];
        }
        for (int64_t idx = 0; idx < length; ++idx) {
            y[idx * stride] /= sum;
        }
    });
    return {std::move(output)};
}

} // namespace einsummable::ir
