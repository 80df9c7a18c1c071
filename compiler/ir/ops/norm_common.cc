#include "compiler/ir/ops/norm_common.h"

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<double> check_norm(absl::string_view kind, const Attributes& attributes,
                                  absl::Span<const TensorType> inputs, int min_params,
                                  int max_params) {
    static constexpr absl::string_view kKnown[] = {"eps"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    const int params = static_cast<int>(inputs.size()) - 1;
    if (params < min_params || params > max_params) {
        return absl::InvalidArgumentError(absl::StrCat(
            kind, " takes ", 1 + min_params,
            min_params == max_params ? std::string() : absl::StrCat("-", 1 + max_params),
            " inputs, got ", inputs.size()));
    }
    const TensorType& x = inputs[0];
    if (x.rank() == 0) {
        return operand_error("input", 0, x, "must have at least one dimension to normalise");
    }
    const Dim& normalised = x.dims.back();
    for (int param = 1; param < static_cast<int>(inputs.size()); ++param) {
        const TensorType& type = inputs[param];
        if (type.rank() != 1 || type.dims[0].size != normalised.size) {
            return operand_error("input", param, type,
                                 absl::StrCat("shape mismatch: expected a vector of ",
                                              normalised.size, " (the normalised dimension '",
                                              normalised.name, "' of input 0)"));
        }
        if (type.dtype != x.dtype) {
            return operand_error("input", param, type,
                                 absl::StrCat("dtype mismatch: input 0 is ", dtype_name(x.dtype)));
        }
    }
    absl::StatusOr<double> eps = attributes.get_double_or("eps", 1e-5);
    if (eps.ok() && !(*eps >= 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' must be >= 0, got ", *eps));
    }
    return eps;
}

NormOperator::NormOperator(std::vector<TensorType> inputs, double eps)
    : Operator({{"eps", eps}}, inputs, {inputs[0]}), eps_(eps) {}

std::vector<int> NormOperator::leading_dims() const {
    return dim_range(0, input_types()[0].rank() - 1);
}

std::vector<ShardableIndex> NormOperator::shardable_indices() const {
    return indices_for_dims(input_types()[0], leading_dims());
}

std::vector<IndexRole> NormOperator::index_roles(const OperandRoles& /*operands*/) const {
    return std::vector<IndexRole>(leading_dims().size(), IndexRole::token);
}

SpecLayout NormOperator::layout() const {
    const std::vector<DimBinding> x = bind_dims(input_types()[0], leading_dims());
    SpecLayout layout{{x}, {x}, {AggOp::none}};
    for (int param = 1; param < num_inputs(); ++param) {
        layout.inputs.push_back(whole_dims(input_types()[param]));
    }
    return layout;
}

} // namespace einsummable::ir
