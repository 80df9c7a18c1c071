#pragma once

// Storage dtypes on the device, for .cu files (C++17): each storage type T names the type
// kernels compute in (f32, or f64 for f64 storage, as the CPU backend widens at its kernel
// boundary) and converts with round to nearest even, as ir::from_f32 does on the host.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

template <typename T>
struct StorageTraits {
    using Compute = float;
};
template <>
struct StorageTraits<double> {
    using Compute = double;
};

template <typename T>
using ComputeType = typename StorageTraits<T>::Compute;

__device__ __forceinline__ float to_compute(__half value) {
    return __half2float(value);
}
__device__ __forceinline__ float to_compute(__nv_bfloat16 value) {
    return __bfloat162float(value);
}
__device__ __forceinline__ float to_compute(float value) {
    return value;
}
__device__ __forceinline__ double to_compute(double value) {
    return value;
}

template <typename T>
__device__ __forceinline__ T from_compute(ComputeType<T> value);
template <>
__device__ __forceinline__ __half from_compute<__half>(float value) {
    return __float2half_rn(value);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_compute<__nv_bfloat16>(float value) {
    return __float2bfloat16_rn(value);
}
template <>
__device__ __forceinline__ float from_compute<float>(float value) {
    return value;
}
template <>
__device__ __forceinline__ double from_compute<double>(double value) {
    return value;
}

// Math in the compute type: f32 calls stay f32 (expf, not a promotion to double), f64 calls f64.
__device__ __forceinline__ float compute_exp(float value) {
    return expf(value);
}
__device__ __forceinline__ double compute_exp(double value) {
    return exp(value);
}
__device__ __forceinline__ float compute_sqrt(float value) {
    return sqrtf(value);
}
__device__ __forceinline__ double compute_sqrt(double value) {
    return sqrt(value);
}

template <typename C>
__device__ __forceinline__ C negative_infinity() {
    return -static_cast<C>(INFINITY);
}

// Calls fn(T{}) with the device storage type of `dtype` and returns its result: the one place
// host code maps ir::DType onto template instantiations.
template <typename Fn>
auto dispatch_storage(ir::DType dtype, Fn&& fn) {
    switch (dtype) {
    case ir::DType::f16:
        return fn(__half{});
    case ir::DType::bf16:
        return fn(__nv_bfloat16{});
    case ir::DType::f32:
        return fn(float{});
    case ir::DType::f64:
        break;
    case ir::DType::i32: // integer tensors reach no arithmetic kernel: make_operator refuses
    case ir::DType::i64: // them everywhere but embedding's ids, which its kernel reads itself
        break;
    }
    return fn(double{});
}

} // namespace einsummable::kernels::cuda
