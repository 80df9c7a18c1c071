#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Scaled dot-product self-attention with grouped-query heads over packed sequences.
// Inputs q [sequence, heads_q, d_head], k [sequence, heads_kv, d_head],
// v [sequence, heads_kv, d_v]; output [sequence, heads_q, d_v]. heads_q = g·heads_kv and query
// head h reads kv head h / g. Attributes: causal (default false), sequence_ends (default one
// sequence), scale (default 1/sqrt(d_head)). Query t attends to keys of its own sequence
// (and only keys <= t when causal).
//
// Shardable indices, each cut at any position: 0 `sequence` — the query rows (q's and the
// output's dimension 0); 1 `heads_kv` — heads_q follows it (kv heads [m0, m1) project queries
// onto [g·m0, g·m1)) and is never split alone; 2 `keys` — the key rows (k's and v's dimension
// 0), a contracted index like matmul's k. Positions are absolute (the blocks' boxes), so a cut
// may fall inside a packed sequence. A function over a block of keys writes a partial output,
// normalised over those keys, and the copies of an output box combine by the log-sum-exp ⊕
// (AggOp::log_sum_exp, partial_block.h). The spec leaves out the (query block, key block)
// combinations with no key any of the queries attends to: wholly above the causal diagonal, or
// in other sequences. The reference is flash-style: keys in tiles with an online softmax, so
// the score matrix is never whole in memory.
class Attention final : public Operator {
public:
    static absl::StatusOr<OperatorPtr> make(const Attributes& attributes,
                                            std::vector<TensorType> inputs);

    static constexpr absl::string_view kKind = "attention";
    absl::string_view kind() const override { return kKind; }
    // A fused attention kernel.
    KernelClass kernel_class() const override { return KernelClass::attention; }
    std::vector<ShardableIndex> shardable_indices() const override;
    // sequence: token; heads_kv: head; keys: context (each query reads other tokens' keys).
    std::vector<IndexRole> index_roles(const OperandRoles& operands) const override;
    IntervalRequest refine_request(IntervalRequest request) const override;
    double flops(const FunctionSpec& function) const override;
    // The (query, key) pairs that interact between the positions `queries` and the keys `keys`
    // (query t reads the keys of its sequence up to t when causal, all of them otherwise), in
    // closed form per sequence: flops() counts them for every function spec the planner prices.
    double interacting_pairs(const Interval& queries, const Interval& keys) const;

    int64_t group_size() const { return group_size_; }
    bool causal() const { return causal_; }
    const std::vector<int64_t>& sequence_ends() const { return sequence_ends_; }

    // Whether `function` has the block layout this operator's specs produce (layout()): q and
    // the output on one query interval, k and v on one key interval, kv heads [m0, m1) with
    // query heads [g·m0, g·m1), whole head dimensions. Every kernel checks this before reading
    // blocks.
    bool has_spec_layout(const FunctionSpec& function) const;
    // Whether `function` (with the spec layout) is a block of whole sequences over its own
    // keys: q's rows start and end at sequence ends, and k's rows are q's. Kernels that cannot
    // take a block cut inside a sequence or along the keys (cuDNN's fused attention) need this.
    bool holds_whole_sequences(const FunctionSpec& function) const;
    // OK when holds_whole_sequences(function); else InvalidArgument naming the blocks, for the
    // kernels that take only those (`kernels`, e.g. "cuDNN's fused attention").
    absl::Status require_whole_sequences(const FunctionSpec& function,
                                         absl::string_view kernels) const;
    // Whether some query of `queries` attends to some key of `keys` (causality and sequence
    // ends by absolute position): the spec lists a function for the pair exactly then.
    bool interacts(const Interval& queries, const Interval& keys) const;

    static constexpr int64_t kKeyTile = 32; // keys per tile of the flash-style reference

    // The partial result (partial_block.h: one log-sum-exp per row and query head) of queries
    // q over the keys and values k, v of one key interval (k's and v's dimension 0: any block
    // of keys, inside or across sequences), kv heads [m0, m1) for q's query heads
    // [g·m0, g·m1). Causality and sequence ends apply by absolute position.
    absl::StatusOr<PartialBlock> compute_partial(const HostTensor& q, const HostTensor& k,
                                                 const HostTensor& v) const;

protected:
    SpecLayout layout() const override;
    JoinAggSpec build_spec(const IntervalRequest& request) const override;
    // The partial's values: the output itself where the function holds all its queries' keys.
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const FunctionSpec& function) const override;
    absl::StatusOr<std::vector<PartialBlock>>
    compute_partials(absl::Span<const HostTensor> inputs,
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
