#include "compiler/ir/ops/rope.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/sequence_ends.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> Rope::make(const Attributes& attributes,
                                       std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"theta", "sequence_ends"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat("rope takes 1 input, got ", inputs.size()));
    }
    const TensorType& x = inputs[0];
    if (x.rank() < 2) {
        return operand_error("input", 0, x, "rope needs [tokens, ..., d_head]");
    }
    if (x.dims.back().size % 2 != 0) {
        return operand_error("input", 0, x,
                             absl::StrCat("rope needs an even head dimension, '",
                                          x.dims.back().name, "' is ", x.dims.back().size));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(double theta, attributes.get_double_or("theta", 10000.0));
    if (!(theta > 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat("rope theta must be > 0, got ", theta));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> ends,
                                 sequence_ends_attribute(attributes, x.dims[0].size));
    Attributes normalised = {{"theta", theta}, {"sequence_ends", ends}};
    return OperatorPtr(new Rope(std::move(normalised), std::move(inputs), theta, ends));
}

Rope::Rope(Attributes attributes, std::vector<TensorType> inputs, double theta,
           std::vector<int64_t> sequence_ends)
    : Operator(std::move(attributes), inputs, {inputs[0]}), theta_(theta),
      sequence_ends_(std::move(sequence_ends)) {}

std::vector<ShardableIndex> Rope::shardable_indices() const {
    const TensorType& x = input_types()[0];
    return indices_for_dims(x, dim_range(0, x.rank() - 1));
}

std::vector<IndexRole> Rope::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(shardable_indices().size(), IndexRole::head);
    if (!roles.empty()) {
        roles[0] = IndexRole::token;
    }
    return roles;
}

SpecLayout Rope::layout() const {
    const TensorType& x = input_types()[0];
    const std::vector<DimBinding> bindings = bind_dims(x, dim_range(0, x.rank() - 1));
    return {{bindings}, {bindings}, {AggOp::none}};
}

double Rope::flops(const FunctionSpec& function) const {
    return 3.0 * static_cast<double>(function.inputs[0].volume());
}

std::vector<HostTensor> Rope::compute(absl::Span<const HostTensor> inputs,
                                      const FunctionSpec& function) const {
    const Box& block = inputs[0].box();
    HostTensor output(function.outputs[0]);
    const int64_t head_dim = block[block.rank() - 1].size();
    const int64_t half = head_dim / 2;
    int64_t rows_per_token = 1; // vectors of d_head values per token in this block
    for (int dim = 1; dim + 1 < block.rank(); ++dim) {
        rows_per_token *= block[dim].size();
    }
    std::vector<double> frequency(half);
    for (int64_t i = 0; i < half; ++i) {
        frequency[i] =
            std::pow(theta_, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    }
    for (int64_t token = block[0].lower; token < block[0].upper; ++token) {
        const double position = static_cast<double>(token - sequence_start(sequence_ends_, token));
        for (int64_t row = 0; row < rows_per_token; ++row) {
            const int64_t offset = ((token - block[0].lower) * rows_per_token + row) * head_dim;
            const double* x = inputs[0].data() + offset;
            double* y = output.data() + offset;
            for (int64_t i = 0; i < half; ++i) {
                const double angle = position * frequency[i];
                const double c = std::cos(angle);
                const double s = std::sin(angle);
                y[i] = x[i] * c - x[i + half] * s;
                y[i + half] = x[i] * s + x[i + half] * c;
            }
        }
    }
    return {std::move(output)};
}

} // namespace einsummable::ir
