// Row-wise kernels: softmax, rmsnorm, layernorm and rope (rowwise_launch.h). Rows of up to
// kWarpRowLength elements take one warp each (several rows per CTA); longer rows take one CTA
// each, reducing through warp shuffles and one shared-memory step. Loads widen the storage dtype
// to the compute type (device_dtype.cuh) and stores round to nearest even. Each pass re-reads
// x rather than keeping the row in registers, so any row length runs with the same code.

#include <algorithm>

#include "kernels/cuda/device_dtype.cuh"
#include "kernels/cuda/rowwise_launch.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kWarp = 32;
constexpr int64_t kWarpRowLength = 256;
constexpr int kWarpRowsPerCta = 8;
// The most threads row_launch gives a CTA: a long row's CTA has up to this many, a CTA of short
// rows kWarp x kWarpRowsPerCta. The row kernels are declared __launch_bounds__(kMaxThreadsPerRow)
// and rope __launch_bounds__(kRopeThreads), so that the compiler keeps their registers within
// what a CTA of that many threads can have (64 per thread at 1024): without the bound it may use
// more, and a launch of 1024 threads then fails with cudaErrorLaunchOutOfResources.
constexpr int kMaxThreadsPerRow = 1024;
static_assert(kWarp * kWarpRowsPerCta <= kMaxThreadsPerRow);
// CTAs beyond this loop over rows instead (grid-stride), which keeps gridDim.x in range.
constexpr int64_t kMaxCtas = int64_t{1} << 20;
constexpr int kRopeThreads = 256;
// Static shared memory every device guarantees; the rope table stays inside it so that no
// launch needs an opt-in attribute.
constexpr int64_t kDefaultSharedBytes = 48 * 1024;

struct MaxOp {
    template <typename C>
    __device__ C operator()(C a, C b) const {
        return b > a ? b : a;
    }
};
struct SumOp {
    template <typename C>
    __device__ C operator()(C a, C b) const {
        return a + b;
    }
};

template <typename C, typename Op>
__device__ C warp_reduce(C value, Op op) {
    for (int offset = kWarp / 2; offset > 0; offset /= 2) {
        value = op(value, __shfl_xor_sync(0xffffffffu, value, offset));
    }
    return value;
}

// The reduction of `value` over the threads of one row (blockDim.x of them), returned to every
// one. With a warp per row the shuffles suffice; a CTA-wide row adds one shared-memory step,
// which every thread of the CTA must reach.
template <typename C, typename Op>
__device__ C row_reduce(C value, Op op, C identity) {
    value = warp_reduce(value, op);
    if (blockDim.x == kWarp) {
        return value;
    }
    __shared__ C partials[kMaxThreadsPerRow / kWarp];
    const int lane = static_cast<int>(threadIdx.x) % kWarp;
    const int warp = static_cast<int>(threadIdx.x) / kWarp;
    __syncthreads(); // the previous reduction has read its partials
    if (lane == 0) {
        partials[warp] = value;
    }
    __syncthreads();
    value = lane < static_cast<int>(blockDim.x) / kWarp ? partials[lane] : identity;
    return warp_reduce(value, op);
}

// The grid covers rows [0, rows) in steps of row_step(), each CTA starting at first_row() and
// each of its rows at first_row() + threadIdx.y. A warp whose row is out of range skips it as a
// whole; a CTA-wide row (blockDim.y == 1) is always in range, so its __syncthreads stay uniform.
__device__ int64_t first_row() {
    return static_cast<int64_t>(blockIdx.x) * blockDim.y;
}
__device__ int64_t row_step() {
    return static_cast<int64_t>(gridDim.x) * blockDim.y;
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    softmax_kernel(const T* x, T* y, RowShape shape) {
    using C = ComputeType<T>;
    const int64_t rows = shape.outer * shape.inner;
    const int64_t stride = shape.inner;
    for (int64_t first = first_row(); first < rows; first += row_step()) {
        const int64_t row = first + threadIdx.y;
        if (row >= rows) {
            continue;
        }
        const int64_t base = (row / shape.inner) * shape.length * shape.inner + row % shape.inner;
        C max = negative_infinity<C>();
        for (int64_t j = threadIdx.x; j < shape.length; j += blockDim.x) {
            max = MaxOp{}(max, to_compute(x[base + j * stride]));
        }
        max = row_reduce(max, MaxOp{}, negative_infinity<C>());
        C sum = 0;
        for (int64_t j = threadIdx.x; j < shape.length; j += blockDim.x) {
            sum += compute_exp(to_compute(x[base + j * stride]) - max);
        }
        // Also orders every read of x before the first write of y, which may alias it.
        sum = row_reduce(sum, SumOp{}, C(0));
        const C inverse = C(1) / sum;
        for (int64_t j = threadIdx.x; j < shape.length; j += blockDim.x) {
            const int64_t idx = base + j * stride;
            y[idx] = from_compute<T>(compute_exp(to_compute(x[idx]) - max) * inverse);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    rmsnorm_kernel(const T* x, const T* weight, T* y, int64_t rows, int64_t length, double eps) {
    using C = ComputeType<T>;
    for (int64_t first = first_row(); first < rows; first += row_step()) {
        const int64_t row = first + threadIdx.y;
        if (row >= rows) {
            continue;
        }
        const T* x_row = x + row * length;
        T* y_row = y + row * length;
        C sum_squares = 0;
        for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
            const C value = to_compute(x_row[j]);
            sum_squares += value * value;
        }
        sum_squares = row_reduce(sum_squares, SumOp{}, C(0));
        const C inv_rms = C(1) / compute_sqrt(sum_squares / C(length) + C(eps));
        for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
            y_row[j] = from_compute<T>(to_compute(x_row[j]) * inv_rms * to_compute(weight[j]));
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(kMaxThreadsPerRow)
    layernorm_kernel(const T* x, const T* gamma, const T* beta, T* y, int64_t rows, int64_t length,
                     double eps) {
    using C = ComputeType<T>;
    for (int64_t first = first_row(); first < rows; first += row_step()) {
        const int64_t row = first + threadIdx.y;
        if (row >= rows) {
            continue;
        }
        const T* x_row = x + row * length;
        T* y_row = y + row * length;
        C sum = 0;
        for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
            sum += to_compute(x_row[j]);
        }
        const C mean = row_reduce(sum, SumOp{}, C(0)) / C(length);
        // Two passes rather than E[x²] − E[x]², which cancels badly when |mean| >> std.
        C squares = 0;
        for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
            const C centred = to_compute(x_row[j]) - mean;
            squares += centred * centred;
        }
        const C variance = row_reduce(squares, SumOp{}, C(0)) / C(length);
        const C inv_std = C(1) / compute_sqrt(variance + C(eps));
        for (int64_t j = threadIdx.x; j < length; j += blockDim.x) {
            C value = (to_compute(x_row[j]) - mean) * inv_std * to_compute(gamma[j]);
            if (beta != nullptr) {
                value += to_compute(beta[j]);
            }
            y_row[j] = from_compute<T>(value);
        }
    }
}

// One CTA per token (grid-stride): the token's cosines and sines, computed once in double, are
// shared by all its rows.
template <typename T>
__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(const T* x, T* y, int64_t tokens, int64_t rows_per_token, int64_t half,
                const double* table, const int32_t* positions32, const int64_t* positions64) {
    using C = ComputeType<T>;
    extern __shared__ __align__(16) unsigned char rope_shared[];
    C* cosines = reinterpret_cast<C*>(rope_shared);
    C* sines = cosines + half;
    const double* frequencies = table;
    const double* positions = table + half;
    for (int64_t token = blockIdx.x; token < tokens; token += gridDim.x) {
        __syncthreads(); // the previous token's rows are done with the table
        const double position = positions64 != nullptr   ? static_cast<double>(positions64[token])
                                : positions32 != nullptr ? static_cast<double>(positions32[token])
                                                         : positions[token];
        for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
            double sine = 0.0;
            double cosine = 0.0;
            sincos(position * frequencies[i], &sine, &cosine);
            cosines[i] = static_cast<C>(cosine);
            sines[i] = static_cast<C>(sine);
        }
        __syncthreads();
        const int64_t base = token * rows_per_token * 2 * half;
        for (int64_t idx = threadIdx.x; idx < rows_per_token * half; idx += blockDim.x) {
            const int64_t i = idx % half;
            const int64_t offset = base + (idx / half) * 2 * half + i;
            const C first = to_compute(x[offset]);
            const C second = to_compute(x[offset + half]);
            y[offset] = from_compute<T>(first * cosines[i] - second * sines[i]);
            y[offset + half] = from_compute<T>(first * sines[i] + second * cosines[i]);
        }
    }
}

struct RowLaunch {
    dim3 grid;
    dim3 block;
};

// A warp per row for short rows, a CTA of up to 1024 threads (about eight elements each) per
// long row.
RowLaunch row_launch(int64_t rows, int64_t length) {
    if (length <= kWarpRowLength) {
        const int64_t ctas = std::min((rows + kWarpRowsPerCta - 1) / kWarpRowsPerCta, kMaxCtas);
        return {dim3(static_cast<unsigned>(ctas)), dim3(kWarp, kWarpRowsPerCta)};
    }
    const int64_t wanted = ((length + 7) / 8 + kWarp - 1) / kWarp * kWarp;
    const auto threads = static_cast<unsigned>(std::min<int64_t>(kMaxThreadsPerRow, wanted));
    return {dim3(static_cast<unsigned>(std::min(rows, kMaxCtas))), dim3(threads)};
}

} // namespace

cudaError_t launch_softmax(ir::DType dtype, const void* x, void* y, const RowShape& shape,
                           cudaStream_t stream) {
    const int64_t rows = shape.outer * shape.inner;
    if (rows == 0 || shape.length == 0) {
        return cudaSuccess;
    }
    const RowLaunch launch = row_launch(rows, shape.length);
    dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        softmax_kernel<T><<<launch.grid, launch.block, 0, stream>>>(static_cast<const T*>(x),
                                                                    static_cast<T*>(y), shape);
    });
    return cudaGetLastError();
}

cudaError_t launch_rmsnorm(ir::DType dtype, const void* x, const void* weight, void* y,
                           int64_t rows, int64_t length, double eps, cudaStream_t stream) {
    if (rows == 0 || length == 0) {
        return cudaSuccess;
    }
    const RowLaunch launch = row_launch(rows, length);
    dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        rmsnorm_kernel<T><<<launch.grid, launch.block, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(y), rows,
            length, eps);
    });
    return cudaGetLastError();
}

cudaError_t launch_layernorm(ir::DType dtype, const void* x, const void* gamma, const void* beta,
                             void* y, int64_t rows, int64_t length, double eps,
                             cudaStream_t stream) {
    if (rows == 0 || length == 0) {
        return cudaSuccess;
    }
    const RowLaunch launch = row_launch(rows, length);
    dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        layernorm_kernel<T><<<launch.grid, launch.block, 0, stream>>>(
            static_cast<const T*>(x), static_cast<const T*>(gamma), static_cast<const T*>(beta),
            static_cast<T*>(y), rows, length, eps);
    });
    return cudaGetLastError();
}

cudaError_t launch_rope(ir::DType dtype, const void* x, void* y, int64_t tokens,
                        int64_t rows_per_token, int64_t half, const double* table,
                        const void* positions, int positions_bytes, cudaStream_t stream) {
    if (tokens == 0 || rows_per_token == 0 || half == 0) {
        return cudaSuccess;
    }
    const auto ctas = static_cast<unsigned>(std::min(tokens, kMaxCtas));
    dispatch_storage(dtype, [&](auto tag) {
        using T = decltype(tag);
        const size_t shared = static_cast<size_t>(2 * half) * sizeof(ComputeType<T>);
        rope_kernel<T><<<ctas, kRopeThreads, shared, stream>>>(
            static_cast<const T*>(x), static_cast<T*>(y), tokens, rows_per_token, half, table,
            positions_bytes == 4 ? static_cast<const int32_t*>(positions) : nullptr,
            positions_bytes == 8 ? static_cast<const int64_t*>(positions) : nullptr);
    });
    return cudaGetLastError();
}

int64_t rope_max_half(ir::DType dtype) {
    const int64_t compute_bytes = dtype == ir::DType::f64 ? 8 : 4;
    return kDefaultSharedBytes / (2 * compute_bytes);
}

} // namespace einsummable::kernels::cuda
