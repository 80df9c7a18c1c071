#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/box.h"

namespace einsummable::ir {

// The aggregation ⊕ that combines copies of one output box (paper section 3). `none` marks an
// output whose boxes never repeat in any spec of the operator, so nothing is ever combined.
// sum, max and min combine element by element. log_sum_exp (attention split along its keys) is
// a block ⊕: a partial result is the block normalised over its part, carried with one
// log-sum-exp statistic per vector along its last dimension (partial_block.h), and the ⊕
// rescales and adds (combine_log_sum_exp); the complete result drops the statistics. arg_max
// (argmax split along its vocabulary) is a block ⊕ too: a partial result holds the index of the
// largest value of its part, its statistic that value, and the ⊕ keeps the larger
// (combine_arg_max); the complete result is the index alone. top_k (top_k split along its
// vocabulary) is a block ⊕ without statistics: a partial result is its part's k best (value,
// index) pairs, best first, and the ⊕ merges two such lists of each row and keeps the first k
// (merge_top_k, partial_block.h); it combines whole rows of k pairs, never element by element.
enum class AggOp { none, sum, max, min, log_sum_exp, arg_max, top_k };

absl::string_view agg_op_name(AggOp op);
absl::StatusOr<AggOp> parse_agg_op(absl::string_view name);
// Whether partial results of `op` carry statistics beside their elements (log_sum_exp,
// arg_max).
bool carries_stats(AggOp op);
// Whether `op` is a block ⊕ (log_sum_exp, arg_max, top_k), with no element-wise form.
bool combines_blocks(AggOp op);
// Whether `op`'s ⊕ reads whole rows of a block (top_k: a row's k pairs are one list), so an
// exchange must not cut its partial results into chunks that split rows. log_sum_exp and arg_max
// combine element by element once the statistics are given, which chunks carry along.
bool combines_rows(AggOp op);
// a ⊕ b for the element-wise aggregations: IEEE sum, and max and min that give NaN when either
// side is NaN (propagating_max, scalar_op.h); the block aggregations (combines_blocks) have no
// element-wise form (an internal error).
double aggregate(AggOp op, double a, double b);

// One function call of the join: the block of every input it reads and of every output it
// writes (absolute positions inside the whole tensors).
struct FunctionSpec {
    std::vector<Box> inputs;
    std::vector<Box> outputs;
    friend bool operator==(const FunctionSpec&, const FunctionSpec&) = default;
};

// A decomposition of one operator into a join (one FunctionSpec per combination of intervals)
// followed by an aggregation per output. Produced by Operator::spec.
struct JoinAggSpec {
    std::vector<FunctionSpec> functions;
    std::vector<AggOp> aggregations; // one per output

    // The output tiling: distinct boxes of output `output_idx` in first-appearance order.
    std::vector<Box> output_tiling(int output_idx) const;
    // Distinct blocks of input `input_idx` that the join reads.
    std::vector<Box> input_blocks(int input_idx) const;
    std::string to_string() const;
};

} // namespace einsummable::ir
