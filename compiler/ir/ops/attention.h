#pragma once

#include <vector>

#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Scaled dot-product self-attention with grouped-query heads over packed sequences.
// Inputs q [sequence, heads_q, d_head], k [sequence, heads_kv, d_head],
// v [sequence, heads_kv, d_v]; output [sequence, heads_q, d_v]. heads_q = g·heads_kv and query
// head h reads kv head h / g. Attributes: causal (default false), sequence_ends (default one
// sequence), scale (default 1/sqrt(d_head)). Query t attends to keys of its own sequence
// (and only keys <= t when causal).
//
// Shardable indices: `sequence`, cut only at sequence ends, and `heads_kv` at any position;
// heads_q follows heads_kv (kv heads [m0, m1) project queries onto [g·m0, g·m1)) and is never
// split alone. The reference is flash-style: keys in tiles with an online softmax, so the score
// matrix is never whole in memory.
class Attention final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    absl::string_view kind() const override { return "attention"; }
    std::vector<ShardableIndex> shardable_indices() const override;
    double flops(const FunctionSpec& function) const override;

    int64_t group_size() const { return group_size_; }
    bool causal() const { return causal_; }
    const std::vector<int64_t>& sequence_ends() const { return sequence_ends_; }

    // Whether `function` has the block layout this operator's specs produce (layout()): q, k, v
    // and the output on one sequence interval, kv heads [m0, m1) with query heads
    // [g·m0, g·m1), whole head dimensions. Every kernel checks this before reading blocks.
    bool has_spec_layout(const FunctionSpec& function) const;

    static constexpr int64_t kKeyTile = 32; // keys per tile of the flash-style reference

protected:
    SpecLayout layout() const override;
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;

private:
    Attention(Attributes attributes, std::vector<TensorType> inputs, TensorType output, bool causal,
              std::vector<int64_t> sequence_ends, double scale);
    // Keys query `position` attends to, within the block rows [block.lower, block.upper).
    Interval key_range(int64_t position, const Interval& block) const;

    int64_t group_size_;
    bool causal_;
    std::vector<int64_t> sequence_ends_;
    double scale_;
};

} // namespace einsummable::ir
