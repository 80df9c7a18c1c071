#include "compiler/ir/ops/argmax.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> ArgMax::make(const Attributes& attributes,
                                         std::vector<TensorType> inputs) {
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known({}));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("argmax takes 1 input (x [..., vocab]), got ", inputs.size()));
    }
    const TensorType& x = inputs[0];
    if (x.rank() == 0) {
        return operand_error("input", 0, x,
                             "argmax reduces the last dimension; a scalar (rank 0) has none");
    }
    const int64_t vocab = x.dims.back().size;
    if (vocab == 0) {
        return operand_error("input", 0, x,
                             "argmax of an empty last dimension (size 0) has no largest element");
    }
    if (vocab > kMaxVocabulary) {
        return operand_error("input", 0, x,
                             absl::StrCat("argmax's last dimension holds ", vocab,
                                          " entries, more than ", kMaxVocabulary,
                                          " (2^24, where f32 indices stay exact)"));
    }
    TensorType output{DType::i64, x.dims};
    output.dims.back() = Dim{"argmax", 1};
    return OperatorPtr(new ArgMax(std::move(inputs), std::move(output)));
}

ArgMax::ArgMax(std::vector<TensorType> inputs, TensorType output)
    : Operator({}, std::move(inputs), {std::move(output)}) {}

std::vector<ShardableIndex> ArgMax::shardable_indices() const {
    const TensorType& x = input_types()[0];
    return indices_for_dims(x, dim_range(0, x.rank()));
}

std::vector<IndexRole> ArgMax::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(input_types()[0].rank() - 1, IndexRole::token);
    roles.push_back(IndexRole::contracted);
    return roles;
}

SpecLayout ArgMax::layout() const {
    const TensorType& x = input_types()[0];
    const int rank = x.rank();
    std::vector<DimBinding> out = bind_dims(output_types()[0], dim_range(0, rank - 1));
    return {{bind_dims(x, dim_range(0, rank))}, {std::move(out)}, {AggOp::arg_max}};
}

double ArgMax::flops(const FunctionSpec& function) const {
    return static_cast<double>(function.inputs[0].volume());
}

absl::Status ArgMax::check_blocks_line_up(const FunctionSpec& function) const {
    if (function.inputs.size() != 1 || function.outputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("argmax: a function reads 1 block and writes 1; this one ",
                         function.inputs.size(), " and ", function.outputs.size()));
    }
    const Box& x = function.inputs[0];
    const Box& out = function.outputs[0];
    const int last = x.rank() - 1;
    bool lined_up = last >= 0 && out.rank() == x.rank() && out[last].size() == 1;
    for (int dim = 0; lined_up && dim < last; ++dim) {
        lined_up = x[dim] == out[dim];
    }
    if (!lined_up) {
        return absl::InvalidArgumentError(absl::StrCat("argmax: blocks x ", x.to_string(),
                                                       " and indices ", out.to_string(),
                                                       " do not line up"));
    }
    return absl::OkStatus();
}

namespace {

// Per row of the block: the absolute index of its first largest element (NaN largest) and that
// element.
PartialBlock row_maxima(const HostTensor& x, const Box& out_box) {
    const Box& box = x.box();
    const int64_t width = box.dims().back().size();
    const int64_t first = box.dims().back().lower;
    PartialBlock partial{HostTensor(out_box), std::vector<double>()};
    const int64_t rows = out_box.volume();
    partial.stats.resize(static_cast<size_t>(rows));
    for (int64_t row = 0; row < rows; ++row) {
        const double* values = x.data() + row * width;
        int64_t best = 0;
        for (int64_t idx = 1; idx < width; ++idx) {
            if (arg_max_wins(values[idx], static_cast<double>(idx), values[best],
                             static_cast<double>(best))) {
                best = idx;
            }
        }
        partial.values.data()[row] = static_cast<double>(first + best);
        partial.stats[row] = width > 0 ? values[best] : -std::numeric_limits<double>::infinity();
    }
    return partial;
}

} // namespace

std::vector<HostTensor> ArgMax::compute(absl::Span<const HostTensor> inputs,
                                        const FunctionSpec& function) const {
    std::vector<HostTensor> outputs;
    outputs.push_back(row_maxima(inputs[0], function.outputs[0]).values);
    return outputs;
}

// The indices with their elements as statistics.
absl::StatusOr<std::vector<PartialBlock>>
ArgMax::compute_partials(absl::Span<const HostTensor> inputs, const FunctionSpec& function) const {
    std::vector<PartialBlock> partials;
    partials.push_back(row_maxima(inputs[0], function.outputs[0]));
    return partials;
}

} // namespace einsummable::ir
