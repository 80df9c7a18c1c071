// Dense row-major blocks in host memory: region copies and storage conversions. Used wherever
// bytes of a block cross a boundary: the Plan's load/offload (runtime/plan.cc), the CPU backend's
// nodes and kernels (runtime/cpu, kernels/cpu).

#include "compiler/ir/dense_block.h"

#include <array>
#include <cstring>

namespace einsummable::ir {

void copy_region(const std::byte* src, const Box& src_box, std::byte* dst, const Box& dst_box,
                 const Box& region, int64_t element_bytes) {
    const int rank = region.rank();
    if (region.empty()) {
        return;
    }
    if (rank == 0) {
        std::memcpy(dst, src, static_cast<size_t>(element_bytes));
        return;
    }
    // Trailing dimensions that the region covers whole in both blocks join the contiguous run.
    int run_dim = rank - 1; // dimensions [run_dim, rank) form one run
    int64_t run = region[rank - 1].size();
    while (run_dim > 0 && region[run_dim] == src_box[run_dim] &&
           region[run_dim] == dst_box[run_dim]) {
        --run_dim;
        run *= region[run_dim].size();
    }
    // Strides (in elements) of the outer dimensions, and the offsets of the region's origin.
    std::array<int64_t, 64> src_stride{};
    std::array<int64_t, 64> dst_stride{};
    int64_t src_step = 1;
    int64_t dst_step = 1;
    int64_t src_offset = 0;
    int64_t dst_offset = 0;
    for (int dim = rank - 1; dim >= 0; --dim) {
        src_stride[dim] = src_step;
        dst_stride[dim] = dst_step;
        src_offset += (region[dim].lower - src_box[dim].lower) * src_step;
        dst_offset += (region[dim].lower - dst_box[dim].lower) * dst_step;
        src_step *= src_box[dim].size();
        dst_step *= dst_box[dim].size();
    }
    const auto run_bytes = static_cast<size_t>(run * element_bytes);
    std::array<int64_t, 64> counter{};
    while (true) {
        std::memcpy(dst + dst_offset * element_bytes, src + src_offset * element_bytes, run_bytes);
        int dim = run_dim - 1;
        for (; dim >= 0; --dim) {
            src_offset += src_stride[dim];
            dst_offset += dst_stride[dim];
            if (++counter[dim] < region[dim].size()) {
                break;
            }
            src_offset -= src_stride[dim] * region[dim].size();
            dst_offset -= dst_stride[dim] * region[dim].size();
            counter[dim] = 0;
        }
        if (dim < 0) {
            return;
        }
    }
}

void to_f32(DType dtype, const std::byte* src, float* dst, int64_t n) {
    if (n <= 0) {
        return;
    }
    switch (dtype) {
    case DType::f32:
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    case DType::f64:
        for (int64_t idx = 0; idx < n; ++idx) {
            double value;
            std::memcpy(&value, src + idx * sizeof(double), sizeof(double));
            dst[idx] = static_cast<float>(value);
        }
        return;
    case DType::f16:
    case DType::bf16: {
        const bool half = dtype == DType::f16;
        for (int64_t idx = 0; idx < n; ++idx) {
            uint16_t bits;
            std::memcpy(&bits, src + idx * sizeof(uint16_t), sizeof(uint16_t));
            dst[idx] = half ? f16_to_float(bits) : bf16_to_float(bits);
        }
        return;
    }
    }
}

void from_f32(DType dtype, const float* src, std::byte* dst, int64_t n) {
    if (n <= 0) {
        return;
    }
    switch (dtype) {
    case DType::f32:
        std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
        return;
    case DType::f64:
        for (int64_t idx = 0; idx < n; ++idx) {
            const auto value = static_cast<double>(src[idx]);
            std::memcpy(dst + idx * sizeof(double), &value, sizeof(double));
        }
        return;
    case DType::f16:
    case DType::bf16: {
        const bool half = dtype == DType::f16;
        for (int64_t idx = 0; idx < n; ++idx) {
            const uint16_t bits = half ? float_to_f16(src[idx]) : float_to_bf16(src[idx]);
            std::memcpy(dst + idx * sizeof(uint16_t), &bits, sizeof(uint16_t));
        }
        return;
    }
    }
}

} // namespace einsummable::ir
