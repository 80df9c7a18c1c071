#include "compiler/ir/ops/write_rows.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/ir/integer_values.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> WriteRows::make(const Attributes& attributes,
                                            std::vector<TensorType> inputs) {
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known({}));
    if (inputs.size() != 3) {
        return absl::InvalidArgumentError(absl::StrCat(
            "write_rows takes 3 inputs (state [R, ...], rows [n, ...], slots [n]), got ",
            inputs.size()));
    }
    const TensorType& state = inputs[0];
    const TensorType& rows = inputs[1];
    const TensorType& slots = inputs[2];
    if (state.rank() < 1 || is_integer(state.dtype)) {
        return operand_error("input", 0, state,
                             "write_rows' state is a floating-point tensor [R, ...]");
    }
    if (rows.rank() != state.rank() || rows.dtype != state.dtype) {
        return operand_error("input", 1, rows,
                             absl::StrCat("write_rows' rows are [n, ...] of the state's dtype (",
                                          dtype_name(state.dtype), ") and rank (", state.rank(),
                                          ")"));
    }
    for (int d = 1; d < state.rank(); ++d) {
        if (rows.dims[d].size != state.dims[d].size) {
            return operand_error("input", 1, rows,
                                 absl::StrCat("shape mismatch: dimension ", d, " ('",
                                              rows.dims[d].name, "') is ", rows.dims[d].size,
                                              ", the state's is ", state.dims[d].size));
        }
    }
    if (slots.rank() != 1 || !is_integer(slots.dtype) || slots.dims[0].size != rows.dims[0].size) {
        return operand_error("input", 2, slots,
                             absl::StrCat("write_rows' slots are i32 or i64 [n], one per row (",
                                          rows.dims[0].size, ")"));
    }
    TensorType output = state;
    return OperatorPtr(new WriteRows(std::move(inputs), std::move(output)));
}

WriteRows::WriteRows(std::vector<TensorType> inputs, TensorType output)
    : Operator({}, std::move(inputs), {std::move(output)}) {}

std::vector<ShardableIndex> WriteRows::shardable_indices() const {
    const TensorType& state = input_types()[0];
    return indices_for_dims(state, dim_range(0, state.rank()));
}

std::vector<IndexRole> WriteRows::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(shardable_indices().size(), IndexRole::feature);
    roles[0] = IndexRole::token;
    return roles;
}

SpecLayout WriteRows::layout() const {
    const TensorType& state = input_types()[0];
    const std::vector<DimBinding> bindings = bind_dims(state, dim_range(0, state.rank()));
    std::vector<DimBinding> rows = bindings;
    rows[0] = DimBinding{}; // every function reads all the rows
    return {{bindings, rows, {DimBinding{}}}, {bindings}, {AggOp::none}};
}

double WriteRows::flops(const FunctionSpec& /*function*/) const {
    return 0.0; // copies
}

absl::Status WriteRows::check_input_values(int input, absl::Span<const std::byte> bytes) const {
    if (input != 2) {
        return absl::OkStatus();
    }
    const DType dtype = input_types()[2].dtype;
    const auto width = static_cast<size_t>(dtype_size(dtype));
    std::map<int64_t, size_t> written; // slot -> the row that writes it
    for (size_t i = 0; (i + 1) * width <= bytes.size(); ++i) {
        const int64_t slot = integer_at(dtype, bytes, i);
        if (slot == kNotWritten) {
            continue;
        }
        if (slot < 0 || slot >= state_rows()) {
            return absl::InvalidArgumentError(
                absl::StrCat("slots[", i, "] = ", slot, " is outside the state's ", state_rows(),
                             " rows [0, ", state_rows(), ") (-1: not written)"));
        }
        auto [it, fresh] = written.emplace(slot, i);
        if (!fresh) {
            return absl::InvalidArgumentError(
                absl::StrCat("slot ", slot, " is written twice, by rows ", it->second, " and ", i));
        }
    }
    return absl::OkStatus();
}

std::vector<HostTensor> WriteRows::compute(absl::Span<const HostTensor> inputs,
                                           const FunctionSpec& function) const {
    const HostTensor& state = inputs[0];
    const HostTensor& rows = inputs[1];
    const HostTensor& slots = inputs[2];
    HostTensor output = state;
    const Interval block = function.outputs[0][0];
    const int64_t n = rows.box()[0].size();
    const int64_t width = n == 0 ? 0 : rows.size() / n;
    for (int64_t i = 0; i < n; ++i) {
        const double slot = slots.data()[i];
        if (slot >= static_cast<double>(block.lower) && slot < static_cast<double>(block.upper)) {
            const int64_t row = static_cast<int64_t>(slot) - block.lower;
            std::copy_n(rows.data() + i * width, width, output.data() + row * width);
        }
    }
    return {std::move(output)};
}

} // namespace einsummable::ir
