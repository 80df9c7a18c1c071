// Dense row-major blocks in host memory: region copies and storage conversions. Used wherever
// bytes of a block cross a boundary: the Plan's load/offload (runtime/plan.cc), the CPU backend's
// nodes and kernels (runtime/cpu, kernels/cpu).

#include "compiler/ir/dense_block.h"

#include <array>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

namespace einsummable::ir {

namespace {

// f16 and bf16 conversions, eight elements at a time with AVX2 and F16C where the CPU has them:
// the CPU backend converts every f16/bf16 tensor a kernel reads or writes (weights too, each
// run), and one element at a time in software that cost f16 plans 3x the time of f32 ones.
// Every result is bit for bit the scalar functions' (dtype.h): vectors holding a NaN (whose
// payloads the instructions treat otherwise) go through the scalar path. n8 = n rounded down to
// a multiple of 8; the callers convert the rest in software.
#if defined(__x86_64__) && defined(__GNUC__)
bool has_avx2_f16c() {
    static const bool supported = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
    }();
    return supported;
}

[[gnu::target("avx2,f16c")]] void half_to_f32_x8(bool half, const std::byte* src, float* dst,
                                                 int64_t n8) {
    const __m128i nan_above = _mm_set1_epi16(0x7c00);
    const __m128i abs_mask = _mm_set1_epi16(0x7fff);
    for (int64_t idx = 0; idx < n8; idx += 8) {
        const __m128i bits = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + idx * 2));
        if (!half) { // bf16: the upper half of an f32, exactly (NaNs included)
            const __m256i wide = _mm256_slli_epi32(_mm256_cvtepu16_epi32(bits), 16);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + idx), wide);
            continue;
        }
        // An f16 NaN: |bits| > 0x7c00 (signed 16-bit compare: |bits| <= 0x7fff).
        const __m128i nan = _mm_cmpgt_epi16(_mm_and_si128(bits, abs_mask), nan_above);
        if (_mm_movemask_epi8(nan) != 0) {
            for (int64_t lane = idx; lane < idx + 8; ++lane) {
                uint16_t one;
                std::memcpy(&one, src + lane * 2, sizeof(one));
                dst[lane] = f16_to_float(one);
            }
            continue;
        }
        _mm256_storeu_ps(dst + idx, _mm256_cvtph_ps(bits));
    }
}

[[gnu::target("avx2,f16c")]] void f32_to_half_x8(bool half, const float* src, std::byte* dst,
                                                 int64_t n8) {
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i infinity = _mm256_set1_epi32(0x7f800000);
    const __m256i round_base = _mm256_set1_epi32(0x7fff);
    const __m256i one = _mm256_set1_epi32(1);
    for (int64_t idx = 0; idx < n8; idx += 8) {
        const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + idx));
        const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), infinity);
        if (_mm256_movemask_epi8(nan) != 0) {
            for (int64_t lane = idx; lane < idx + 8; ++lane) {
                const uint16_t out = half ? float_to_f16(src[lane]) : float_to_bf16(src[lane]);
                std::memcpy(dst + lane * 2, &out, sizeof(out));
            }
            continue;
        }
        __m128i packed;
        if (half) {
            // Round to nearest even, as float_to_f16 (overflow to inf, subnormals exact).
            packed = _mm256_cvtps_ph(_mm256_castsi256_ps(bits),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        } else {
            // float_to_bf16: add 0x7fff plus the lowest kept bit, keep the upper half.
            const __m256i rounding =
                _mm256_add_epi32(round_base, _mm256_and_si256(_mm256_srli_epi32(bits, 16), one));
            const __m256i upper = _mm256_srli_epi32(_mm256_add_epi32(bits, rounding), 16);
            // Pack the 32-bit lanes (each < 0x10000) to 16 bits, in order.
            const __m256i words = _mm256_packus_epi32(upper, upper);
            packed = _mm256_castsi256_si128(_mm256_permute4x64_epi64(words, 0x08));
        }
        _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + idx * 2), packed);
    }
}
#endif

// Converts whole vectors where the CPU can; returns how many elements it converted.
int64_t half_to_f32_fast(bool half, const std::byte* src, float* dst, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_avx2_f16c()) {
        const int64_t n8 = n / 8 * 8;
        half_to_f32_x8(half, src, dst, n8);
        return n8;
    }
#endif
    return 0;
}

int64_t f32_to_half_fast(bool half, const float* src, std::byte* dst, int64_t n) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (has_avx2_f16c()) {
        const int64_t n8 = n / 8 * 8;
        f32_to_half_x8(half, src, dst, n8);
        return n8;
    }
#endif
    return 0;
}

} // namespace

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

namespace {

template <typename Int>
void integers_to_f32(const std::byte* src, float* dst, int64_t n) {
    for (int64_t idx = 0; idx < n; ++idx) {
        Int value;
        std::memcpy(&value, src + idx * sizeof(Int), sizeof(Int));
        dst[idx] = static_cast<float>(value);
    }
}

template <typename Int>
void f32_to_integers(DType dtype, const float* src, std::byte* dst, int64_t n) {
    for (int64_t idx = 0; idx < n; ++idx) {
        const auto value = static_cast<Int>(round_to_dtype(src[idx], dtype));
        std::memcpy(dst + idx * sizeof(Int), &value, sizeof(Int));
    }
}

} // namespace

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
        for (int64_t idx = half_to_f32_fast(half, src, dst, n); idx < n; ++idx) {
            uint16_t bits;
            std::memcpy(&bits, src + idx * sizeof(uint16_t), sizeof(uint16_t));
            dst[idx] = half ? f16_to_float(bits) : bf16_to_float(bits);
        }
        return;
    }
    case DType::i32:
        integers_to_f32<int32_t>(src, dst, n);
        return;
    case DType::i64:
        integers_to_f32<int64_t>(src, dst, n);
        return;
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
        for (int64_t idx = f32_to_half_fast(half, src, dst, n); idx < n; ++idx) {
            const uint16_t bits = half ? float_to_f16(src[idx]) : float_to_bf16(src[idx]);
            std::memcpy(dst + idx * sizeof(uint16_t), &bits, sizeof(uint16_t));
        }
        return;
    }
    case DType::i32:
        f32_to_integers<int32_t>(dtype, src, dst, n);
        return;
    case DType::i64:
        f32_to_integers<int64_t>(dtype, src, dst, n);
        return;
    }
}

} // namespace einsummable::ir
