// Flash-style attention (attention_flash_launch.h), the fallback where cuDNN's fused attention
// does not run: one CTA per (tile of query rows in one sequence, query head). The CTA keeps its
// queries, one tile of keys and values, the tile's scores and the running weighted sums in
// shared memory, all in the compute type, and folds each key tile into a running maximum and
// denominator per query (online softmax), as kernels/cpu/attention_f32.cc does. The keys may be
// any block of the sequence (attention split along its keys): positions come from
// the blocks, and a partial result also writes each row's log-sum-exp. Every extent is
// a runtime value, so one instantiation per dtype serves every head dimension that fits in
// shared memory; the tiles are chosen at prepare time. Paged attention is a second
// instantiation, so that the common path pays nothing for it: a tile of keys is a tile of places
// of the sequence, each mapped through the page table to a pool row, and places whose rows the
// key block does not hold are masked (a tile with none of them is skipped).

#include <algorithm>

#include "kernels/cuda/attention_flash_launch.h"
#include "kernels/cuda/device_dtype.cuh"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr int64_t kMaxCtas = int64_t{1} << 20; // beyond: CTAs loop over work items

// max(a, b), NaN when either is NaN (kernels/scalar_math.h's max): a row with a NaN score is
// NaN whatever its lanes, tiles and key blocks (docs/operators.md "Non-finite inputs").
template <typename C>
__device__ C propagating_max(C a, C b) {
    return (a >= b || a != a) ? a : b;
}

template <typename C>
__device__ C warp_max(C value) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        value = propagating_max(value, __shfl_xor_sync(0xffffffffu, value, offset));
    }
    return value;
}

template <typename C>
__device__ C warp_sum(C value) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    }
    return value;
}

// Elements of the compute type in one CTA's shared memory, in this order: queries
// [block_m, head_dim], keys [block_n, head_dim + 1] (the pad spreads a warp's reads of one
// column over all banks), values [block_n, value_dim], scores [block_m, block_n], weighted sums
// [block_m, value_dim], then per query the running maximum, denominator and last rescale.
__host__ __device__ int64_t flash_shared_elements(int block_m, int block_n, int head_dim,
                                                  int value_dim) {
    return int64_t{block_m} * head_dim + int64_t{block_n} * (head_dim + 1) +
           int64_t{block_n} * value_dim + int64_t{block_m} * block_n +
           int64_t{block_m} * value_dim + 3 * int64_t{block_m};
}

// Paged only, after those: int32 per key of the tile (its row in the key block, -1 where the
// block does not hold it) and per query (whether it saw a key of the block).
__host__ __device__ int64_t flash_paged_bytes(int block_m, int block_n) {
    return (int64_t{block_n} + int64_t{block_m}) * 4;
}

// The integer at `index` of raw i32 (bytes 4) or i64 (bytes 8) device memory.
__device__ int64_t integer_at(const void* values, int bytes, int64_t index) {
    return bytes == 8 ? static_cast<const int64_t*>(values)[index]
                      : static_cast<const int32_t*>(values)[index];
}

template <typename T, bool kPaged>
__global__ void __launch_bounds__(kThreads) flash_attention_kernel(FlashAttentionArgs args) {
    using C = ComputeType<T>;
    const T* q = static_cast<const T*>(args.q);
    const T* k = static_cast<const T*>(args.k);
    const T* v = static_cast<const T*>(args.v);
    T* out = static_cast<T*>(args.out);
    const int d = args.head_dim;
    const int dv = args.value_dim;
    const int block_m = args.block_m;
    const int block_n = args.block_n;
    const int key_stride = d + 1;
    const int64_t heads_q = args.heads_q;
    const int64_t heads_kv = heads_q / args.group;
    const int64_t head = blockIdx.y;
    const int64_t kv_head = head / args.group;
    const C scale = static_cast<C>(args.scale);
    const int tid = static_cast<int>(threadIdx.x);
    const int lane = tid % kWarp;
    const int warp = tid / kWarp;

    extern __shared__ __align__(16) unsigned char flash_shared[];
    C* queries = reinterpret_cast<C*>(flash_shared);
    C* keys = queries + block_m * d;
    C* values = keys + block_n * key_stride;
    C* scores = values + block_n * dv;
    C* sums = scores + block_m * block_n;
    C* running_max = sums + block_m * dv;
    C* denominator = running_max + block_m;
    C* rescale = denominator + block_m;
    int* key_rows = reinterpret_cast<int*>(rescale + block_m); // paged only
    int* saw_key = key_rows + block_n;                         // paged only

    for (int64_t item_idx = blockIdx.x; item_idx < args.num_items; item_idx += gridDim.x) {
        const FlashWorkItem item = args.items[item_idx];
        const int rows = item.row_end - item.row_begin;
        __syncthreads(); // the previous item has written its outputs
        for (int idx = tid; idx < block_m * d; idx += kThreads) {
            const int r = idx / d;
            queries[idx] =
                r < rows ? to_compute(q[((item.row_begin + r) * heads_q + head) * d + idx % d])
                         : C(0);
        }
        for (int idx = tid; idx < block_m * dv; idx += kThreads) {
            sums[idx] = C(0);
        }
        for (int r = tid; r < block_m; r += kThreads) {
            running_max[r] = negative_infinity<C>();
            denominator[r] = C(0);
            if (kPaged) {
                saw_key[r] = 0;
            }
        }
        // The item's keys end at its last query's when causal (flash_work_items), and at its
        // sequence's fill.
        const int fill = args.key_lengths == nullptr
                             ? item.capacity
                             : static_cast<int>(integer_at(args.key_lengths, args.key_lengths_bytes,
                                                           item.sequence));
        const int key_end = max(item.key_begin, min(item.key_end, item.fill_base + fill));
        const int first_position = item.row_begin + item.position_base + fill;
        for (int key_begin = item.key_begin; key_begin < key_end; key_begin += block_n) {
            const int tile_keys = min(block_n, key_end - key_begin);
            __syncthreads(); // the previous tile's weighted sums are done with keys and values
            if (kPaged) {
                // Each place's row in the key block, through the page table; -1 where the block
                // does not hold it. A tile of none reads nothing.
                bool holds = false;
                for (int n = tid; n < block_n; n += kThreads) {
                    int row = -1;
                    if (n < tile_keys) {
                        const int place = key_begin + n;
                        const int64_t page =
                            integer_at(args.page_table, args.page_table_bytes,
                                       int64_t{item.sequence} * args.pages_per_sequence +
                                           place / args.page_size);
                        const int64_t block_row =
                            page * args.page_size + place % args.page_size - args.key_block_begin;
                        if (block_row >= 0 && block_row < args.key_block_rows) {
                            row = static_cast<int>(block_row);
                            holds = true;
                        }
                    }
                    key_rows[n] = row;
                }
                if (!__syncthreads_or(holds)) {
                    continue;
                }
            }
            for (int idx = tid; idx < block_n * d; idx += kThreads) {
                const int n = idx / d;
                const int c = idx % d;
                const int row = kPaged ? key_rows[n] : key_begin + n;
                keys[n * key_stride + c] = n < tile_keys && (!kPaged || row >= 0)
                                               ? to_compute(k[(row * heads_kv + kv_head) * d + c])
                                               : C(0);
            }
            for (int idx = tid; idx < block_n * dv; idx += kThreads) {
                const int n = idx / dv;
                const int row = kPaged ? key_rows[n] : key_begin + n;
                values[idx] = n < tile_keys && (!kPaged || row >= 0)
                                  ? to_compute(v[(row * heads_kv + kv_head) * dv + idx % dv])
                                  : C(0);
            }
            __syncthreads();
            for (int idx = tid; idx < block_m * block_n; idx += kThreads) {
                const int r = idx / block_n;
                const int n = idx % block_n;
                const int key = key_begin + n;
                const bool visible = r < rows && n < tile_keys &&
                                     (!args.causal || key <= first_position + r) &&
                                     (!kPaged || key_rows[n] >= 0);
                C score = negative_infinity<C>();
                if (visible) {
                    if (kPaged) {
                        saw_key[r] = 1; // every writer writes 1
                    }
                    const C* query = queries + r * d;
                    const C* key_row = keys + n * key_stride;
                    C dot = 0;
                    for (int c = 0; c < d; ++c) {
                        dot += query[c] * key_row[c];
                    }
                    // d = 0 makes the default scale infinite; the reference scores 0 then.
                    score = d > 0 ? dot * scale : C(0);
                }
                scores[idx] = score;
            }
            __syncthreads();
            // Online softmax, one warp per query row: scores become weights relative to the new
            // running maximum, and the old sums are rescaled to it.
            for (int r = warp; r < block_m; r += kWarps) {
                C* row_scores = scores + r * block_n;
                const C old_max = running_max[r];
                C tile_max = negative_infinity<C>();
                for (int n = lane; n < block_n; n += kWarp) {
                    tile_max = propagating_max(tile_max, row_scores[n]);
                }
                tile_max = warp_max(tile_max);
                const C new_max = propagating_max(old_max, tile_max);
                // No visible key yet: exp(-inf - -inf) would be NaN; the sums are still zero.
                const bool none = new_max == negative_infinity<C>();
                C tile_sum = 0;
                for (int n = lane; n < block_n; n += kWarp) {
                    const C weight = none ? C(0) : compute_exp(row_scores[n] - new_max);
                    row_scores[n] = weight;
                    tile_sum += weight;
                }
                tile_sum = warp_sum(tile_sum);
                if (lane == 0) {
                    const C factor = none ? C(1) : compute_exp(old_max - new_max);
                    rescale[r] = factor;
                    denominator[r] = denominator[r] * factor + tile_sum;
                    running_max[r] = new_max;
                }
            }
            __syncthreads();
            for (int idx = tid; idx < block_m * dv; idx += kThreads) {
                const int r = idx / dv;
                const int c = idx % dv;
                const C* weights = scores + r * block_n;
                C sum = sums[idx] * rescale[r];
                // A key of weight 0 (masked, or a -inf score) reads no value: 0·NaN is NaN.
                for (int n = 0; n < tile_keys; ++n) {
                    sum += weights[n] != C(0) ? weights[n] * values[n * dv + c] : C(0);
                }
                sums[idx] = sum;
            }
        }
        __syncthreads();
        // A denominator of 0: no key has weight, because every score is -inf (the softmax's
        // 0/0: NaN) or the row sees no key of the block (0, with statistics -inf: the ⊕'s
        // identity); both keep -inf statistics. A NaN denominator (a NaN or +inf score) makes
        // the row and its statistics NaN. As kernels/cpu/attention_f32.cc.
        for (int idx = tid; idx < rows * dv; idx += kThreads) {
            const int r = idx / dv;
            const C total = denominator[r];
            const bool sees_keys = kPaged
                                       ? saw_key[r] != 0
                                       : item.key_begin < key_end &&
                                             (!args.causal || item.key_begin <= first_position + r);
            const C empty = sees_keys ? static_cast<C>(NAN) : C(0);
            const C value = total == C(0) ? empty : sums[idx] / total;
            out[((item.row_begin + r) * heads_q + head) * dv + idx % dv] = from_compute<T>(value);
        }
        if (args.lse != nullptr) {
            for (int r = tid; r < rows; r += kThreads) {
                const C total = denominator[r];
                args.lse[(item.row_begin + r) * heads_q + head] =
                    total == C(0) ? -INFINITY
                                  : static_cast<float>(static_cast<double>(running_max[r]) +
                                                       log(static_cast<double>(total)));
            }
        }
    }
}

} // namespace

int64_t flash_shared_bytes(ir::DType dtype, int block_m, int block_n, int head_dim, int value_dim,
                           bool paged) {
    const int64_t compute_bytes = dtype == ir::DType::f64 ? 8 : 4;
    return flash_shared_elements(block_m, block_n, head_dim, value_dim) * compute_bytes +
           (paged ? flash_paged_bytes(block_m, block_n) : 0);
}

cudaError_t configure_flash_attention(ir::DType dtype, int64_t shared_bytes) {
    return dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        const cudaError_t status = cudaFuncSetAttribute(flash_attention_kernel<T, false>,
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                        static_cast<int>(shared_bytes));
        if (status != cudaSuccess) {
            return status;
        }
        return cudaFuncSetAttribute(flash_attention_kernel<T, true>,
                                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                                    static_cast<int>(shared_bytes));
    });
}

cudaError_t launch_flash_attention(ir::DType dtype, const FlashAttentionArgs& args,
                                   cudaStream_t stream) {
    if (args.num_items == 0 || args.heads_q == 0) {
        return cudaSuccess;
    }
    const dim3 grid(static_cast<unsigned>(std::min(args.num_items, kMaxCtas)),
                    static_cast<unsigned>(args.heads_q));
    const bool paged = args.page_table != nullptr;
    const auto shared = static_cast<size_t>(flash_shared_bytes(
        dtype, args.block_m, args.block_n, args.head_dim, args.value_dim, paged));
    dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        if (paged) {
            flash_attention_kernel<T, true><<<grid, kThreads, shared, stream>>>(args);
        } else {
            flash_attention_kernel<T, false><<<grid, kThreads, shared, stream>>>(args);
        }
    });
    return cudaGetLastError();
}

} // namespace einsummable::kernels::cuda
