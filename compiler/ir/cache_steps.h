#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace einsummable::ir {

// The graphs a generation loop runs over key/value caches (docs/generation.md), derived from a
// model's forward graph — any graph whose attention nodes are causal self-attention over packed
// sequences (q, k, v; sequence_ends; no key_ends) and whose RoPE nodes take their positions from
// sequence_ends, as the converter's and the workloads' LLaMA graphs are.
//
// Every attention node `a` gets two caches, graph inputs `a.k_cache` and `a.v_cache`
// [pages · page_size, k's trailing dimensions] of k's and v's dtypes: a pool of pages of
// page_size rows that the sequences share, a sequence's keys on the pages its row of the
// decode step's `page_table` names (attention's paged mode, docs/operators.md). The caller
// makes them resident (runtime::CompileOptions::resident_inputs), so that write_rows updates
// them in place and they outlive the step (docs/runtime.md "Resident state").
struct CacheShape {
    int64_t slots = 1;     // the most sequences a step holds
    int64_t capacity = 1;  // the most keys a sequence holds: a multiple of page_size
    int64_t page_size = 0; // 0: capacity (a page per sequence)
    int64_t pages = 0;     // 0: slots · capacity / page_size (every sequence full at once)
    int64_t resolved_page_size() const { return page_size > 0 ? page_size : capacity; }
    int64_t resolved_pages() const {
        return pages > 0 ? pages : slots * capacity / resolved_page_size();
    }
    int64_t pages_per_sequence() const { return capacity / resolved_page_size(); }
};

enum class CacheStep {
    // The prompts: the forward graph unchanged, plus each attention's keys and values written
    // into its caches at the new input `slots` [tokens] (i32: the cache row of each token, the
    // caller's mapping of its place through its pages).
    // Attention still reads the prompts' own keys (a prompt sees only itself).
    prefill,
    // A step of at most `slots` sequences, each continuing its own. Each attention's keys and
    // values are written at `slots` as in prefill, and attention reads the written caches through
    // the new input `page_table` [sequences, capacity / page_size] (i32: each sequence's pages in
    // order), up to the new input `key_lengths` [sequences] (i32: each sequence's fill after the
    // step), causal from the fill's end; RoPE reads the new input `positions` [tokens] (i32:
    // each token's position in its sequence) instead of sequence_ends.
    decode,
};

// `graph` with caches for `step` (above); its weights stay weights and its saved tensors stay
// saved. InvalidArgument naming the node when an attention node is not causal self-attention
// (key_ends or key_lengths already), or a RoPE node already reads positions; naming the input
// when a name the step adds is taken; for decode when the graph's sequences are more than `slots`
// or a sequence is longer than `capacity`; for a shape below 1 or a capacity that is not whole
// pages.
absl::StatusOr<Graph> cache_step_graph(const Graph& graph, CacheStep step,
                                       const CacheShape& caches);

// The caches of a step graph: its inputs an operator updates in place (in_place_input: write_rows'
// state), in graph order.
std::vector<std::string> cache_inputs(const Graph& graph);

// The saved outputs add_greedy_choice adds: per row of the logits, the id of its first largest
// logit (argmax, i64 [rows, 1]) and that logit (an einsum max, [rows] of the logits' dtype; NaN
// when the row holds NaN, which argmax ranks above every number, so the two agree).
struct GreedyChoice {
    std::string ids;
    std::string logits;
};
// `graph` with an argmax and a max of its saved output `logits` ([rows, vocab], floating-point)
// added and saved beside it, as "<logits>.greedy_ids" and "<logits>.greedy_logits": a step's greedy
// tokens without moving whole rows of logits off the devices (an argmax split by vocabulary
// combines one (value, index) pair per block and row, docs/operators.md "argmax").
// InvalidArgument naming `logits` when it is no saved tensor of that shape or a name is taken.
absl::StatusOr<GreedyChoice> add_greedy_choice(Graph& graph, const std::string& logits);

// `graph` with a top_k of its saved output `logits` ([rows, vocab], floating-point) added and
// saved beside it as "<logits>.top_k" (returned): per row its min(k, vocab, TopK::kMaxK) best
// (value, id) pairs, best first ([rows, k, 2] f32), so top-k sampling reads k logits per row
// instead of the row (a top_k split by vocabulary merges k pairs per block and row,
// docs/operators.md "top_k"). The same errors as add_greedy_choice; InvalidArgument for k < 1.
absl::StatusOr<std::string> add_top_k_choice(Graph& graph, const std::string& logits, int64_t k);

} // namespace einsummable::ir
