#include "compiler/ir/ops/norm_common.h"

#include "absl/strings/str_cat.h"

namespace einsummable::ir {

absl::Status check_norm_inputs(absl::string_view kind, absl::Span<const TensorType> inputs,
                               int min_params, int max_params) {
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
    return absl::OkStatus();
}

std::vector<int> leading_dims(const TensorType& x) {
    return dim_range(0, x.rank() - 1);
}

SpecLayout norm_layout(absl::Span<const TensorType> inputs) {
    const std::vector<DimBinding> x = bind_dims(inputs[0], leading_dims(inputs[0]));
    SpecLayout layout{{x}, {x}, {AggOp::none}};
    for (size_t param = 1; param < inputs.size(); ++param) {
        layout.inputs.push_back(whole_dims(inputs[param]));
    }
    return layout;
}

absl::StatusOr<double> norm_eps(const Attributes& attributes) {
    absl::StatusOr<double> eps = attributes.get_double_or("eps", 1e-5);
    if (eps.ok() && !(*eps >= 0.0)) {
        return absl::InvalidArgumentError(absl::StrCat("attribute 'eps' must be >= 0, got ", *eps));
    }
    return eps;
}

} // namespace einsummable::ir
