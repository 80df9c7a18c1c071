#pragma once

// The launch behind prepare_flash_attention (attention_flash.cc prepares it, attention_flash.cu
// holds the kernel). C++17 and free of the ir operator headers, which nvcc cannot compile as
// C++20.

#include <cstdint>

#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

// One tile of query rows that lie in one packed sequence, in rows of the query block: queries
// [row_begin, row_end) attend to keys [key_begin, key_end), in rows of the key block (their
// sequence's key region clipped to the key block and, when causal, to keys up to the tile's
// last query). The sequence's keys end at fill_base + fill (key-block rows), where fill is its
// run-time key length (FlashAttentionArgs::key_lengths[sequence]) or, without those, its
// region's capacity; a causal query row r (query-block row) sees the keys up to
// r + position_base + fill (bottom-right masking from the fill's end). Built at prepare time
// (flash_work_items) and uploaded once.
//
// Paged (FlashAttentionArgs::page_table set): keys are places of the item's sequence, not rows
// of the key block. [key_begin, key_end) are places in [0, capacity), fill_base is 0, and a
// causal query row r sees the places up to r + position_base + fill; the kernel finds each
// place's pool row through the page table and reads it only where the key block holds it.
struct FlashWorkItem {
    int32_t row_begin;
    int32_t row_end;
    int32_t key_begin;
    int32_t key_end;
    int32_t sequence;
    int32_t capacity;
    int32_t fill_base;
    int32_t position_base;
};

// q [rows, heads_q, head_dim], k [keys, heads_q / group, head_dim],
// v [keys, heads_q / group, value_dim] -> out [rows, heads_q, value_dim], dense in one dtype;
// query head h reads kv head h / group; where a query row sits among the key rows is its work
// item's (position_base, plus the fill). `items` is device memory. block_m
// is at least the longest item (row_end − row_begin). With `lse` (f32 [rows, heads_q]) the
// output is a partial result (ir::AggOp::log_sum_exp): each row also gets the log of its
// softmax denominator, -inf where no key has weight (the row 0 where it saw no key, NaN where
// every score was -inf) and NaN where a score was NaN or +inf (ir::PartialBlock).
struct FlashAttentionArgs {
    const void* q = nullptr;
    const void* k = nullptr;
    const void* v = nullptr;
    void* out = nullptr;
    float* lse = nullptr;
    const FlashWorkItem* items = nullptr;
    int64_t num_items = 0;
    int heads_q = 0;
    int group = 1;
    int head_dim = 0;
    int value_dim = 0;
    double scale = 1.0;
    bool causal = false;
    // The sequences' run-time key lengths (device memory, int32, or int64 when
    // key_lengths_bytes is 8); null: every region full.
    const void* key_lengths = nullptr;
    int key_lengths_bytes = 0;
    // Paged attention (ir::Attention::has_pages): the page table (device memory,
    // [sequences, pages_per_sequence], int32, or int64 when page_table_bytes is 8; key_lengths
    // are then given). Place j of sequence s is pool row table[s][j / page_size] · page_size +
    // j mod page_size; k and v hold the pool's rows [key_block_begin, key_block_begin +
    // key_block_rows), and a place whose row lies outside them is not read (no score, no value).
    // Null: not paged.
    const void* page_table = nullptr;
    int page_table_bytes = 0;
    int page_size = 0;
    int pages_per_sequence = 0;
    int64_t key_block_begin = 0;
    int64_t key_block_rows = 0;
    int block_m = 0; // query rows per CTA
    int block_n = 0; // keys per shared-memory tile
};

// Largest heads_q a launch takes (it is the grid's y extent).
inline constexpr int kFlashMaxHeads = 65535;

// Dynamic shared memory one CTA of these tiles uses; paged attention needs a little more (each
// tile's key rows and which query rows saw a key).
int64_t flash_shared_bytes(ir::DType dtype, int block_m, int block_n, int head_dim, int value_dim,
                           bool paged = false);

// Lets the kernels of `dtype` (paged and not) use `shared_bytes` of dynamic shared memory on the
// current device (beyond the default 48 KiB needs this opt-in). Called at prepare time, never in
// a capture.
cudaError_t configure_flash_attention(ir::DType dtype, int64_t shared_bytes);

// Enqueues one CTA per (work item, query head) on `stream`; the launch's error.
cudaError_t launch_flash_attention(ir::DType dtype, const FlashAttentionArgs& args,
                                   cudaStream_t stream);

} // namespace einsummable::kernels::cuda
