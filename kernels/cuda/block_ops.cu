#include <algorithm>
#include <cstdint>

#include "kernels/cuda/block_ops_launch.h"
#include "kernels/cuda/device_dtype.cuh"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill an H200 several times over; larger blocks of work are covered by the
// grid-stride loops rather than by more blocks.
constexpr int64_t kMaxBlocks = 16384;

unsigned grid_for(int64_t work) {
    return static_cast<unsigned>(std::max<int64_t>(
        1, std::min(kMaxBlocks, (work + kThreadsPerBlock - 1) / kThreadsPerBlock)));
}

// ---- aggregate ------------------------------------------------------------------------------

template <typename T>
struct AggregateParts {
    const T* parts[kMaxLaunchParts];
    int num_parts;
};

template <AggregateKind Kind, typename C>
__device__ __forceinline__ C combine(C acc, C value) {
    if constexpr (Kind == AggregateKind::sum) {
        return acc + value;
    } else if constexpr (Kind == AggregateKind::max) {
        return scalar_math::max(acc, value);
    } else {
        return scalar_math::min(acc, value);
    }
}

// Sixteen bytes of T, moved with one vector load or store.
template <typename T>
struct alignas(16) Pack {
    static constexpr int kCount = 16 / static_cast<int>(sizeof(T));
    T values[kCount];
};

// out[i] = ⊕ parts[p][i] in part order. Each thread takes Pack-sized groups of elements (16-byte
// loads, coalesced across the warp) when every pointer is 16-byte aligned, single elements
// otherwise; the last n % kCount elements go one by one.
template <AggregateKind Kind, typename T, bool Packed>
// `out` may be parts[0] (enqueue_aggregate chains launches that way beyond kMaxLaunchParts):
// each element is read before it is written by the same thread, so out is not __restrict__.
__global__ void __launch_bounds__(kThreadsPerBlock)
    aggregate_kernel(AggregateParts<T> in, T* out, int64_t n) {
    using C = ComputeType<T>;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const int64_t thread = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    int64_t tail_begin = 0;
    if constexpr (Packed) {
        constexpr int kCount = Pack<T>::kCount;
        const int64_t packs = n / kCount;
        for (int64_t pack = thread; pack < packs; pack += stride) {
            Pack<T> loaded = reinterpret_cast<const Pack<T>*>(in.parts[0])[pack];
            C acc[kCount];
#pragma unroll
            for (int lane = 0; lane < kCount; ++lane) {
                acc[lane] = to_compute(loaded.values[lane]);
            }
            for (int part = 1; part < in.num_parts; ++part) {
                loaded = reinterpret_cast<const Pack<T>*>(in.parts[part])[pack];
#pragma unroll
                for (int lane = 0; lane < kCount; ++lane) {
                    acc[lane] = combine<Kind>(acc[lane], to_compute(loaded.values[lane]));
                }
            }
            Pack<T> result;
#pragma unroll
            for (int lane = 0; lane < kCount; ++lane) {
                result.values[lane] = from_compute<T>(acc[lane]);
            }
            reinterpret_cast<Pack<T>*>(out)[pack] = result;
        }
        tail_begin = packs * kCount;
    }
    for (int64_t i = tail_begin + thread; i < n; i += stride) {
        C acc = to_compute(in.parts[0][i]);
        for (int part = 1; part < in.num_parts; ++part) {
            acc = combine<Kind>(acc, to_compute(in.parts[part][i]));
        }
        out[i] = from_compute<T>(acc);
    }
}

bool aligned16(const void* pointer) {
    return reinterpret_cast<uintptr_t>(pointer) % 16 == 0;
}

template <AggregateKind Kind, typename T>
cudaError_t launch_aggregate_typed(const void* const* parts, int num_parts, void* out, int64_t n,
                                   cudaStream_t stream) {
    AggregateParts<T> in{};
    bool packed = aligned16(out);
    for (int part = 0; part < num_parts; ++part) {
        in.parts[part] = static_cast<const T*>(parts[part]);
        packed = packed && aligned16(parts[part]);
    }
    in.num_parts = num_parts;
    T* typed_out = static_cast<T*>(out);
    if (packed) {
        const int64_t work = n / Pack<T>::kCount + n % Pack<T>::kCount;
        aggregate_kernel<Kind, T, true>
            <<<grid_for(work), kThreadsPerBlock, 0, stream>>>(in, typed_out, n);
    } else {
        aggregate_kernel<Kind, T, false>
            <<<grid_for(n), kThreadsPerBlock, 0, stream>>>(in, typed_out, n);
    }
    return cudaGetLastError();
}

// ---- log-sum-exp combine --------------------------------------------------------------------

template <typename T>
struct LogSumExpParts {
    const T* parts[kMaxLogSumExpParts];
    const float* lse[kMaxLogSumExpParts];
    int num_parts;
};

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreadsPerBlock / kWarp;

// One warp per row: every lane computes the row's combined statistics (block_ops_launch.h),
// the lanes write the parts' weights to shared memory, then each lane sums its columns over
// the parts. The weights and the combined statistics are read before any write of the row, so
// out and out_lse may alias parts[0] and lse[0].
template <typename T>
__global__ void __launch_bounds__(kThreadsPerBlock)
    log_sum_exp_kernel(LogSumExpParts<T> in, T* out, float* out_lse, int64_t vectors,
                       int64_t width) {
    using C = ComputeType<T>;
    __shared__ float weights[kRowsPerBlock][kMaxLogSumExpParts];
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    float* row_weights = weights[warp];
    const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
    for (int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp; row < vectors;
         row += row_stride) {
        const double combined = combined_log_sum_exp(in.lse, in.num_parts, row);
        for (int part = lane; part < in.num_parts; part += kWarp) {
            row_weights[part] = log_sum_exp_weight(in.lse[part][row], combined);
        }
        __syncwarp();
        for (int64_t col = lane; col < width; col += kWarp) {
            const int64_t idx = row * width + col;
            C acc = 0;
            for (int part = 0; part < in.num_parts; ++part) {
                acc += log_sum_exp_term(row_weights[part], to_compute(in.parts[part][idx]));
            }
            out[idx] = from_compute<T>(acc);
        }
        __syncwarp(); // every lane is done with the weights and with lse[.][row]
        if (lane == 0 && out_lse != nullptr) {
            out_lse[row] = static_cast<float>(combined);
        }
    }
}

// ---- strided copy ---------------------------------------------------------------------------

// Raw element types by size; 16 bytes only appear after block_ops.cc widened contiguous runs.
template <int Bytes>
struct RawElement;
template <>
struct RawElement<1> {
    using Type = uint8_t;
};
template <>
struct RawElement<2> {
    using Type = uint16_t;
};
template <>
struct RawElement<4> {
    using Type = uint32_t;
};
template <>
struct RawElement<8> {
    using Type = uint2;
};
template <>
struct RawElement<16> {
    using Type = uint4;
};

// Element `linear` of the copy in destination order (innermost dimension fastest). Index is
// uint32_t when every count fits, which makes the divisions cheap.
template <int Bytes, typename Index>
__host__ __device__ __forceinline__ void
copy_element(const StridedCopy& copy, const typename RawElement<Bytes>::Type* src,
             typename RawElement<Bytes>::Type* dst, Index linear) {
    Index rest = linear;
    int64_t src_at = 0;
    int64_t dst_at = 0;
#pragma unroll
    for (int dim = kMaxStridedRank - 1; dim >= 0; --dim) {
        if (dim < copy.rank) {
            const Index extent = static_cast<Index>(copy.extent[dim]);
            const Index coordinate = rest % extent;
            rest /= extent;
            src_at += static_cast<int64_t>(coordinate) * copy.src_stride[dim];
            dst_at += static_cast<int64_t>(coordinate) * copy.dst_stride[dim];
        }
    }
    dst[dst_at] = src[src_at];
}

// One thread per element in destination order, so that writes are coalesced.
template <int Bytes, typename Index>
__global__ void __launch_bounds__(kThreadsPerBlock)
    strided_copy_kernel(StridedCopy copy, const void* __restrict__ src_bytes,
                        void* __restrict__ dst_bytes, Index total) {
    using E = typename RawElement<Bytes>::Type;
    const E* src = static_cast<const E*>(src_bytes) + copy.src_offset;
    E* dst = static_cast<E*>(dst_bytes) + copy.dst_offset;
    const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
    for (Index linear = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; linear < total;
         linear += stride) {
        copy_element<Bytes, Index>(copy, src, dst, linear);
    }
}

template <int Bytes>
void emulate_strided_copy_sized(const StridedCopy& copy, const void* src_bytes, void* dst_bytes,
                                int64_t total) {
    using E = typename RawElement<Bytes>::Type;
    const E* src = static_cast<const E*>(src_bytes) + copy.src_offset;
    E* dst = static_cast<E*>(dst_bytes) + copy.dst_offset;
    for (int64_t linear = 0; linear < total; ++linear) {
        copy_element<Bytes, int64_t>(copy, src, dst, linear);
    }
}

template <int Bytes>
cudaError_t launch_strided_copy_sized(const StridedCopy& copy, const void* src, void* dst,
                                      int64_t total, cudaStream_t stream) {
    if (total <= static_cast<int64_t>(UINT32_MAX / 2)) {
        strided_copy_kernel<Bytes, uint32_t><<<grid_for(total), kThreadsPerBlock, 0, stream>>>(
            copy, src, dst, static_cast<uint32_t>(total));
    } else {
        strided_copy_kernel<Bytes, uint64_t><<<grid_for(total), kThreadsPerBlock, 0, stream>>>(
            copy, src, dst, static_cast<uint64_t>(total));
    }
    return cudaGetLastError();
}

} // namespace

cudaError_t launch_aggregate(AggregateKind kind, ir::DType dtype, const void* const* parts,
                             int num_parts, void* out, int64_t n, cudaStream_t stream) {
    if (kind == AggregateKind::none) {
        return cudaMemcpyAsync(out, parts[0], static_cast<size_t>(n * ir::dtype_size(dtype)),
                               cudaMemcpyDeviceToDevice, stream);
    }
    return dispatch_storage(dtype, [&](auto storage) {
        using T = decltype(storage);
        switch (kind) {
        case AggregateKind::max:
            return launch_aggregate_typed<AggregateKind::max, T>(parts, num_parts, out, n, stream);
        case AggregateKind::min:
            return launch_aggregate_typed<AggregateKind::min, T>(parts, num_parts, out, n, stream);
        default:
            return launch_aggregate_typed<AggregateKind::sum, T>(parts, num_parts, out, n, stream);
        }
    });
}

cudaError_t launch_aggregate_log_sum_exp(ir::DType dtype, const void* const* parts,
                                         const float* const* lse, int num_parts, void* out,
                                         float* out_lse, int64_t vectors, int64_t width,
                                         cudaStream_t stream) {
    if (vectors == 0) {
        return cudaSuccess;
    }
    const unsigned blocks = static_cast<unsigned>(
        std::max<int64_t>(1, std::min(kMaxBlocks, (vectors + kRowsPerBlock - 1) / kRowsPerBlock)));
    return dispatch_storage(dtype, [&](auto storage) {
        using T = decltype(storage);
        LogSumExpParts<T> in{};
        for (int part = 0; part < num_parts; ++part) {
            in.parts[part] = static_cast<const T*>(parts[part]);
            in.lse[part] = lse[part];
        }
        in.num_parts = num_parts;
        log_sum_exp_kernel<T><<<blocks, kThreadsPerBlock, 0, stream>>>(in, static_cast<T*>(out),
                                                                       out_lse, vectors, width);
        return cudaGetLastError();
    });
}

void emulate_strided_copy(const StridedCopy& copy, const void* src, void* dst) {
    int64_t total = 1;
    for (int dim = 0; dim < copy.rank; ++dim) {
        total *= copy.extent[dim];
    }
    switch (copy.element_bytes) {
    case 1:
        return emulate_strided_copy_sized<1>(copy, src, dst, total);
    case 2:
        return emulate_strided_copy_sized<2>(copy, src, dst, total);
    case 4:
        return emulate_strided_copy_sized<4>(copy, src, dst, total);
    case 8:
        return emulate_strided_copy_sized<8>(copy, src, dst, total);
    case 16:
        return emulate_strided_copy_sized<16>(copy, src, dst, total);
    default:
        return;
    }
}

cudaError_t launch_strided_copy(const StridedCopy& copy, const void* src, void* dst,
                                cudaStream_t stream) {
    int64_t total = 1;
    for (int dim = 0; dim < copy.rank; ++dim) {
        total *= copy.extent[dim];
    }
    if (total == 0) {
        return cudaSuccess;
    }
    switch (copy.element_bytes) {
    case 1:
        return launch_strided_copy_sized<1>(copy, src, dst, total, stream);
    case 2:
        return launch_strided_copy_sized<2>(copy, src, dst, total, stream);
    case 4:
        return launch_strided_copy_sized<4>(copy, src, dst, total, stream);
    case 8:
        return launch_strided_copy_sized<8>(copy, src, dst, total, stream);
    case 16:
        return launch_strided_copy_sized<16>(copy, src, dst, total, stream);
    default:
        return cudaErrorInvalidValue;
    }
}

} // namespace einsummable::kernels::cuda
