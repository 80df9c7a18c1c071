#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Attention over one block of keys, the partial result the log-sum-exp ⊕ combines (issue 18:
// splitting the key/value sequence). For every query row and query head of output's box: the
// output normalised over the block's keys only, and the log of the sum over those keys of
// exp(scaled score); -inf (and an output of 0) where the block holds no key the query attends
// to. Partials over disjoint key blocks combine, in any order, into the partial over their
// union (combine_attention_partials); over all of a query's keys it is attention's output.
struct AttentionPartial {
    HostTensor output;               // [rows, heads_q, d_v]
    std::vector<double> log_sum_exp; // one per (row, query head) of output, row-major
};

// a ⊕ b: each output rescaled by exp(its log-sum-exp − the combined one), then added; the
// combined log-sum-exp is log(exp(a) + exp(b)). Commutative and associative (up to rounding),
// with the partial of no keys (all -inf) as identity. InvalidArgument when the boxes differ.
absl::StatusOr<AttentionPartial> combine_attention_partials(const AttentionPartial& a,
                                                            const AttentionPartial& b);

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

    // The partial result of queries q over the keys and values k, v of one sequence interval
    // (k's and v's dimension 0, which may differ from q's: any block of keys, inside or across
    // sequences), kv heads [m0, m1) for q's query heads [g·m0, g·m1). Causality and sequence
    // ends apply by absolute position. compute() is this with the keys of q's own rows.
    absl::StatusOr<AttentionPartial> compute_partial(const HostTensor& q, const HostTensor& k,
                                                     const HostTensor& v) const;

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
