#include "kernels/cpu/gemm_invariant.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels/cpu/scratch.h"

namespace einsummable::kernels::cpu {

namespace {

// Reads op(X)(row, col) of a row-major X with leading dimension ld.
template <typename T>
T at(bool trans, const T* x, int ld, int row, int col) {
    return trans ? x[static_cast<int64_t>(col) * ld + row]
                 : x[static_cast<int64_t>(row) * ld + col];
}

// The kernel for one instruction set: tiles of kRows rows of C by kVecs vectors of kLanes
// elements, every tile of every call the same instructions over the same zero-padded shape,
// so padding rows and columns (dropped when the tile is stored) are what makes an edge
// element's arithmetic that of an inner one. Inlined into each instruction set's entry below,
// which compiles it for that set.
template <typename T, int kLanes, int kRows, int kVecs>
[[gnu::always_inline]] inline void gemm_tiled(bool a_trans, bool b_trans, int m, int n, int k,
                                              const T* a, int lda, const T* b, int ldb, T* c,
                                              int ldc) {
    typedef T Vec __attribute__((vector_size(sizeof(T) * kLanes)));
    constexpr int kWidth = kLanes * kVecs; // columns of a tile and of a packed panel of op(B)
    const int panels = (n + kWidth - 1) / kWidth;
    const int64_t panel_size = static_cast<int64_t>(k) * kWidth;

    // op(B) as panels of kWidth columns, each k rows of kWidth contiguous elements.
    T* packed_b = scratch<T>(ScratchSlot::invariant_b, panels * panel_size);
    for (int p = 0; p < panels; ++p) {
        T* panel = packed_b + p * panel_size;
        for (int kk = 0; kk < k; ++kk) {
            for (int j = 0; j < kWidth; ++j) {
                const int col = p * kWidth + j;
                panel[static_cast<int64_t>(kk) * kWidth + j] =
                    col < n ? at(b_trans, b, ldb, kk, col) : T{0};
            }
        }
    }
    // kRows rows of op(A) at a time, k-major: the kRows values that meet one row of a panel.
    T* packed_a = scratch<T>(ScratchSlot::invariant_a, static_cast<size_t>(k) * kRows);
    for (int row0 = 0; row0 < m; row0 += kRows) {
        const int rows = std::min(kRows, m - row0);
        for (int kk = 0; kk < k; ++kk) {
            for (int r = 0; r < kRows; ++r) {
                packed_a[static_cast<int64_t>(kk) * kRows + r] =
                    r < rows ? at(a_trans, a, lda, row0 + r, kk) : T{0};
            }
        }
        for (int p = 0; p < panels; ++p) {
            const T* panel = packed_b + p * panel_size;
            Vec acc[kRows][kVecs] = {};
            for (int kk = 0; kk < k; ++kk) {
                Vec b_row[kVecs];
                std::memcpy(b_row, panel + static_cast<int64_t>(kk) * kWidth, sizeof(b_row));
                const T* a_col = packed_a + static_cast<int64_t>(kk) * kRows;
                for (int r = 0; r < kRows; ++r) {
                    for (int v = 0; v < kVecs; ++v) {
                        acc[r][v] += a_col[r] * b_row[v];
                    }
                }
            }
            T tile[kRows][kWidth];
            std::memcpy(tile, acc, sizeof(tile));
            const int cols = std::min(kWidth, n - p * kWidth);
            for (int r = 0; r < rows; ++r) {
                std::copy(tile[r], tile[r] + cols,
                          c + static_cast<int64_t>(row0 + r) * ldc + p * kWidth);
            }
        }
    }
}

#define EINSUMMABLE_GEMM_INVARIANT_ARGS                                                            \
    bool a_trans, bool b_trans, int m, int n, int k, const T *a, int lda, const T *b, int ldb,     \
        T *c, int ldc
#define EINSUMMABLE_GEMM_INVARIANT_PASS a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc

// The baseline (x86-64's SSE2, or any other CPU): 4 rows by two 16-byte vectors.
template <typename T>
void gemm_baseline(EINSUMMABLE_GEMM_INVARIANT_ARGS) {
    gemm_tiled<T, 16 / sizeof(T), 4, 2>(EINSUMMABLE_GEMM_INVARIANT_PASS);
}

#if defined(__x86_64__) && defined(__GNUC__)
// 4 rows by two 32-byte vectors: 8 of AVX2's 16 registers accumulate.
template <typename T>
[[gnu::target("avx2,fma")]] void gemm_avx2(EINSUMMABLE_GEMM_INVARIANT_ARGS) {
    gemm_tiled<T, 32 / sizeof(T), 4, 2>(EINSUMMABLE_GEMM_INVARIANT_PASS);
}

// 8 rows by two 64-byte vectors: 16 of AVX-512's 32 registers accumulate.
template <typename T>
[[gnu::target("avx512f,fma")]] void gemm_avx512(EINSUMMABLE_GEMM_INVARIANT_ARGS) {
    gemm_tiled<T, 64 / sizeof(T), 8, 2>(EINSUMMABLE_GEMM_INVARIANT_PASS);
}

GemmIsa detect_isa() {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma")) {
        return GemmIsa::avx512;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        return GemmIsa::avx2;
    }
    return GemmIsa::baseline;
}
#else
GemmIsa detect_isa() {
    return GemmIsa::baseline;
}
#endif

template <typename T>
void dispatch(GemmIsa isa, EINSUMMABLE_GEMM_INVARIANT_ARGS) {
    switch (isa) {
#if defined(__x86_64__) && defined(__GNUC__)
    case GemmIsa::avx512:
        return gemm_avx512<T>(EINSUMMABLE_GEMM_INVARIANT_PASS);
    case GemmIsa::avx2:
        return gemm_avx2<T>(EINSUMMABLE_GEMM_INVARIANT_PASS);
#endif
    default:
        return gemm_baseline<T>(EINSUMMABLE_GEMM_INVARIANT_PASS);
    }
}

} // namespace

GemmIsa gemm_invariant_isa() {
    static const GemmIsa chosen = detect_isa(); // once, so every call takes the same instructions
    return chosen;
}

bool gemm_isa_supported(GemmIsa isa) {
    return static_cast<int>(isa) <= static_cast<int>(gemm_invariant_isa());
}

const char* gemm_isa_name(GemmIsa isa) {
    switch (isa) {
    case GemmIsa::avx512:
        return "avx512";
    case GemmIsa::avx2:
        return "avx2";
    default:
        return "baseline";
    }
}

void gemm_invariant(bool a_trans, bool b_trans, int m, int n, int k, const float* a, int lda,
                    const float* b, int ldb, float* c, int ldc) {
    dispatch<float>(gemm_invariant_isa(), a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
}

void gemm_invariant(bool a_trans, bool b_trans, int m, int n, int k, const double* a, int lda,
                    const double* b, int ldb, double* c, int ldc) {
    dispatch<double>(gemm_invariant_isa(), a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
}

void gemm_invariant_using(GemmIsa isa, bool a_trans, bool b_trans, int m, int n, int k,
                          const float* a, int lda, const float* b, int ldb, float* c, int ldc) {
    dispatch<float>(isa, a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
}

void gemm_invariant_using(GemmIsa isa, bool a_trans, bool b_trans, int m, int n, int k,
                          const double* a, int lda, const double* b, int ldb, double* c, int ldc) {
    dispatch<double>(isa, a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
}

} // namespace einsummable::kernels::cpu
