// f32 attention, flash-style: for each kv head and tile of query positions, the queries of the
// kv head's g query heads are packed into one matrix; key tiles are scored with one gemm
// (Q·Kᵀ), folded into a running maximum, denominator and weighted sum of values (online
// softmax), and the weighted sum advances with a second gemm (P·V). The score matrix of a
// whole sequence is never in memory. Semantics: compiler/ir/ops/attention.cc.
//
// The gemms are the library's (gemm.h), or in batch-invariant mode gemm_invariant's: a query
// tile starts where the block's rows start, so a request's rows fall in other tiles, at other
// places, when it is batched with others, and a library's result for a row may depend on its
// place in the tile (OpenBLAS's SSE3 kernels: the last rows of a tile).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/f32_ops.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_invariant.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/vector_math.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cpu {

namespace {

// Tiles: about kTileRows query rows (positions times the g query heads of a kv head) and as
// many keys as keep each gemm under kGemmSize multiply-adds, so a tile's scores stay in cache.
constexpr int64_t kTileRows = 64;
constexpr int64_t kGemmSize = int64_t{1} << 18;
constexpr int64_t kMinKeyTile = 16;
constexpr int64_t kMaxKeyTile = 256;

struct AttentionShape {
    int64_t group = 1;     // query heads per kv head
    int64_t heads_q = 0;   // query heads in the block
    int64_t heads_kv = 0;  // kv heads in the block
    int64_t head_dim = 0;  // d
    int64_t value_dim = 0; // d_v
    float scale = 1.0f;
    bool causal = false;
    int64_t query_tile = 1; // positions per query tile
    int64_t key_tile = kMinKeyTile;
};

// One tile of query positions [query_begin, query_begin + positions) — absolute, inside one
// packed sequence — for kv head `kv_head`, over the keys of its sequence that the block holds,
// `runs` of consecutive rows in key order (Attention::key_runs: one run without pages; masking
// is by the keys' places, causal per row, bottom-right by causal_shift). Rows of q and out count
// from q_lower, rows of k and v from k_lower.
struct TileArgs {
    const float* q;
    const float* k;
    const float* v;
    float* out;
    float* lse; // null: the caller wants no statistics
    int64_t q_lower;
    int64_t k_lower;
    int64_t kv_head;
    int64_t query_begin;
    int64_t positions;
    int64_t causal_shift; // a causal query t sees keys up to t + causal_shift
    absl::Span<const ir::Attention::KeyRun> runs;
};

// scores (rows × keys, dense) = scale · queries (rows × d, dense) · keysᵀ (key rows strided).
absl::Status score_gemm(int64_t rows, int64_t keys, int64_t d, float scale, const float* queries,
                        const float* key_rows, int64_t key_stride, float* scores) {
    if (!batch_invariant()) {
        return gemm_f32(false, true, static_cast<int>(rows), static_cast<int>(keys),
                        static_cast<int>(d), scale, queries, static_cast<int>(d), key_rows,
                        static_cast<int>(key_stride), 0.0f, scores, static_cast<int>(keys));
    }
    gemm_invariant(false, true, static_cast<int>(rows), static_cast<int>(keys), static_cast<int>(d),
                   queries, static_cast<int>(d), key_rows, static_cast<int>(key_stride), scores,
                   static_cast<int>(keys));
    for (int64_t i = 0; i < rows * keys; ++i) {
        scores[i] *= scale;
    }
    return absl::OkStatus();
}

// acc (rows × dv, dense) += weights (rows × keys, dense) · values (key rows strided).
absl::Status value_gemm(int64_t rows, int64_t keys, int64_t dv, const float* weights,
                        const float* value_rows, int64_t value_stride, float* acc) {
    if (!batch_invariant()) {
        return gemm_f32(false, false, static_cast<int>(rows), static_cast<int>(dv),
                        static_cast<int>(keys), 1.0f, weights, static_cast<int>(keys), value_rows,
                        static_cast<int>(value_stride), 1.0f, acc, static_cast<int>(dv));
    }
    float* product = scratch<float>(ScratchSlot::attention_values, rows * dv);
    gemm_invariant(false, false, static_cast<int>(rows), static_cast<int>(dv),
                   static_cast<int>(keys), weights, static_cast<int>(keys), value_rows,
                   static_cast<int>(value_stride), product, static_cast<int>(dv));
    for (int64_t i = 0; i < rows * dv; ++i) {
        acc[i] += product[i];
    }
    return absl::OkStatus();
}

// acc[r] += Σ weights[r][n]·v[n] over the keys whose weight is not 0: the P·V gemm's sum, except
// that a key of weight 0 (masked, or a -inf score) reads no value, so a NaN or infinity there
// stays out of the row (the gemm's 0·NaN is NaN). For blocks of v that hold one; slow. Each
// row's sum runs in key order whatever tile the row is in, so it is batch-invariant too.
void add_weighted_values(const float* weights, int64_t rows, int64_t keys, const float* v,
                         int64_t v_row_stride, int64_t dv, float* acc) {
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t n = 0; n < keys; ++n) {
            const float weight = weights[r * keys + n];
            if (weight != 0.0f) {
                for (int64_t c = 0; c < dv; ++c) {
                    acc[r * dv + c] += weight * v[n * v_row_stride + c];
                }
            }
        }
    }
}

// Whether `keys` rows of `dv` values (rows `stride` apart) are all finite.
bool tile_values_finite(const float* v, int64_t keys, int64_t dv, int64_t stride) {
    for (int64_t n = 0; n < keys; ++n) {
        if (!all_finite(v + n * stride, dv)) {
            return false;
        }
    }
    return true;
}

absl::Status attend_tile(const AttentionShape& shape, const TileArgs& args) {
    const int64_t g = shape.group;
    const int64_t d = shape.head_dim;
    const int64_t dv = shape.value_dim;
    const int64_t rows = args.positions * g; // row r: position r / g, query head r % g
    const int64_t q_row_stride = shape.heads_q * d;
    const int64_t k_row_stride = shape.heads_kv * d;
    const int64_t v_row_stride = shape.heads_kv * dv;

    float* queries = scratch<float>(ScratchSlot::attention_query, rows * std::max<int64_t>(d, 1));
    float* scores = scratch<float>(ScratchSlot::attention_scores, rows * shape.key_tile);
    float* acc = scratch<float>(ScratchSlot::attention_acc, rows * dv);
    float* stats = scratch<float>(ScratchSlot::attention_stats, 2 * rows);
    float* running_max = stats;
    float* denominator = stats + rows;

    // The g query heads of this kv head are adjacent in q, so each position is one copy.
    for (int64_t p = 0; p < args.positions && d > 0; ++p) {
        const int64_t row = args.query_begin + p - args.q_lower;
        std::memcpy(queries + p * g * d, args.q + row * q_row_stride + args.kv_head * g * d,
                    static_cast<size_t>(g * d) * sizeof(float));
    }
    std::fill(running_max, running_max + rows, -std::numeric_limits<float>::infinity());
    std::fill(denominator, denominator + rows, 0.0f);
    std::fill(acc, acc + rows * dv, 0.0f);

    const float* k_head = args.k + args.kv_head * d;
    const float* v_head = args.v + args.kv_head * dv;
    for (const ir::Attention::KeyRun& run : args.runs) {
        // key_begin is a place (for masking), key_row its row in k and v.
        for (int64_t key_begin = run.place_begin; key_begin < run.place_end;
             key_begin += shape.key_tile) {
            const int64_t keys = std::min(shape.key_tile, run.place_end - key_begin);
            const int64_t key_row = run.row_begin + (key_begin - run.place_begin) - args.k_lower;
            if (d > 0) {
                EINSUMMABLE_RETURN_IF_ERROR(score_gemm(rows, keys, d, shape.scale, queries,
                                                       k_head + key_row * k_row_stride,
                                                       k_row_stride, scores));
            } else {
                std::fill(scores, scores + rows * keys, 0.0f);
            }
            for (int64_t r = 0; r < rows; ++r) {
                float* row_scores = scores + r * keys;
                const int64_t position = args.query_begin + r / g + args.causal_shift;
                // Keys after the query (its shifted position) are masked when causal.
                const int64_t visible =
                    shape.causal ? std::clamp<int64_t>(position - key_begin + 1, 0, keys) : keys;
                if (visible == 0) {
                    std::fill(row_scores, row_scores + keys, 0.0f);
                    continue;
                }
                float tile_max = max_of(row_scores, visible);
                if (tile_max == -std::numeric_limits<float>::infinity()) {
                    // max_of skips NaN, which the weights' sum shows unless no score is above -inf:
                    // then look for one, so that the row is NaN, not empty (rare: only -inf or
                    // NaN).
                    for (int64_t c = 0; c < visible; ++c) {
                        tile_max = row_scores[c] != row_scores[c] ? row_scores[c] : tile_max;
                    }
                }
                // NaN sticks, so the row is NaN whatever its key tiles and blocks.
                const float new_max = scalar_math::max(running_max[r], tile_max);
                if (new_max == -std::numeric_limits<float>::infinity()) {
                    // Every score so far is -inf: no key has weight (exp(-inf - -inf) would be
                    // NaN).
                    std::fill(row_scores, row_scores + keys, 0.0f);
                    continue;
                }
                if (running_max[r] != new_max && denominator[r] != 0.0f) {
                    const float rescale = fast_exp(running_max[r] - new_max);
                    denominator[r] *= rescale;
                    float* acc_row = acc + r * dv;
                    for (int64_t c = 0; c < dv; ++c) {
                        acc_row[c] *= rescale;
                    }
                }
                for (int64_t c = 0; c < visible; ++c) {
                    row_scores[c] = fast_exp(row_scores[c] - new_max);
                }
                std::fill(row_scores + visible, row_scores + keys, 0.0f);
                denominator[r] += static_cast<float>(sum_of(row_scores, visible));
                running_max[r] = new_max;
            }
            // Decided per tile, from the tile's own keys of this kv head (all in the query's
            // sequence), so a request's bits do not depend on what it is batched with. Only the
            // keys read are scanned: a decode step's block of v is a whole cache, of which a step
            // reads its fills (a scan of the whole block cost more than the step's arithmetic).
            if (!tile_values_finite(v_head + key_row * v_row_stride, keys, dv, v_row_stride)) {
                add_weighted_values(scores, rows, keys, v_head + key_row * v_row_stride,
                                    v_row_stride, dv, acc);
                continue;
            }
            if (dv > 0) {
                EINSUMMABLE_RETURN_IF_ERROR(value_gemm(
                    rows, keys, dv, scores, v_head + key_row * v_row_stride, v_row_stride, acc));
            }
        }
    }

    for (int64_t r = 0; r < rows; ++r) {
        const int64_t row = args.query_begin + r / g - args.q_lower;
        const int64_t head = args.kv_head * g + r % g;
        const int64_t slot = row * shape.heads_q + head;
        float* out = args.out + slot * dv;
        const float* acc_row = acc + r * dv;
        const int64_t position = args.query_begin + r / g + args.causal_shift;
        // The runs are in key order, so the first holds the first key the row could see.
        const bool sees_keys =
            !args.runs.empty() && (!shape.causal || args.runs.front().place_begin <= position);
        if (denominator[r] == 0.0f) {
            // No key has weight: every score is -inf (the softmax's 0/0, NaN), or the block holds
            // no key the row sees (0 with statistics -inf: the ⊕'s identity). Both keep -inf
            // statistics, so that another block's keys outweigh them (Attention::compute_partial).
            std::fill(out, out + dv, sees_keys ? std::numeric_limits<float>::quiet_NaN() : 0.0f);
            if (args.lse != nullptr) {
                args.lse[slot] = -std::numeric_limits<float>::infinity();
            }
            continue;
        }
        // A NaN denominator (a NaN or +inf score) makes the row and its statistics NaN.
        const float inverse = 1.0f / denominator[r];
        for (int64_t c = 0; c < dv; ++c) {
            out[c] = acc_row[c] * inverse;
        }
        if (args.lse != nullptr) {
            args.lse[slot] = running_max[r] + std::log(denominator[r]);
        }
    }
    return absl::OkStatus();
}

absl::Status attention_f32(const ir::Attention& op, const ir::FunctionSpec& function,
                           F32Inputs inputs, float* output, float* lse) {
    const ir::Box& q = function.inputs[0];
    const ir::Box& k = function.inputs[1];
    const ir::Box& v = function.inputs[2];
    const ir::Box& out = function.outputs[0];
    const int64_t group = op.group_size();
    if (!op.has_spec_layout(function)) {
        return block_error(op, absl::StrCat("blocks q ", q.to_string(), ", k ", k.to_string(),
                                            ", v ", v.to_string(), " -> ", out.to_string(),
                                            " are not a function spec of this attention"));
    }
    if (out.volume() == 0) {
        return absl::OkStatus();
    }
    AttentionShape shape;
    shape.group = group;
    shape.heads_q = q[1].size();
    shape.heads_kv = k[1].size();
    shape.head_dim = q[2].size();
    shape.value_dim = v[2].size();
    shape.causal = op.causal();
    shape.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(q[2].size())));
    const auto& values = op.attributes().values();
    if (auto it = values.find("scale"); it != values.end()) {
        if (const double* scale = std::get_if<double>(&it->second)) {
            shape.scale = static_cast<float>(*scale);
        } else if (const int64_t* int_scale = std::get_if<int64_t>(&it->second)) {
            shape.scale = static_cast<float>(*int_scale);
        }
    }

    shape.query_tile = std::max<int64_t>(1, kTileRows / group);
    const int64_t width = std::max<int64_t>({shape.head_dim, shape.value_dim, 1});
    shape.key_tile = std::clamp<int64_t>(kGemmSize / (shape.query_tile * group * width),
                                         kMinKeyTile, kMaxKeyTile);

    // Segments: the parts of packed sequences inside the block's query rows. A query sees the
    // keys of its own sequence that the key block holds (Attention::Segment::keys_of).
    const ir::Interval rows = q[0];
    const ir::Interval keys = k[0];
    // Run-time fills of the key regions (key_lengths, converted to f32 like every operand:
    // exact, as the request's were checked against the regions before it ran).
    std::vector<int64_t> fills;
    if (op.has_key_lengths()) {
        const int64_t sequences = static_cast<int64_t>(op.sequence_ends().size());
        for (int64_t s = 0; s < sequences; ++s) {
            const float fill = inputs[3][s];
            const int64_t capacity = op.key_ends()[s] - (s == 0 ? 0 : op.key_ends()[s - 1]);
            if (!(fill >= 0.0f && fill <= static_cast<float>(capacity))) {
                return block_error(op, absl::StrCat("key_lengths[", s, "] = ", fill,
                                                    " is outside [0, ", capacity, "]"));
            }
            fills.push_back(static_cast<int64_t>(fill));
        }
    }
    // The page table (converted to f32 as well: exact below 2^24 pages, checked here).
    std::vector<int64_t> page_table;
    if (op.has_pages()) {
        const int64_t entries =
            static_cast<int64_t>(op.sequence_ends().size()) * op.pages_per_sequence();
        page_table.reserve(static_cast<size_t>(entries));
        for (int64_t entry = 0; entry < entries; ++entry) {
            const float page = inputs[4][entry];
            if (!(page >= 0.0f && page < static_cast<float>(op.pages())) ||
                page != std::floor(page)) {
                return block_error(op, absl::StrCat("page_table entry ", entry, " = ", page,
                                                    " is not a page of [0, ", op.pages(), ")"));
            }
            page_table.push_back(static_cast<int64_t>(page));
        }
    }
    for (const ir::Attention::Segment& segment : op.segments(rows, fills)) {
        const int64_t start = segment.queries.lower;
        const int64_t end = segment.queries.upper;
        for (int64_t query_begin = start; query_begin < end; query_begin += shape.query_tile) {
            const int64_t positions = std::min(shape.query_tile, end - query_begin);
            // The tile's keys: up to what its last query sees, as rows of the key block (the
            // same for every kv head; each head's tile writes its own outputs).
            const std::vector<ir::Attention::KeyRun> runs =
                op.key_runs(segment,
                            segment.keys_of(query_begin + positions - 1, shape.causal,
                                            {segment.key_begin, segment.key_end}),
                            keys, page_table);
            for (int64_t kv_head = 0; kv_head < shape.heads_kv; ++kv_head) {
                EINSUMMABLE_RETURN_IF_ERROR(attend_tile(
                    shape, {inputs[0], inputs[1], inputs[2], output, lse, rows.lower, keys.lower,
                            kv_head, query_begin, positions, segment.causal_shift, runs}));
            }
        }
    }
    return absl::OkStatus();
}

absl::Status run_attention_f32(const ir::Attention& op, const ir::FunctionSpec& function,
                               F32Inputs inputs, F32Outputs outputs) {
    return attention_f32(op, function, inputs, outputs[0], nullptr);
}

// The partial result over the function's block of keys, with its log-sum-exp statistics
// (partial_f32, kernels.h).
absl::Status run_attention_partial_f32(const ir::Attention& op, const ir::FunctionSpec& function,
                                       F32Inputs inputs, F32Outputs outputs, F32Outputs lse) {
    return attention_f32(op, function, inputs, outputs[0], lse[0]);
}

[[maybe_unused]] const bool kRegistered = register_cpu_kernel<ir::Attention>(&run_attention_f32);
[[maybe_unused]] const bool kPartialRegistered =
    register_cpu_partial_kernel<ir::Attention>(&run_attention_partial_f32);

} // namespace

} // namespace einsummable::kernels::cpu
