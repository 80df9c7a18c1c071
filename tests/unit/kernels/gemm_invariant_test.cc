// kernels/cpu/gemm_invariant.h: the batch-invariant gemm against a long-double reference, and an
// element's bits the same in every block it is computed in (rows alone, column ranges, blocks
// of any shape, with any leading dimensions), for every combination of transposes and shapes
// around the kernels' tile edges, with every instruction set this CPU runs.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kernels/cpu/gemm_invariant.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::kernels::cpu {
namespace {

// A row-major matrix op(X) of rows×cols stored with leading dimension ld (X itself is
// cols×rows when transposed).
template <typename T>
struct Operand {
    bool trans = false;
    int rows = 0;
    int cols = 0;
    int ld = 0;
    std::vector<T> data;

    T at(int row, int col) const {
        return trans ? data[static_cast<size_t>(col) * ld + row]
                     : data[static_cast<size_t>(row) * ld + col];
    }
    // Where op(X)'s block starting at (row, col) begins, keeping ld.
    const T* from(int row, int col) const {
        return data.data() +
               (trans ? static_cast<size_t>(col) * ld + row : static_cast<size_t>(row) * ld + col);
    }
};

template <typename T>
Operand<T> random_operand(bool trans, int rows, int cols, std::mt19937_64& rng) {
    Operand<T> x;
    x.trans = trans;
    x.rows = rows;
    x.cols = cols;
    const int stored_rows = trans ? cols : rows;
    const int stored_cols = trans ? rows : cols;
    x.ld = stored_cols + static_cast<int>(rng() % 3); // leading dimensions wider than needed too
    x.data.resize(static_cast<size_t>(stored_rows) * x.ld);
    std::normal_distribution<double> normal;
    for (T& v : x.data) {
        v = static_cast<T>(normal(rng));
    }
    return x;
}

// C = op(A)·op(B) over the block rows [r0, r0+m), columns [c0, c0+n), into a fresh m×n array
// with leading dimension ldc.
template <typename T>
std::vector<T> block_product(GemmIsa isa, const Operand<T>& a, const Operand<T>& b, int r0, int m,
                             int c0, int n, int ldc) {
    std::vector<T> c(static_cast<size_t>(m) * ldc, T{-7}); // never read: every element is set
    gemm_invariant_using(isa, a.trans, b.trans, m, n, a.cols, a.from(r0, 0), a.ld, b.from(0, c0),
                         b.ld, c.data(), ldc);
    return c;
}

template <typename T>
bool same_bits(T x, T y) {
    return std::memcmp(&x, &y, sizeof(T)) == 0;
}

int random_extent(std::mt19937_64& rng) {
    // Around the tile edges (4 and 8 rows; 8, 16 and 32 columns) and beyond.
    static constexpr int kExtents[] = {1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 64, 70};
    return kExtents[rng() % std::size(kExtents)];
}

// The instruction sets this CPU runs; the last is the one gemm_invariant uses.
std::vector<GemmIsa> supported_isas() {
    std::vector<GemmIsa> isas;
    for (GemmIsa isa : {GemmIsa::baseline, GemmIsa::avx2, GemmIsa::avx512}) {
        if (gemm_isa_supported(isa)) {
            isas.push_back(isa);
        }
    }
    return isas;
}

template <typename T>
void check_random_products(GemmIsa isa, const char* type, double tolerance) {
    const uint64_t seed = ir::testing::test_seed() + (sizeof(T) == 4 ? 11 : 23);
    std::cout << type << " seed " << seed << ", instructions " << gemm_isa_name(isa) << "\n";
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 300; ++trial) {
        const bool a_trans = trial & 1;
        const bool b_trans = trial & 2;
        const int m = random_extent(rng);
        const int n = random_extent(rng);
        const int k = random_extent(rng);
        SCOPED_TRACE(testing::Message()
                     << type << " seed " << seed << " trial " << trial << ": m=" << m << " n=" << n
                     << " k=" << k << " a_trans=" << a_trans << " b_trans=" << b_trans);
        const Operand<T> a = random_operand<T>(a_trans, m, k, rng);
        const Operand<T> b = random_operand<T>(b_trans, k, n, rng);
        const int ldc = n + static_cast<int>(rng() % 3);
        const std::vector<T> c = block_product(isa, a, b, 0, m, 0, n, ldc);
        for (int i = 0; i < m; ++i) {
            for (int j = 0; j < n; ++j) {
                long double want = 0;
                long double magnitude = 0;
                for (int kk = 0; kk < k; ++kk) {
                    const long double term = static_cast<long double>(a.at(i, kk)) * b.at(kk, j);
                    want += term;
                    magnitude += std::fabs(term);
                }
                ASSERT_NEAR(static_cast<double>(c[static_cast<size_t>(i) * ldc + j]),
                            static_cast<double>(want), tolerance * static_cast<double>(magnitude))
                    << "element (" << i << ", " << j << ")";
            }
        }

        // The same elements computed in a random sub-block (down to one row or one column)
        // have the same bits.
        const int r0 = static_cast<int>(rng() % m);
        const int c0 = static_cast<int>(rng() % n);
        const int sub_m = 1 + static_cast<int>(rng() % (m - r0));
        const int sub_n = 1 + static_cast<int>(rng() % (n - c0));
        const std::vector<T> sub = block_product(isa, a, b, r0, sub_m, c0, sub_n, sub_n);
        for (int i = 0; i < sub_m; ++i) {
            for (int j = 0; j < sub_n; ++j) {
                ASSERT_TRUE(same_bits(sub[static_cast<size_t>(i) * sub_n + j],
                                      c[static_cast<size_t>(r0 + i) * ldc + c0 + j]))
                    << "element (" << r0 + i << ", " << c0 + j << ") in the block at (" << r0
                    << ", " << c0 << ") of " << sub_m << "x" << sub_n;
            }
        }
    }
}

TEST(GemmInvariantTest, F32MatchesTheReferenceAndEveryBlockGivesTheSameBits) {
    for (GemmIsa isa : supported_isas()) {
        check_random_products<float>(isa, "f32", 1e-5);
    }
}

TEST(GemmInvariantTest, F64MatchesTheReferenceAndEveryBlockGivesTheSameBits) {
    for (GemmIsa isa : supported_isas()) {
        check_random_products<double>(isa, "f64", 1e-13);
    }
}

// A request's rows alone and the same rows inside a batch many times its size, which is what
// a batched execution computes: identical bits row by row.
TEST(GemmInvariantTest, ARowAloneEqualsTheSameRowInABatch) {
    const uint64_t seed = ir::testing::test_seed() + 37;
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const int batch_rows = 16 * 13;
    const int k = 256;
    const int n = 96;
    const Operand<float> a = random_operand<float>(false, batch_rows, k, rng);
    const Operand<float> b = random_operand<float>(false, k, n, rng);
    for (GemmIsa isa : supported_isas()) {
        const std::vector<float> batch = block_product(isa, a, b, 0, batch_rows, 0, n, n);
        for (int start = 0; start < batch_rows; start += 13) {
            const std::vector<float> alone = block_product(isa, a, b, start, 13, 0, n, n);
            ASSERT_EQ(std::memcmp(alone.data(), batch.data() + static_cast<size_t>(start) * n,
                                  alone.size() * sizeof(float)),
                      0)
                << gemm_isa_name(isa) << ": rows " << start << ".." << start + 12;
        }
    }
}

} // namespace
} // namespace einsummable::kernels::cpu
