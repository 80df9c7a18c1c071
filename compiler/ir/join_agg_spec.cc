#include "compiler/ir/join_agg_spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/internal_error.h"
#include "compiler/ir/scalar_op.h"

namespace einsummable::ir {

absl::string_view agg_op_name(AggOp op) {
    switch (op) {
    case AggOp::none:
        return "none";
    case AggOp::sum:
        return "sum";
    case AggOp::max:
        return "max";
    case AggOp::min:
        return "min";
    case AggOp::log_sum_exp:
        return "log_sum_exp";
    case AggOp::arg_max:
        return "arg_max";
    case AggOp::top_k:
        return "top_k";
    }
    return "?";
}

absl::StatusOr<AggOp> parse_agg_op(absl::string_view name) {
    for (AggOp op : {AggOp::none, AggOp::sum, AggOp::max, AggOp::min, AggOp::log_sum_exp,
                     AggOp::arg_max, AggOp::top_k}) {
        if (name == agg_op_name(op)) {
            return op;
        }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown aggregation '", name,
                     "' (expected sum, max, min, log_sum_exp, arg_max or top_k)"));
}

bool carries_stats(AggOp op) {
    return op == AggOp::log_sum_exp || op == AggOp::arg_max;
}

bool combines_blocks(AggOp op) {
    return carries_stats(op) || combines_rows(op);
}

bool combines_rows(AggOp op) {
    return op == AggOp::top_k;
}

double aggregate(AggOp op, double a, double b) {
    switch (op) {
    case AggOp::sum:
        return a + b;
    case AggOp::max:
        return propagating_max(a, b);
    case AggOp::min:
        return propagating_min(a, b);
    case AggOp::log_sum_exp:
    case AggOp::arg_max:
    case AggOp::top_k:
        EINSUMMABLE_CHECK(false, absl::StrCat(agg_op_name(op),
                                              " is a block aggregation (combine_partials, "
                                              "merge_top_k)"));
        break;
    case AggOp::none:
        break;
    }
    return a;
}

std::vector<Box> JoinAggSpec::output_tiling(int output_idx) const {
    std::vector<Box> boxes;
    boxes.reserve(functions.size());
    for (const FunctionSpec& function : functions) {
        boxes.push_back(function.outputs[output_idx]);
    }
    return distinct_boxes(boxes);
}

std::vector<Box> JoinAggSpec::input_blocks(int input_idx) const {
    std::vector<Box> boxes;
    boxes.reserve(functions.size());
    for (const FunctionSpec& function : functions) {
        boxes.push_back(function.inputs[input_idx]);
    }
    return distinct_boxes(boxes);
}

std::string JoinAggSpec::to_string() const {
    auto boxes = [](const std::vector<Box>& list) {
        return absl::StrJoin(list, ", ", [](std::string* out, const Box& box) {
            absl::StrAppend(out, box.to_string());
        });
    };
    std::string out = absl::StrCat(
        "agg: ",
        absl::StrJoin(aggregations, ", ",
                      [](std::string* s, AggOp op) { absl::StrAppend(s, agg_op_name(op)); }),
        "\n");
    for (size_t idx = 0; idx < functions.size(); ++idx) {
        absl::StrAppend(&out, "  f", idx, ": in(", boxes(functions[idx].inputs), ") -> out(",
                        boxes(functions[idx].outputs), ")\n");
    }
    return out;
}

} // namespace einsummable::ir
