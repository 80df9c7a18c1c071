#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace einsummable::workloads {

// A LLaMA-scale transformer block (docs/workloads.md): by default LLaMA-3-8B's shapes in fp16.
// Sequences are packed end to end along the `tokens` dimension; attention never crosses a
// sequence end and RoPE restarts positions at each sequence start.
struct LlamaConfig {
    int64_t d_model = 4096;
    int64_t heads_q = 32;
    int64_t heads_kv = 8; // grouped-query attention: query heads g·m .. g·m+g-1 read kv head m
    int64_t d_head = 128;
    int64_t d_ff = 14336; // SwiGLU hidden width
    ir::DType dtype = ir::DType::f16;
    double rope_theta = 10000.0;
    double eps = 1e-5; // RMSNorm
    // Lengths of the packed sequences, in order; at least one.
    std::vector<int64_t> sequence_lengths;

    // One sequence of `tokens`.
    static LlamaConfig single(int64_t tokens);
    // `sequences` sequences of `length` tokens each.
    static LlamaConfig batch(int64_t sequences, int64_t length);

    // Sum of the sequence lengths (callers check validate() first: it may overflow otherwise).
    int64_t tokens() const;
    // Cumulative lengths: the exclusive end of every sequence, the last one tokens().
    std::vector<int64_t> sequence_ends() const;
    // heads_q · d_head and heads_kv · d_head: the widths of the Q and of the K, V projections
    // (valid after validate()).
    int64_t q_out() const { return heads_q * d_head; }
    int64_t kv_out() const { return heads_kv * d_head; }

    // InvalidArgument naming the field when a size is not positive, heads_q is not a multiple of
    // heads_kv, d_head is odd (RoPE rotates halves), theta <= 0, eps < 0, there is no sequence,
    // or a derived size overflows int64.
    absl::Status validate() const;
};

// One block, input x [tokens, d_model], saved output y [tokens, d_model]:
//   attn_in   = rmsnorm(x, attn_norm)                         attn_norm [d_model]
//   q, k, v   = attn_in · wq, · wk, · wv                       wq [d_model, q_out],
//                                                              wk, wv [d_model, kv_out]
//   q_heads   = split_heads(q)  [tokens, heads_q, d_head]      (k_heads, v_heads: heads_kv)
//   q_rope, k_rope = rope(q_heads), rope(k_heads)              (theta, sequence_ends)
//   attn      = attention(q_rope, k_rope, v_heads)             (causal, sequence_ends)
//   attn_merged = merge_heads(attn)  [tokens, q_out]
//   attn_out  = attn_merged · wo                               wo [q_out, d_model]
//   h         = x + attn_out
//   ffn_in    = rmsnorm(h, ffn_norm)                           ffn_norm [d_model]
//   gate, up  = ffn_in · w1, ffn_in · w3  [tokens, d_ff]       w1, w3 [d_model, d_ff]
//   gate_silu = silu(gate);  ffn_hidden = gate_silu * up
//   ffn_out   = ffn_hidden · w2                                w2 [d_ff, d_model]
//   y         = h + ffn_out
// Products are einsum ij,jk->ik; the residual adds einsum ij,ij->ij with join add. The norm
// scales and projections are marked weights (ir::GraphTensor::weight), x is the activations.
absl::StatusOr<ir::Graph> llama_block(const LlamaConfig& config);

// One decode step of one block for a batch of sequences (config.sequence_lengths: the step's
// new tokens per sequence, usually 1 each), each with `cache_keys` keys in the key/value cache:
// the block above, except that attention reads the caches k_cache, v_cache
// [sequences · cache_keys, heads_kv, d_head] (weights: resident state the plan lays out, like
// the parameters) with key_ends every cache_keys keys and bottom-right causal masking, and the
// step's keys and values (k_rope, v_heads) are saved beside y, for the generation loop to write
// into the caches. A model of a step's work and data for the planners (bench/decode): the
// caches are taken to hold the step's own slot already, and RoPE counts each new token from
// its sequence's start, not from its cache's end. InvalidArgument for cache_keys < 1.
absl::StatusOr<ir::Graph> llama_decode(const LlamaConfig& config, int64_t cache_keys);

// The decode step a generation loop runs (docs/runtime.md "Resident state"): llama_decode's
// block, except that the step's keys and values are written into the caches in place —
// k_cache, v_cache [sequences · capacity, heads_kv, d_head] are plain inputs for the caller to
// make resident (they become states), written by write_rows at `slots` [tokens] (i32) — and
// attention reads the written caches up to `key_lengths` [sequences] (i32: each sequence's
// fill after the step), with RoPE at `positions` [tokens] (i32). Saved: y. InvalidArgument
// for capacity < 1 or a sequence with more new tokens than capacity.
absl::StatusOr<ir::Graph> llama_decode_step(const LlamaConfig& config, int64_t capacity);

// `blocks` blocks chained: block i's tensors and weights are named "b{i}." + the names above,
// block 0 reads x, block i > 0 reads b{i-1}.y; b{blocks-1}.y is saved.
absl::StatusOr<ir::Graph> llama_stack(const LlamaConfig& config, int blocks);

} // namespace einsummable::workloads
