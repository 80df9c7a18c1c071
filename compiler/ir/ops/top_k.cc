#include "compiler/ir/ops/top_k.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "compiler/ir/partial_block.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> TopK::make(const Attributes& attributes,
                                       std::vector<TensorType> inputs) {
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known({"k"}));
    if (inputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("top_k takes 1 input (x [..., vocab]), got ", inputs.size()));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t k, attributes.get_int("k"));
    const TensorType& x = inputs[0];
    if (x.rank() == 0) {
        return operand_error("input", 0, x,
                             "top_k reduces the last dimension; a scalar (rank 0) has none");
    }
    const int64_t vocab = x.dims.back().size;
    if (vocab > kMaxVocabulary) {
        return operand_error("input", 0, x,
                             absl::StrCat("top_k's last dimension holds ", vocab,
                                          " entries, more than ", kMaxVocabulary,
                                          " (2^24, where f32 indices stay exact)"));
    }
    if (k < 1 || k > vocab || k > kMaxK) {
        return absl::InvalidArgumentError(absl::StrCat(
            "top_k: attribute k is ", k, "; give 1 to ", std::min(vocab, kMaxK),
            " (at most the last dimension's ", vocab, " entries and at most ", kMaxK, ")"));
    }
    TensorType output{x.dtype == DType::f64 ? DType::f64 : DType::f32, x.dims};
    output.dims.back() = Dim{"top_k", k};
    output.dims.push_back(Dim{"top_k_pair", 2});
    return OperatorPtr(new TopK({{"k", k}}, std::move(inputs), std::move(output), k));
}

TopK::TopK(Attributes attributes, std::vector<TensorType> inputs, TensorType output, int64_t k)
    : Operator(std::move(attributes), std::move(inputs), {std::move(output)}), k_(k) {}

std::vector<ShardableIndex> TopK::shardable_indices() const {
    const TensorType& x = input_types()[0];
    return indices_for_dims(x, dim_range(0, x.rank()));
}

std::vector<IndexRole> TopK::index_roles(const OperandRoles& /*operands*/) const {
    std::vector<IndexRole> roles(input_types()[0].rank() - 1, IndexRole::token);
    roles.push_back(IndexRole::contracted);
    return roles;
}

SpecLayout TopK::layout() const {
    const TensorType& x = input_types()[0];
    const int rank = x.rank();
    std::vector<DimBinding> out = bind_dims(output_types()[0], dim_range(0, rank - 1));
    return {{bind_dims(x, dim_range(0, rank))}, {std::move(out)}, {AggOp::top_k}};
}

double TopK::flops(const FunctionSpec& function) const {
    return static_cast<double>(function.inputs[0].volume());
}

absl::Status TopK::check_blocks_line_up(const FunctionSpec& function) const {
    if (function.inputs.size() != 1 || function.outputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("top_k: a function reads 1 block and writes 1; this one ",
                         function.inputs.size(), " and ", function.outputs.size()));
    }
    const Box& x = function.inputs[0];
    const Box& out = function.outputs[0];
    const int last = x.rank() - 1;
    bool lined_up = last >= 0 && out.rank() == x.rank() + 1 && out[last] == Interval{0, k_} &&
                    out[last + 1] == Interval{0, 2};
    for (int dim = 0; lined_up && dim < last; ++dim) {
        lined_up = x[dim] == out[dim];
    }
    if (!lined_up) {
        return absl::InvalidArgumentError(absl::StrCat(
            "top_k: blocks x ", x.to_string(), " and pairs ", out.to_string(), " do not line up"));
    }
    return absl::OkStatus();
}

// Per row of the block: its k best (value, absolute index) pairs by arg_max_wins, padded with
// (-inf, vocab) when the block holds fewer than k columns.
std::vector<HostTensor> TopK::compute(absl::Span<const HostTensor> inputs,
                                      const FunctionSpec& function) const {
    const HostTensor& x = inputs[0];
    const Box& box = x.box();
    const int64_t width = box.dims().back().size();
    const int64_t first = box.dims().back().lower;
    HostTensor pairs(function.outputs[0]);
    const int64_t rows = width > 0 ? x.size() / width : pairs.size() / (2 * k_);
    std::vector<int64_t> order(static_cast<size_t>(width));
    for (int64_t row = 0; row < rows; ++row) {
        const double* values = x.data() + row * width;
        std::iota(order.begin(), order.end(), int64_t{0});
        const auto kept = static_cast<std::ptrdiff_t>(std::min(width, k_));
        std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                          [&](int64_t a, int64_t b) {
                              return arg_max_wins(values[a], static_cast<double>(a), values[b],
                                                  static_cast<double>(b));
                          });
        double* out = pairs.data() + row * 2 * k_;
        for (int64_t slot = 0; slot < k_; ++slot) {
            const bool real = slot < kept;
            out[2 * slot] = real ? values[order[slot]] : -std::numeric_limits<double>::infinity();
            out[2 * slot + 1] = static_cast<double>(real ? first + order[slot] : vocab());
        }
    }
    std::vector<HostTensor> outputs;
    outputs.push_back(std::move(pairs));
    return outputs;
}

} // namespace einsummable::ir
