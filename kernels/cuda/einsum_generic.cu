#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "kernels/cuda/device_dtype.cuh"
#include "kernels/cuda/einsum_generic_launch.h"
#include "kernels/scalar_math.h"

namespace einsummable::kernels::cuda {
namespace {

constexpr int kThreadsPerBlock = 256;
// Enough blocks to fill an H200 several times over; the grid-stride loop covers the rest.
constexpr int64_t kMaxBlocks = 16384;

// Storage conversions callable on the host too (the fp16/bf16 intrinsics are host-device), so
// that emulate_generic_einsum runs this file's per-element code on the CPU.
__host__ __device__ __forceinline__ float widen(__half value) {
    return __half2float(value);
}
__host__ __device__ __forceinline__ float widen(__nv_bfloat16 value) {
    return __bfloat162float(value);
}
__host__ __device__ __forceinline__ float widen(float value) {
    return value;
}
__host__ __device__ __forceinline__ double widen(double value) {
    return value;
}

template <typename T>
__host__ __device__ __forceinline__ T narrow(ComputeType<T> value) {
    if constexpr (std::is_same_v<T, __half>) {
        return __float2half_rn(value);
    } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        return __float2bfloat16_rn(value);
    } else {
        return value;
    }
}

template <typename T>
struct EinsumInputs {
    const T* inputs[kMaxGenericEinsumInputs];
};

// How the inputs are joined: the arity is a template parameter so that the per-point code has
// no branch on it and every per-input array is indexed by constants after unrolling (registers,
// not local memory); the scalar function itself is a warp-uniform switch (scalar_math.h).
enum class Arity { unary, binary, product };

template <Arity A>
constexpr int kInputsOf = A == Arity::unary ? 1
                                            : (A == Arity::binary ? 2 : kMaxGenericEinsumInputs);

// Whether input slot `input` is used: always for unary and binary, below num_inputs for products.
template <Arity A>
__host__ __device__ __forceinline__ bool uses_input(const GenericEinsumPlan& plan, int input) {
    return A != Arity::product || input < plan.num_inputs;
}

template <Arity A, typename T>
__host__ __device__ __forceinline__ ComputeType<T>
join_point(const GenericEinsumPlan& plan, const EinsumInputs<T>& in, const int64_t* offsets) {
    using C = ComputeType<T>;
    if constexpr (A == Arity::unary) {
        return scalar_math::apply_unary(plan.join, widen(in.inputs[0][offsets[0]]),
                                        static_cast<C>(plan.constant));
    } else if constexpr (A == Arity::binary) {
        return scalar_math::apply_binary(plan.join, widen(in.inputs[0][offsets[0]]),
                                         widen(in.inputs[1][offsets[1]]));
    } else {
        // Three or more inputs join only by mul (ir::Einsum::make), multiplied in input order
        // as the CPU kernel does.
        C value = widen(in.inputs[0][offsets[0]]);
#pragma unroll
        for (int input = 1; input < kMaxGenericEinsumInputs; ++input) {
            if (input < plan.num_inputs) {
                value = value * widen(in.inputs[input][offsets[input]]);
            }
        }
        return value;
    }
}

template <typename C>
__host__ __device__ __forceinline__ C aggregate(EinsumAgg agg, C acc, C value) {
    switch (agg) {
    case EinsumAgg::max:
        return scalar_math::max(acc, value);
    case EinsumAgg::min:
        return scalar_math::min(acc, value);
    default:
        return acc + value;
    }
}

template <typename C>
__host__ __device__ __forceinline__ C aggregate_identity(EinsumAgg agg) {
    switch (agg) {
    case EinsumAgg::max:
        return -static_cast<C>(INFINITY);
    case EinsumAgg::min:
        return static_cast<C>(INFINITY);
    default:
        return C(0);
    }
}

// One thread per output element, consecutive threads on consecutive elements (coalesced writes,
// and reads wherever an input follows the output's innermost index). Each thread walks the
// reduced indices — the innermost as a plain loop, the others as an odometer — folding from the
// aggregation's identity as the CPU kernel does; without reduced indices the joined value is
// written as it is.
template <Arity A, typename T, typename Index>
__host__ __device__ __forceinline__ void
einsum_element(const GenericEinsumPlan& plan, const EinsumInputs<T>& in, T* out, Index linear) {
    using C = ComputeType<T>;
    constexpr int kInputs = kInputsOf<A>;
    {
        int64_t offsets[kInputs];
#pragma unroll
        for (int input = 0; input < kInputs; ++input) {
            offsets[input] = 0;
        }
        Index rest = linear;
#pragma unroll
        for (int step = 0; step < kMaxGenericEinsumLoops; ++step) {
            const int loop = plan.output_loops - 1 - step; // innermost first
            if (loop >= 0) {
                const Index extent = static_cast<Index>(plan.output_extent[loop]);
                const auto coordinate = static_cast<int64_t>(rest % extent);
                rest /= extent;
#pragma unroll
                for (int input = 0; input < kInputs; ++input) {
                    if (uses_input<A>(plan, input)) {
                        offsets[input] += coordinate * plan.output_stride[input][loop];
                    }
                }
            }
        }
        C acc;
        if (plan.reduced_count == 0) {
            acc = C(0); // the aggregate over no points, as on the CPU
        } else if (plan.reduced_loops == 0) {
            acc = join_point<A>(plan, in, offsets);
        } else {
            acc = aggregate_identity<C>(plan.agg);
            const int inner = plan.reduced_loops - 1;
            const int64_t inner_extent = plan.reduced_extent[inner];
            int64_t counter[kMaxGenericEinsumLoops - 1];
#pragma unroll
            for (int loop = 0; loop < kMaxGenericEinsumLoops - 1; ++loop) {
                counter[loop] = 0;
            }
            for (int64_t line = plan.reduced_count / inner_extent; line > 0; --line) {
                int64_t point[kInputs];
#pragma unroll
                for (int input = 0; input < kInputs; ++input) {
                    point[input] = offsets[input];
                }
                for (int64_t t = 0; t < inner_extent; ++t) {
                    acc = aggregate(plan.agg, acc, join_point<A>(plan, in, point));
#pragma unroll
                    for (int input = 0; input < kInputs; ++input) {
                        if (uses_input<A>(plan, input)) {
                            point[input] += plan.reduced_stride[input][inner];
                        }
                    }
                }
                // Advance the outer loops' odometer, innermost first, carrying outwards.
#pragma unroll
                for (int loop = kMaxGenericEinsumLoops - 2; loop >= 0; --loop) {
                    if (loop < inner) {
#pragma unroll
                        for (int input = 0; input < kInputs; ++input) {
                            if (uses_input<A>(plan, input)) {
                                offsets[input] += plan.reduced_stride[input][loop];
                            }
                        }
                        if (++counter[loop] < plan.reduced_extent[loop]) {
                            break;
                        }
#pragma unroll
                        for (int input = 0; input < kInputs; ++input) {
                            if (uses_input<A>(plan, input)) {
                                offsets[input] -=
                                    plan.reduced_stride[input][loop] * plan.reduced_extent[loop];
                            }
                        }
                        counter[loop] = 0;
                    }
                }
            }
        }
        out[linear] = narrow<T>(acc);
    }
}

template <Arity A, typename T, typename Index>
__global__ void __launch_bounds__(kThreadsPerBlock)
    generic_einsum_kernel(const GenericEinsumPlan plan, const EinsumInputs<T> in,
                          T* __restrict__ out) {
    const Index total = static_cast<Index>(plan.output_count);
    const Index stride = static_cast<Index>(gridDim.x) * blockDim.x;
    for (Index linear = static_cast<Index>(blockIdx.x) * blockDim.x + threadIdx.x; linear < total;
         linear += stride) {
        einsum_element<A, T, Index>(plan, in, out, linear);
    }
}

template <Arity A, typename T>
void launch_typed(const GenericEinsumPlan& plan, const void* const* inputs, void* output,
                  cudaStream_t stream) {
    EinsumInputs<T> in{};
    for (int input = 0; input < plan.num_inputs; ++input) {
        in.inputs[input] = static_cast<const T*>(inputs[input]);
    }
    const auto blocks = static_cast<unsigned>(
        std::min(kMaxBlocks, (plan.output_count + kThreadsPerBlock - 1) / kThreadsPerBlock));
    T* typed_output = static_cast<T*>(output);
    if (plan.output_count <= static_cast<int64_t>(UINT32_MAX / 2)) {
        generic_einsum_kernel<A, T, uint32_t>
            <<<blocks, kThreadsPerBlock, 0, stream>>>(plan, in, typed_output);
    } else {
        generic_einsum_kernel<A, T, uint64_t>
            <<<blocks, kThreadsPerBlock, 0, stream>>>(plan, in, typed_output);
    }
}

} // namespace

void emulate_generic_einsum(const GenericEinsumPlan& plan, ir::DType dtype,
                            const void* const* inputs, void* output) {
    dispatch_storage(dtype, [&](auto storage) {
        using T = decltype(storage);
        EinsumInputs<T> in{};
        for (int input = 0; input < plan.num_inputs; ++input) {
            in.inputs[input] = static_cast<const T*>(inputs[input]);
        }
        T* out = static_cast<T*>(output);
        for (int64_t linear = 0; linear < plan.output_count; ++linear) {
            if (plan.num_inputs == 1) {
                einsum_element<Arity::unary, T, int64_t>(plan, in, out, linear);
            } else if (plan.num_inputs == 2) {
                einsum_element<Arity::binary, T, int64_t>(plan, in, out, linear);
            } else {
                einsum_element<Arity::product, T, int64_t>(plan, in, out, linear);
            }
        }
        return 0;
    });
}

cudaError_t launch_generic_einsum(const GenericEinsumPlan& plan, ir::DType dtype,
                                  const void* const* inputs, void* output, cudaStream_t stream) {
    if (plan.output_count == 0) {
        return cudaSuccess;
    }
    dispatch_storage(dtype, [&](auto storage) {
        using T = decltype(storage);
        if (plan.num_inputs == 1) {
            launch_typed<Arity::unary, T>(plan, inputs, output, stream);
        } else if (plan.num_inputs == 2) {
            launch_typed<Arity::binary, T>(plan, inputs, output, stream);
        } else {
            launch_typed<Arity::product, T>(plan, inputs, output, stream);
        }
        return 0;
    });
    return cudaGetLastError();
}

} // namespace einsummable::kernels::cuda
