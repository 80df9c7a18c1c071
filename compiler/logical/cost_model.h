#pragma once

#include <string>

#include "compiler/ir/box.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"

namespace einsummable::logical {

// The three terms of the paper's cost (section 4.3), counted in elements or in bytes.
struct CostBreakdown {
    double repartition = 0.0;
    double join = 0.0;
    double aggregation = 0.0;

    double total() const { return repartition + join + aggregation; }
    CostBreakdown& operator+=(const CostBreakdown& other);
    friend bool operator==(const CostBreakdown&, const CostBreakdown&) = default;
};

// A cost in both units: elements (the paper's unit) and bytes (elements times the dtype size of
// the tensor they belong to; what the optimiser minimises).
struct Cost {
    CostBreakdown elements;
    CostBreakdown bytes;
    Cost& operator+=(const Cost& other);
};

// A tiling as a canonical (sorted, duplicate-free) list of boxes, so equal tilings compare equal.
ir::Tiling canonical_tiling(ir::Tiling boxes);

// Join: the sizes of every input projection of every function spec.
Cost join_cost(const ir::Operator& op, const ir::JoinAggSpec& spec);
// Aggregation: (m - 1)·|box| for each distinct output box that appears m times; in bytes, a
// log-sum-exp partial counts its statistics too (ir::block_bytes).
Cost aggregation_cost(const ir::Operator& op, const ir::JoinAggSpec& spec);
// Repartition of one input: the whole input's size when the blocks the spec reads
// (`consumer_blocks`, canonical) differ from the producer's output tiling (canonical).
Cost repartition_cost(const ir::TensorType& input, const ir::Tiling& consumer_blocks,
                      const ir::Tiling& producer_tiling);

} // namespace einsummable::logical
