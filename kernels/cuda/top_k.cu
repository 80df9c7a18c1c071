// The kernels of kernels/cuda/top_k.cc and of the top_k ⊕ (top_k_launch.h).
//
// Both keep a row's list of k best pairs in shared memory, sorted best first by argmax's rule,
// and grow it by merges: the merge of two sorted lists places every pair at its rank (its place
// in its own list + how many pairs of the other list go before it, by binary search), one thread
// per pair, so a merge is O(k log k) work over the block's threads and needs no serial step.
// Pairs are compared as (value, column) with columns as int32, so that the order is total on a
// row's distinct columns and the result is the CPU kernel's bit for bit, whatever order the
// block's threads find them in.

#include <algorithm>
#include <climits>
#include <cstdint>

#include "kernels/cuda/device_dtype.cuh"
#include "kernels/cuda/top_k_launch.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int64_t kMaxBlocks = 65535;
// top_k: at most this many threads per row's block (a power of two); each reads kItems elements
// of a chunk of the row.
constexpr int kMaxTopKThreads = 512;
constexpr int kItems = 2;
// The ⊕: at most this many threads per row's block.
constexpr int kMaxMergeThreads = 256;
// The index of the list's filler before a row has k elements: it loses to every element, -inf
// at any column included (equal values go to the smaller index).
constexpr int kFillerIndex = INT_MAX;

template <typename C>
__device__ __forceinline__ bool wins(C a, int ia, C b, int ib) {
    return scalar_math::arg_max_wins(a, ia, b, ib);
}

int threads_for(int64_t work, int max_threads) {
    int threads = 32;
    while (threads < max_threads && threads < work) {
        threads *= 2;
    }
    return threads;
}

// Sorts `count` pairs (a power of two, the same in every thread) best first: a bitonic sort,
// each thread comparing the pairs i ≡ threadIdx.x (mod blockDim.x) with their partners. Ends
// with a barrier when count > 1.
template <typename C>
__device__ void sort_best_first(C* values, int* indices, int count) {
    for (int size = 2; size <= count; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = static_cast<int>(threadIdx.x); i < count; i += blockDim.x) {
                const int partner = i ^ stride;
                if (partner <= i) {
                    continue;
                }
                // Runs with (i & size) == 0 end best first, the others worst first, so that each
                // pair of them is bitonic; the last size is count itself: best first throughout.
                const bool best_first = (i & size) == 0;
                const bool swap =
                    best_first ? wins(values[partner], indices[partner], values[i], indices[i])
                               : wins(values[i], indices[i], values[partner], indices[partner]);
                if (swap) {
                    const C value = values[i];
                    values[i] = values[partner];
                    values[partner] = value;
                    const int index = indices[i];
                    indices[i] = indices[partner];
                    indices[partner] = index;
                }
            }
            __syncthreads();
        }
    }
}

// out[0, k) = the first k of the merge of a[0, a_count) and b[0, b_count), both best first; of
// two equal pairs a's goes first (the CPU merge's take-b-only-when-it-wins). out is neither a
// nor b. No barrier.
template <typename C>
__device__ void merge_best_first(const C* a_values, const int* a_indices, int a_count,
                                 const C* b_values, const int* b_indices, int b_count,
                                 C* out_values, int* out_indices, int k) {
    for (int i = static_cast<int>(threadIdx.x); i < a_count; i += blockDim.x) {
        const C value = a_values[i];
        const int index = a_indices[i];
        // The pairs of b that beat a[i]: a prefix of b.
        int low = 0;
        int high = b_count;
        while (low < high) {
            const int mid = (low + high) / 2;
            if (wins(b_values[mid], b_indices[mid], value, index)) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        const int at = i + low;
        if (at < k) {
            out_values[at] = value;
            out_indices[at] = index;
        }
    }
    for (int j = static_cast<int>(threadIdx.x); j < b_count; j += blockDim.x) {
        const C value = b_values[j];
        const int index = b_indices[j];
        // The pairs of a that b[j] does not beat (ties go to a): a prefix of a.
        int low = 0;
        int high = a_count;
        while (low < high) {
            const int mid = (low + high) / 2;
            if (!wins(value, index, a_values[mid], a_indices[mid])) {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        const int at = j + low;
        if (at < k) {
            out_values[at] = value;
            out_indices[at] = index;
        }
    }
}

// One block per row (grid-strided). The row's list of its k best so far starts as k fillers;
// each chunk of kItems · blockDim.x elements is filtered against the list's last (k-th) pair —
// after the first chunks of a typical row almost nothing passes, and a chunk with no survivor
// costs two barriers — and the survivors are sorted (bitonic, in shared memory) and merged in.
// Shared memory: the list, its merge target and the chunk's survivors, values in C and columns
// as int32: (2k + chunk) · (sizeof(C) + 4) bytes.
template <typename T>
__global__ void top_k_kernel(const T* x, int64_t rows, int64_t width, int64_t first_index,
                             int64_t vocab, int k, ComputeType<T>* out) {
    using C = ComputeType<T>;
    extern __shared__ __align__(16) unsigned char shared[];
    const int chunk = kItems * static_cast<int>(blockDim.x);
    C* list_values = reinterpret_cast<C*>(shared);
    C* next_values = list_values + k;
    C* found_values = next_values + k;
    int* list_indices = reinterpret_cast<int*>(found_values + chunk);
    int* next_indices = list_indices + k;
    int* found_indices = next_indices + k;
    // The survivors of a chunk, alternating between two counters so that one can be zeroed for
    // the next chunk while the threads read the other.
    __shared__ int counts[2];
    const C filler = negative_infinity<C>();
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const T* values = x + row * width;
        if (threadIdx.x == 0) {
            counts[0] = 0;
            counts[1] = 0;
        }
        for (int i = static_cast<int>(threadIdx.x); i < k; i += blockDim.x) {
            list_values[i] = filler;
            list_indices[i] = kFillerIndex;
        }
        int parity = 0;
        for (int64_t base = 0; base < width; base += chunk, parity ^= 1) {
            __syncthreads(); // the list and a zeroed counter, for every thread
            const C kth_value = list_values[k - 1];
            const int kth_index = list_indices[k - 1];
            for (int item = 0; item < kItems; ++item) {
                const int64_t column = base + item * static_cast<int64_t>(blockDim.x) + threadIdx.x;
                if (column < width) {
                    const C value = to_compute(values[column]);
                    if (wins(value, static_cast<int>(column), kth_value, kth_index)) {
                        const int slot = atomicAdd(&counts[parity], 1);
                        found_values[slot] = value;
                        found_indices[slot] = static_cast<int>(column);
                    }
                }
            }
            __syncthreads();
            const int found = counts[parity];
            if (threadIdx.x == 0) {
                counts[parity ^ 1] = 0; // read last in the previous chunk, before this barrier
            }
            if (found == 0) {
                continue;
            }
            int padded = 1;
            while (padded < found) {
                padded *= 2;
            }
            for (int i = found + static_cast<int>(threadIdx.x); i < padded; i += blockDim.x) {
                found_values[i] = filler;
                found_indices[i] = kFillerIndex;
            }
            __syncthreads();
            sort_best_first(found_values, found_indices, padded);
            merge_best_first(list_values, list_indices, k, found_values, found_indices,
                             min(found, k), next_values, next_indices, k);
            // Every thread swaps alike; the next barrier publishes the merged list.
            C* values_swap = list_values;
            list_values = next_values;
            next_values = values_swap;
            int* indices_swap = list_indices;
            list_indices = next_indices;
            next_indices = indices_swap;
        }
        __syncthreads();
        // The first min(width, k) pairs are the row's (every element beats a filler); the rest
        // are the padding (-inf, vocab).
        C* pairs = out + row * 2 * k;
        for (int slot = static_cast<int>(threadIdx.x); slot < k; slot += blockDim.x) {
            const bool real = slot < width;
            pairs[2 * slot] = real ? list_values[slot] : filler;
            pairs[2 * slot + 1] = static_cast<C>(real ? first_index + list_indices[slot] : vocab);
        }
        __syncthreads(); // the list is read; the next row may refill it
    }
}

struct TopKParts {
    const void* parts[kMaxTopKParts];
    int num_parts;
};

// One block per row (grid-strided): part 0's list, then each next part's merged in, in part
// order. A row is read whole before it is written, so out may be parts[0]. Shared memory: the
// list, its merge target and the part's list, values in C and indices as int32:
// 3k · (sizeof(C) + 4) bytes.
template <typename T>
__global__ void aggregate_top_k_kernel(TopKParts in, T* out, int64_t rows, int k) {
    using C = ComputeType<T>;
    extern __shared__ __align__(16) unsigned char shared[];
    C* list_values = reinterpret_cast<C*>(shared);
    C* next_values = list_values + k;
    C* part_values = next_values + k;
    int* list_indices = reinterpret_cast<int*>(part_values + k);
    int* next_indices = list_indices + k;
    int* part_indices = next_indices + k;
    for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
        const int64_t offset = row * 2 * k;
        const T* first = static_cast<const T*>(in.parts[0]) + offset;
        for (int i = static_cast<int>(threadIdx.x); i < k; i += blockDim.x) {
            list_values[i] = to_compute(first[2 * i]);
            list_indices[i] = static_cast<int>(to_compute(first[2 * i + 1]));
        }
        for (int part = 1; part < in.num_parts; ++part) {
            __syncthreads(); // the list is complete, and the previous part's list is read
            const T* pairs = static_cast<const T*>(in.parts[part]) + offset;
            for (int i = static_cast<int>(threadIdx.x); i < k; i += blockDim.x) {
                part_values[i] = to_compute(pairs[2 * i]);
                part_indices[i] = static_cast<int>(to_compute(pairs[2 * i + 1]));
            }
            __syncthreads();
            merge_best_first(list_values, list_indices, k, part_values, part_indices, k,
                             next_values, next_indices, k);
            C* values_swap = list_values;
            list_values = next_values;
            next_values = values_swap;
            int* indices_swap = list_indices;
            list_indices = next_indices;
            next_indices = indices_swap;
        }
        __syncthreads();
        T* pairs = out + offset;
        for (int i = static_cast<int>(threadIdx.x); i < k; i += blockDim.x) {
            pairs[2 * i] = from_compute<T>(list_values[i]);
            pairs[2 * i + 1] = from_compute<T>(static_cast<C>(list_indices[i]));
        }
        __syncthreads(); // the list is read; the next row may refill it
    }
}

} // namespace

cudaError_t launch_top_k(ir::DType x_dtype, const void* x, int64_t rows, int64_t width,
                         int64_t first_index, int64_t vocab, int64_t k, void* out,
                         cudaStream_t stream) {
    if (rows <= 0) {
        return cudaSuccess;
    }
    if (k < 1 || k > kMaxTopK || width < 0 || width > INT_MAX - 1) {
        return cudaErrorInvalidValue;
    }
    const int threads = threads_for((width + kItems - 1) / kItems, kMaxTopKThreads);
    const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, rows));
    return dispatch_storage(x_dtype, [&](auto x_storage) {
        using T = decltype(x_storage);
        using C = ComputeType<T>;
        const size_t shared_bytes =
            static_cast<size_t>(2 * k + kItems * threads) * (sizeof(C) + sizeof(int));
        // The pairs are written in the compute type: f32, f64 for f64 x (ir::TopK's output).
        top_k_kernel<T><<<blocks, threads, shared_bytes, stream>>>(
            static_cast<const T*>(x), rows, width, first_index, vocab, static_cast<int>(k),
            static_cast<C*>(out));
        return cudaGetLastError();
    });
}

cudaError_t launch_aggregate_top_k(ir::DType dtype, const void* const* parts, int num_parts,
                                   void* out, int64_t rows, int64_t k, cudaStream_t stream) {
    if (rows <= 0) {
        return cudaSuccess;
    }
    if (num_parts < 1 || num_parts > kMaxTopKParts || k < 1 || k > kMaxTopK) {
        return cudaErrorInvalidValue;
    }
    TopKParts in{};
    for (int part = 0; part < num_parts; ++part) {
        in.parts[part] = parts[part];
    }
    in.num_parts = num_parts;
    const int threads = threads_for(k, kMaxMergeThreads);
    const auto blocks = static_cast<unsigned>(std::min(kMaxBlocks, rows));
    auto run = [&](auto storage) {
        using T = decltype(storage);
        const size_t shared_bytes = static_cast<size_t>(3 * k) * (sizeof(T) + sizeof(int));
        aggregate_top_k_kernel<T><<<blocks, threads, shared_bytes, stream>>>(
            in, static_cast<T*>(out), rows, static_cast<int>(k));
        return cudaGetLastError();
    };
    switch (dtype) {
    case ir::DType::f32:
        return run(float{});
    case ir::DType::f64:
        return run(double{});
    default:
        return cudaErrorInvalidValue;
    }
}

} // namespace einsummable::kernels::cuda
