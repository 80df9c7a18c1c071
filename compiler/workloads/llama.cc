#include "compiler/workloads/llama.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/graph_builder.h"

namespace einsummable::workloads {

LlamaConfig LlamaConfig::single(int64_t tokens) {
    LlamaConfig config;
    config.sequence_lengths = {tokens};
    return config;
}

LlamaConfig LlamaConfig::batch(int64_t sequences, int64_t length) {
    LlamaConfig config;
    config.sequence_lengths.assign(static_cast<size_t>(std::max<int64_t>(sequences, 0)), length);
    return config;
}

int64_t LlamaConfig::tokens() const {
    int64_t total = 0;
    for (int64_t length : sequence_lengths) {
        total += length;
    }
    return total;
}

std::vector<int64_t> LlamaConfig::sequence_ends() const {
    std::vector<int64_t> ends;
    ends.reserve(sequence_lengths.size());
    int64_t end = 0;
    for (int64_t length : sequence_lengths) {
        end += length;
        ends.push_back(end);
    }
    return ends;
}

absl::Status LlamaConfig::validate() const {
    const std::pair<const char*, int64_t> sizes[] = {{"d_model", d_model},
                                                     {"heads_q", heads_q},
                                                     {"heads_kv", heads_kv},
                                                     {"d_head", d_head},
                                                     {"d_ff", d_ff}};
    for (const auto& [name, size] : sizes) {
        if (size <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("llama config: ", name, " is ", size, "; it must be positive"));
        }
    }
    if (heads_q % heads_kv != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama config: heads_q (", heads_q, ") is not a multiple of heads_kv (",
                         heads_kv, "), as grouped-query attention needs"));
    }
    if (d_head % 2 != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "llama config: d_head (", d_head, ") is odd; RoPE rotates two halves of each head"));
    }
    int64_t product = 0;
    if (!checked_multiply(heads_q, d_head, &product)) {
        return absl::InvalidArgumentError(absl::StrCat("llama config: heads_q · d_head (", heads_q,
                                                       " · ", d_head, ") overflows int64"));
    }
    if (!(rope_theta > 0.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama config: rope_theta is ", rope_theta, "; it must be > 0"));
    }
    if (!(eps >= 0.0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama config: eps is ", eps, "; it must be >= 0"));
    }
    if (sequence_lengths.empty()) {
        return absl::InvalidArgumentError(
            "llama config: sequence_lengths is empty; a block needs at least one sequence");
    }
    int64_t total = 0;
    for (size_t idx = 0; idx < sequence_lengths.size(); ++idx) {
        const int64_t length = sequence_lengths[idx];
        if (length <= 0) {
            return absl::InvalidArgumentError(absl::StrCat("llama config: sequence ", idx,
                                                           " has length ", length,
                                                           "; lengths must be positive"));
        }
        if (__builtin_add_overflow(total, length, &total)) {
            return absl::InvalidArgumentError(
                "llama config: the total number of tokens overflows int64");
        }
    }
    return absl::OkStatus();
}

namespace {

// The run-time inputs and caches of a decode step that writes its keys and values into the
// caches in place (llama_decode_step).
struct InPlaceCaches {
    ir::TensorId positions;   // [tokens] i32: RoPE's positions
    ir::TensorId slots;       // [tokens] i32: the cache rows the step's keys go to
    ir::TensorId key_lengths; // [sequences] i32: each cache's fill after the step
    ir::TensorId k_cache;
    ir::TensorId v_cache;
};

// Adds one block reading `x` [tokens, d_model]; every name starts with `prefix`. Returns y.
// With `cache_keys` > 0 it is a decode step (llama_decode): attention reads the resident
// caches of cache_keys keys per sequence, and the step's keys and values are saved; with
// `in_place` too, they are written into in_place's caches and attention reads those up to
// their run-time fills (llama_decode_step).

ir::TensorId add_block(GraphBuilder& b, const LlamaConfig& config, const std::string& prefix,
                       ir::TensorId x, int64_t cache_keys = 0,
                       const InPlaceCaches* in_place = nullptr) {
    const ir::DType dtype = config.dtype;
    const std::vector<int64_t> ends = config.sequence_ends();
    const ir::Dim d{"d_model", config.d_model}, f{"d_ff", config.d_ff},
        q_out{"q_out", config.q_out()}, kv_out{"kv_out", config.kv_out()};
    auto name = [&](absl::string_view base) { return absl::StrCat(prefix, base); };

    const ir::TensorId attn_norm = b.weight(name("attn_norm"), dtype, {d});
    const ir::TensorId wq = b.weight(name("wq"), dtype, {d, q_out});
    const ir::TensorId wk = b.weight(name("wk"), dtype, {d, kv_out});
    const ir::TensorId wv = b.weight(name("wv"), dtype, {d, kv_out});
    const ir::TensorId wo = b.weight(name("wo"), dtype, {q_out, d});
    const ir::TensorId ffn_norm = b.weight(name("ffn_norm"), dtype, {d});
    const ir::TensorId w1 = b.weight(name("w1"), dtype, {d, f});
    const ir::TensorId w3 = b.weight(name("w3"), dtype, {d, f});
    const ir::TensorId w2 = b.weight(name("w2"), dtype, {f, d});

    const ir::Attributes norm = {{"eps", config.eps}};
    const ir::Attributes rope = {{"theta", config.rope_theta}, {"sequence_ends", ends}};
    auto split = [](int64_t heads, const char* heads_name) {
        return ir::Attributes{{"heads", heads},
                              {"heads_name", std::string(heads_name)},
                              {"head_dim_name", std::string("d_head")}};
    };

    // The block after attention: output projection, residual, SwiGLU feed-forward, residual.
    auto rest = [&](ir::TensorId attn) {
        const ir::TensorId attn_merged =
            b.op(name("attn_merged"), "merge_heads", {{"dim_name", std::string("q_out")}}, {attn});
        const ir::TensorId attn_out = b.einsum(name("attn_out"), "ij,jk->ik", {attn_merged, wo});
        const ir::TensorId h = b.einsum(name("h"), "ij,ij->ij", {x, attn_out}, "add");

        // SwiGLU feed-forward half.
        const ir::TensorId ffn_in = b.op(name("ffn_in"), "rmsnorm", norm, {h, ffn_norm});
        const ir::TensorId gate = b.einsum(name("gate"), "ij,jk->ik", {ffn_in, w1});
        const ir::TensorId up = b.einsum(name("up"), "ij,jk->ik", {ffn_in, w3});
        const ir::TensorId gate_silu = b.einsum(name("gate_silu"), "ij->ij", {gate}, "silu");
        const ir::TensorId ffn_hidden =
            b.einsum(name("ffn_hidden"), "ij,ij->ij", {gate_silu, up}, "mul");
        const ir::TensorId ffn_out = b.einsum(name("ffn_out"), "ij,jk->ik", {ffn_hidden, w2});
        return b.einsum(name("y"), "ij,ij->ij", {h, ffn_out}, "add");
    };

    // Attention half.
    const ir::TensorId attn_in = b.op(name("attn_in"), "rmsnorm", norm, {x, attn_norm});
    const ir::TensorId q = b.einsum(name("q"), "ij,jk->ik", {attn_in, wq});
    const ir::TensorId k = b.einsum(name("k"), "ij,jk->ik", {attn_in, wk});
    const ir::TensorId v = b.einsum(name("v"), "ij,jk->ik", {attn_in, wv});
    const ir::TensorId q_heads =
        b.op(name("q_heads"), "split_heads", split(config.heads_q, "heads_q"), {q});
    const ir::TensorId k_heads =
        b.op(name("k_heads"), "split_heads", split(config.heads_kv, "heads_kv"), {k});
    const ir::TensorId v_heads =
        b.op(name("v_heads"), "split_heads", split(config.heads_kv, "heads_kv"), {v});
    std::vector<int64_t> key_ends;
    for (int64_t s = 1; cache_keys > 0 && s <= static_cast<int64_t>(ends.size()); ++s) {
        key_ends.push_back(s * cache_keys);
    }
    if (in_place != nullptr) {
        // RoPE at run-time positions; the step's keys and values written into the caches.
        const ir::Attributes at_positions = {{"theta", config.rope_theta}};
        const ir::TensorId q_rope =
            b.op(name("q_rope"), "rope", at_positions, {q_heads, in_place->positions});
        const ir::TensorId k_rope =
            b.op(name("k_rope"), "rope", at_positions, {k_heads, in_place->positions});
        const ir::TensorId k_written =
            b.op(name("k_written"), "write_rows", {}, {in_place->k_cache, k_rope, in_place->slots});
        const ir::TensorId v_written = b.op(name("v_written"), "write_rows", {},
                                            {in_place->v_cache, v_heads, in_place->slots});
        return rest(b.op(name("attn"), "attention",
                         {{"causal", true}, {"sequence_ends", ends}, {"key_ends", key_ends}},
                         {q_rope, k_written, v_written, in_place->key_lengths}));
    }
    const ir::TensorId q_rope = b.op(name("q_rope"), "rope", rope, {q_heads});
    const ir::TensorId k_rope = b.op(name("k_rope"), "rope", rope, {k_heads});
    ir::TensorId attn = 0;
    if (cache_keys == 0) {
        attn = b.op(name("attn"), "attention", {{"causal", true}, {"sequence_ends", ends}},
                    {q_rope, k_rope, v_heads});
    } else {
        const int64_t sequences = static_cast<int64_t>(ends.size());
        const std::vector<ir::Dim> cache_dims = {{"keys", sequences * cache_keys},
                                                 {"heads_kv", config.heads_kv},
                                                 {"d_head", config.d_head}};
        const ir::TensorId k_cache = b.weight(name("k_cache"), dtype, cache_dims);
        const ir::TensorId v_cache = b.weight(name("v_cache"), dtype, cache_dims);
        attn = b.op(name("attn"), "attention",
                    {{"causal", true}, {"sequence_ends", ends}, {"key_ends", key_ends}},
                    {q_rope, k_cache, v_cache});
        b.save(k_rope);
        b.save(v_heads);
    }
    return rest(attn);
}

absl::StatusOr<ir::Graph> build(const LlamaConfig& config, int blocks, bool prefixed,
                                const char* workload) {
    EINSUMMABLE_RETURN_IF_ERROR(config.validate()); // "llama config: ..." names the field
    if (blocks < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat(workload, ": blocks is ", blocks, "; a stack needs at least one"));
    }
    GraphBuilder b(workload);
    ir::TensorId x =
        b.input("x", config.dtype, {{"tokens", config.tokens()}, {"d_model", config.d_model}});
    for (int block = 0; block < blocks; ++block) {
        x = add_block(b, config, prefixed ? absl::StrCat("b", block, ".") : std::string(), x);
    }
    b.save(x);
    return std::move(b).finish();
}

} // namespace

absl::StatusOr<ir::Graph> llama_decode(const LlamaConfig& config, int64_t cache_keys) {
    EINSUMMABLE_RETURN_IF_ERROR(config.validate());
    if (cache_keys < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama-decode: cached is ", cache_keys, "; give at least 1 key"));
    }
    int64_t keys = 0;
    if (__builtin_mul_overflow(static_cast<int64_t>(config.sequence_lengths.size()), cache_keys,
                               &keys)) {
        return absl::InvalidArgumentError(
            "llama-decode: the cache's keys (sequences times cached) overflow int64");
    }
    GraphBuilder b("llama-decode");
    const ir::TensorId x =
        b.input("x", config.dtype, {{"tokens", config.tokens()}, {"d_model", config.d_model}});
    b.save(add_block(b, config, "", x, cache_keys));
    return std::move(b).finish();
}

absl::StatusOr<ir::Graph> llama_decode_step(const LlamaConfig& config, int64_t capacity) {
    EINSUMMABLE_RETURN_IF_ERROR(config.validate());
    if (capacity < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("llama-decode-step: capacity is ", capacity, "; give at least 1 key"));
    }
    for (size_t s = 0; s < config.sequence_lengths.size(); ++s) {
        if (config.sequence_lengths[s] > capacity) {
            return absl::InvalidArgumentError(
                absl::StrCat("llama-decode-step: sequence ", s, " has ", config.sequence_lengths[s],
                             " new tokens, more than the capacity of ", capacity));
        }
    }
    const auto sequences = static_cast<int64_t>(config.sequence_lengths.size());
    int64_t keys = 0;
    if (__builtin_mul_overflow(sequences, capacity, &keys)) {
        return absl::InvalidArgumentError(
            "llama-decode-step: the cache's keys (sequences times capacity) overflow int64");
    }
    GraphBuilder b("llama-decode-step");
    const ir::DType dtype = config.dtype;
    const ir::Dim tokens{"tokens", config.tokens()};
    const ir::Dim d{"d_model", config.d_model};
    const ir::TensorId x = b.input("x", dtype, {tokens, d});
    const ir::TensorId positions = b.input("positions", ir::DType::i32, {tokens});
    const ir::TensorId slots = b.input("slots", ir::DType::i32, {tokens});
    const ir::TensorId key_lengths =
        b.input("key_lengths", ir::DType::i32, {{"sequences", sequences}});
    const std::vector<ir::Dim> cache_dims = {
        {"keys", keys}, {"heads_kv", config.heads_kv}, {"d_head", config.d_head}};
    const ir::TensorId k_cache = b.input("k_cache", dtype, cache_dims);
    const ir::TensorId v_cache = b.input("v_cache", dtype, cache_dims);

    const InPlaceCaches caches{positions, slots, key_lengths, k_cache, v_cache};
    b.save(add_block(b, config, "", x, capacity, &caches));
    return std::move(b).finish();
}

absl::StatusOr<ir::Graph> llama_block(const LlamaConfig& config) {
    return build(config, 1, /*prefixed=*/false, "llama-block");
}

absl::StatusOr<ir::Graph> llama_stack(const LlamaConfig& config, int blocks) {
    return build(config, blocks, /*prefixed=*/true, "llama-stack");
}

} // namespace einsummable::workloads
