#include "compiler/ir/ops/embedding.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

template <typename Int>
std::optional<IdOutOfRange> first_outside(absl::Span<const std::byte> bytes, int64_t vocab) {
    const int64_t count = static_cast<int64_t>(bytes.size() / sizeof(Int));
    for (int64_t position = 0; position < count; ++position) {
        Int id;
        std::memcpy(&id, bytes.data() + position * sizeof(Int), sizeof(Int));
        if (id < 0 || static_cast<int64_t>(id) >= vocab) {
            return IdOutOfRange{position, static_cast<int64_t>(id)};
        }
    }
    return std::nullopt;
}

} // namespace

std::optional<IdOutOfRange> find_id_out_of_range(DType dtype, absl::Span<const std::byte> ids,
                                                 int64_t vocab) {
    return dtype == DType::i64 ? first_outside<int64_t>(ids, vocab)
                               : first_outside<int32_t>(ids, vocab);
}

std::string describe_id_out_of_range(const IdOutOfRange& bad, int64_t vocab) {
    return absl::StrCat("position ", bad.position, " holds id ", bad.id, ", outside the table's ",
                        vocab, " rows [0, ", vocab, ")");
}

absl::StatusOr<OperatorPtr> Embedding::make(const Attributes& attributes,
                                            std::vector<TensorType> inputs) {
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known({}));
    if (inputs.size() != 2) {
        return absl::InvalidArgumentError(absl::StrCat(
            "embedding takes 2 inputs (table [vocab, d], ids [tokens]), got ", inputs.size()));
    }
    const TensorType& table = inputs[0];
    const TensorType& ids = inputs[1];
    if (table.rank() != 2) {
        return operand_error(
            "input", 0, table,
            absl::StrCat("embedding's table is [vocab, d], rank 2; got rank ", table.rank()));
    }
    if (is_integer(table.dtype)) {
        return operand_error("input", 0, table,
                             absl::StrCat("embedding's table holds floating-point rows, not ",
                                          dtype_name(table.dtype)));
    }
    if (ids.rank() != 1) {
        return operand_error(
            "input", 1, ids,
            absl::StrCat("embedding's ids are [tokens], rank 1; got rank ", ids.rank()));
    }
    if (!is_integer(ids.dtype)) {
        return operand_error(
            "input", 1, ids,
            absl::StrCat("embedding's ids are i32 or i64, not ", dtype_name(ids.dtype)));
    }
    TensorType output{table.dtype, {ids.dims[0], table.dims[1]}};
    return OperatorPtr(new Embedding(std::move(inputs), std::move(output)));
}

Embedding::Embedding(std::vector<TensorType> inputs, TensorType output)
    : Operator({}, std::move(inputs), {std::move(output)}) {}

std::vector<ShardableIndex> Embedding::shardable_indices() const {
    const TensorType& table = input_types()[0];
    const TensorType& ids = input_types()[1];
    TensorType dims{table.dtype, {ids.dims[0], table.dims[1], table.dims[0]}};
    return indices_for_dims(dims, {0, 1, 2});
}

std::vector<IndexRole> Embedding::index_roles(const OperandRoles& /*operands*/) const {
    return {IndexRole::token, IndexRole::feature, IndexRole::contracted};
}

SpecLayout Embedding::layout() const {
    // Indices: 0 tokens, 1 d, 2 vocab.
    SpecLayout spec_layout;
    spec_layout.inputs.push_back({DimBinding{2}, DimBinding{1}});  // table [vocab, d]
    spec_layout.inputs.push_back({DimBinding{0}});                 // ids [tokens]
    spec_layout.outputs.push_back({DimBinding{0}, DimBinding{1}}); // out [tokens, d]
    spec_layout.aggregations.push_back(AggOp::sum);
    return spec_layout;
}

double Embedding::flops(const FunctionSpec& /*function*/) const {
    return 0.0; // a gather: bytes, no arithmetic
}

double Embedding::input_bytes_read(const FunctionSpec& function, int input) const {
    if (input != 0) {
        return Operator::input_bytes_read(function, input);
    }
    const Box& table = function.inputs[0];
    const int64_t rows = std::min(table[0].size(), function.inputs[1][0].size());
    return static_cast<double>(rows * table[1].size() * dtype_size(input_types()[0].dtype));
}

absl::Status Embedding::check_input_values(int input, absl::Span<const std::byte> bytes) const {
    if (input != 1) {
        return absl::OkStatus();
    }
    if (std::optional<IdOutOfRange> bad =
            find_id_out_of_range(input_types()[1].dtype, bytes, vocab())) {
        return absl::InvalidArgumentError(describe_id_out_of_range(*bad, vocab()));
    }
    return absl::OkStatus();
}

// Each token of the block whose id falls in the block's vocabulary rows copies that row's d
// block; the others (in another function's rows, or outside the table) stay zero.
std::vector<HostTensor> Embedding::compute(absl::Span<const HostTensor> inputs,
                                           const FunctionSpec& function) const {
    const HostTensor& table = inputs[0];
    const HostTensor& ids = inputs[1];
    HostTensor output(function.outputs[0]);
    const Interval rows = table.box()[0];
    const int64_t width = table.box()[1].size();
    for (int64_t t = 0; t < ids.size(); ++t) {
        const double id = ids.data()[t];
        if (id >= static_cast<double>(rows.lower) && id < static_cast<double>(rows.upper)) {
            const int64_t row = static_cast<int64_t>(id) - rows.lower;
            std::copy_n(table.data() + row * width, width, output.data() + t * width);
        }
    }
    return {std::move(output)};
}

} // namespace einsummable::ir
