#include "compiler/logical/cost_model.h"

#include <algorithm>
#include <map>

namespace einsummable::logical {

CostBreakdown& CostBreakdown::operator+=(const CostBreakdown& other) {
    repartition += other.repartition;
    join += other.join;
    aggregation += other.aggregation;
    return *this;
}

Cost& Cost::operator+=(const Cost& other) {
    elements += other.elements;
    bytes += other.bytes;
    return *this;
}

ir::Tiling canonical_tiling(ir::Tiling boxes) {
    std::sort(boxes.begin(), boxes.end());
    boxes.erase(std::unique(boxes.begin(), boxes.end()), boxes.end());
    return boxes;
}

Cost join_cost(const ir::Operator& op, const ir::JoinAggSpec& spec) {
    Cost cost;
    for (const ir::FunctionSpec& function : spec.functions) {
        for (int input_idx = 0; input_idx < op.num_inputs(); ++input_idx) {
            const double elements = static_cast<double>(function.inputs[input_idx].volume());
            cost.elements.join += elements;
            cost.bytes.join += elements * ir::dtype_size(op.input_types()[input_idx].dtype);
        }
    }
    return cost;
}

Cost aggregation_cost(const ir::Operator& op, const ir::JoinAggSpec& spec) {
    Cost cost;
    for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
        std::map<ir::Box, int64_t> copies;
        for (const ir::FunctionSpec& function : spec.functions) {
            ++copies[function.outputs[output_idx]];
        }
        const ir::DType dtype = op.output_types()[output_idx].dtype;
        // Partial log-sum-exp results move with their statistics (ir::block_bytes).
        const bool stats = ir::carries_stats(spec.aggregations[output_idx]);
        for (const auto& [box, count] : copies) {
            cost.elements.aggregation += static_cast<double>((count - 1) * box.volume());
            cost.bytes.aggregation +=
                static_cast<double>((count - 1) * ir::block_bytes(box, dtype, stats));
        }
    }
    return cost;
}

Cost repartition_cost(const ir::TensorType& input, const ir::Tiling& consumer_blocks,
                      const ir::Tiling& producer_tiling) {
    Cost cost;
    if (consumer_blocks != producer_tiling) {
        cost.elements.repartition = static_cast<double>(input.elements());
        cost.bytes.repartition = static_cast<double>(input.bytes());
    }
    return cost;
}

} // namespace einsummable::logical
