#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Scaled dot-product attention with grouped-query heads over packed sequences.
// Inputs q [sequence, heads_q, d_head], k [keys, heads_kv, d_head], v [keys, heads_kv, d_v];
// output [sequence, heads_q, d_v]. heads_q = g·heads_kv and query head h reads kv head h / g.
// Attributes: causal (default false), sequence_ends (default one sequence), key_ends (default:
// none), scale (default 1/sqrt(d_head)).
//
// Without key_ends it is self-attention: k and v have q's rows, and query t attends to the keys
// of its own sequence (only keys <= t when causal). With key_ends (one end per sequence, the
// keys of sequence s are rows [key_ends[s-1], key_ends[s]) of k and v) queries and keys have
// lengths of their own: a decode step's few new queries against a sequence's cache. Causal
// masking is then bottom-right: the sequence's last query sees all of its keys and each earlier
// query one key fewer, so query t of sequence s sees its keys up to t + key_ends[s] −
// sequence_ends[s] (causal needs at least as many keys as queries in every sequence). key_ends
// may end before k's last row: the rows after the last region are read by no query (a decode
// step of the first slots of a larger cache).
//
// With key_ends, a fourth input `key_lengths` (i32 or i64 [sequences]) may give each sequence's
// filled keys at run time: sequence s reads only the first key_lengths[s] keys of its region
// [key_ends[s-1], key_ends[s]), bottom-right causal from the fill's end, and the rest of the
// region weighs nothing. key_ends are then capacities: a plan made for them serves every fill
// (a decode step's caches grow, its plan stays). A length outside [0, capacity], or under the
// sequence's queries when causal, is a request error naming the sequence (check_input_values).
// The planner prices the capacities.
//
// Paged (attribute page_size, and a fifth input `page_table`, i32 or i64 [sequences,
// pages_per_sequence]; key_lengths required, key_ends not given): k and v are a pool of pages,
// [pages · page_size, heads_kv, d], shared by the sequences. Sequence s's key j (j <
// key_lengths[s]) is row page_table[s][j / page_size] · page_size + j mod page_size; its capacity
// is pages_per_sequence · page_size. Masking is as with key_lengths, by the key's place j in its
// sequence. Which rows a sequence reads is known only at run time, so the spec keeps every
// (query block, key block) pair: a function over key rows [a, b) reads the keys of its queries
// whose rows lie there, in sequence order, and a block holding none of them gives the ⊕'s
// identity. A table entry outside [0, pages) is a request error naming it (check_input_values);
// entries past a sequence's fill are read by no one but must be in range too. Two sequences may
// share a page (a shared prefix): attention only reads.
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
    // Inputs 3 and 4, the optional key_lengths and page_table, hold integers.
    static constexpr bool kTakesIntegers = true;
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
    // Whether the keys have ends of their own (key_ends given, or pages: then key_ends() are the
    // capacities laid end to end); else key_ends() is sequence_ends().
    bool has_key_ends() const { return has_key_ends_; }
    const std::vector<int64_t>& key_ends() const { return key_ends_; }
    // Whether the sequences' filled keys come at run time (input 3, key_lengths).
    bool has_key_lengths() const { return input_types().size() >= 4; }
    // Whether k and v are a pool of pages read through input 4, page_table (page_size > 0).
    bool has_pages() const { return page_size_ > 0; }
    int64_t page_size() const { return page_size_; }
    int64_t pages_per_sequence() const { return has_pages() ? input_types()[4].dims[1].size : 0; }
    // The pool's pages (k's rows / page_size).
    int64_t pages() const { return has_pages() ? input_types()[1].dims[0].size / page_size_ : 0; }
    // key_lengths outside [0, capacity], or under a causal sequence's queries, and page_table
    // entries outside [0, pages), are request errors naming the sequence (and page).
    absl::Status check_input_values(int input, absl::Span<const std::byte> bytes) const override;

    // The queries of `rows` that lie in one sequence, with the keys they read: query t of
    // `queries` sees the keys [key_begin, causal ? t + causal_shift + 1 : key_end) (absolute key
    // rows; with pages, places in the sequences laid end to end at their capacities, which
    // key_runs maps to rows). causal_shift is the sequence's key end minus its query end (0
    // without key_ends).
    struct Segment {
        Interval queries;
        int64_t sequence = 0;
        int64_t key_begin = 0;
        int64_t key_end = 0;
        int64_t causal_shift = 0;
        // The keys query t (in `queries`) sees, clipped to the key rows `block`.
        Interval keys_of(int64_t t, bool causal, const Interval& block) const;
    };
    // The segments of `rows` (rows inside [0, queries)), in order. `fills` (one per sequence,
    // key_lengths' values) ends each sequence's keys at its fill instead of its key end.
    std::vector<Segment> segments(const Interval& rows, absl::Span<const int64_t> fills = {}) const;

    // Keys of a segment, `place` [p0, p1) in its key coordinates (Segment::keys_of), that lie in
    // the key rows `block`, in order, as runs of consecutive rows: keys [place_begin, place_end)
    // are rows [row_begin, row_begin + place_end − place_begin). Without pages one run (or none);
    // with pages one per page piece inside the block, neighbours merged when their rows follow
    // each other. `page_table` is the table's values, [sequences · pages_per_sequence].
    struct KeyRun {
        int64_t place_begin = 0;
        int64_t place_end = 0;
        int64_t row_begin = 0;
    };
    std::vector<KeyRun> key_runs(const Segment& segment, const Interval& place,
                                 const Interval& block,
                                 absl::Span<const int64_t> page_table = {}) const;

    // Whether `function` has the block layout this operator's specs produce (layout()): q and
    // the output on one query interval, k and v on one key interval, kv heads [m0, m1) with
    // query heads [g·m0, g·m1), whole head dimensions. Every kernel checks this before reading
    // blocks.
    bool has_spec_layout(const FunctionSpec& function) const;
    // Whether `function` (with the spec layout) is a block of whole sequences over their own
    // keys: q's rows start and end at sequence ends, and k's rows are those sequences' keys
    // (q's rows without key_ends). Kernels that cannot
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
    // With pages, `page_table` holds the table's values.
    absl::StatusOr<PartialBlock> compute_partial(const HostTensor& q, const HostTensor& k,
                                                 const HostTensor& v,
                                                 absl::Span<const int64_t> fills = {},
                                                 absl::Span<const int64_t> page_table = {}) const;

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
              std::vector<int64_t> sequence_ends, std::vector<int64_t> key_ends, bool has_key_ends,
              double scale, int64_t page_size);
    // The segment of the sequence that holds query `position`, its queries clipped to `rows`
    // (its keys ended by `fills`, when given).
    Segment segment_at(int64_t position, const Interval& rows,
                       absl::Span<const int64_t> fills = {}) const;
    // The keys of the sequences that the queries `rows` lie in (their hull; empty for no rows).
    Interval key_hull(const Interval& rows) const;

    int64_t group_size_;
    bool causal_;
    std::vector<int64_t> sequence_ends_;
    std::vector<int64_t> key_ends_; // sequence_ends_ without key_ends
    bool has_key_ends_;
    double scale_;
    int64_t page_size_; // 0: no pages
};

} // namespace einsummable::ir
