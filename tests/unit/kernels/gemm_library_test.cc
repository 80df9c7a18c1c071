// kernels/cpu/gemm.h: the library gemm computes what it says (row-major, transposes, alpha and
// beta, leading dimensions wider than the rows), and it runs kernels built for this CPU, never a
// generic fallback on a CPU with AVX2 or AVX-512 (Debian's OpenBLAS 0.3.21 ran its SSE3 kernels
// on CPUs it did not know).
//
// ctest also runs this binary with DNNL_MAX_CPU_ISA capping oneDNN (tests/unit/kernels/
// CMakeLists.txt); the family test then expects the capped family and below_cpu where the CPU
// runs more, which is what the daemon's start-up warning reports.

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"

namespace einsummable::kernels::cpu {
namespace {

// op(X)(row, col) of a row-major X with leading dimension ld.
float at(bool trans, const std::vector<float>& x, int ld, int row, int col) {
    return trans ? x[static_cast<size_t>(col) * ld + row] : x[static_cast<size_t>(row) * ld + col];
}

struct GemmCase {
    int m, n, k;
    bool a_trans, b_trans;
    float alpha, beta;
    int pad; // extra columns in every leading dimension
};

TEST(GemmLibrary, MatchesTheDefinitionInEveryLayout) {
    const unsigned seed = 20261206;
    std::printf("seed %u\n", seed);
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const GemmCase cases[] = {
        {1, 1, 1, false, false, 1.0f, 0.0f, 0},
        {3, 5, 7, false, false, 1.0f, 0.0f, 0},
        {16, 32, 64, false, false, 1.0f, 0.0f, 0},
        {16, 32, 64, false, true, 0.125f, 0.0f, 3},
        {33, 17, 9, true, false, 1.0f, 1.0f, 1},
        {64, 64, 64, true, true, -2.0f, 0.5f, 5},
        {130, 3, 257, false, true, 1.0f, 1.0f, 0},
        {2, 300, 40, true, false, 0.5f, -1.0f, 2},
        // A few rows against a large B transposed: computed as Cᵀ = B·Aᵀ and transposed back
        // (gemm.cc, swap_operands), with beta 0 and not, and padded leading dimensions.
        {16, 300, 260, false, true, 1.0f, 0.0f, 0},
        {5, 513, 256, false, true, -0.5f, 0.75f, 3},
    };
    for (const GemmCase& c : cases) {
        SCOPED_TRACE(::testing::Message() << c.m << "x" << c.n << "x" << c.k << " a_trans "
                                          << c.a_trans << " b_trans " << c.b_trans << " alpha "
                                          << c.alpha << " beta " << c.beta << " pad " << c.pad);
        const int a_rows = c.a_trans ? c.k : c.m, a_cols = c.a_trans ? c.m : c.k;
        const int b_rows = c.b_trans ? c.n : c.k, b_cols = c.b_trans ? c.k : c.n;
        const int lda = a_cols + c.pad, ldb = b_cols + c.pad, ldc = c.n + c.pad;
        std::vector<float> a(static_cast<size_t>(a_rows) * lda);
        std::vector<float> b(static_cast<size_t>(b_rows) * ldb);
        std::vector<float> out(static_cast<size_t>(c.m) * ldc);
        for (float& x : a) {
            x = value(rng);
        }
        for (float& x : b) {
            x = value(rng);
        }
        for (float& x : out) {
            x = value(rng);
        }
        const std::vector<float> before = out;
        ASSERT_TRUE(gemm_f32(c.a_trans, c.b_trans, c.m, c.n, c.k, c.alpha, a.data(), lda, b.data(),
                             ldb, c.beta, out.data(), ldc)
                        .ok());
        for (int row = 0; row < c.m; ++row) {
            for (int col = 0; col < ldc; ++col) {
                const size_t idx = static_cast<size_t>(row) * ldc + col;
                if (col >= c.n) { // padding is never written
                    EXPECT_EQ(out[idx], before[idx]) << "padding at " << row << "," << col;
                    continue;
                }
                double sum = 0.0;
                for (int kk = 0; kk < c.k; ++kk) {
                    sum += static_cast<double>(at(c.a_trans, a, lda, row, kk)) *
                           at(c.b_trans, b, ldb, kk, col);
                }
                const double expected =
                    c.alpha * sum + (c.beta == 0.0f ? 0.0 : c.beta * before[idx]);
                EXPECT_NEAR(out[idx], expected, 1e-5 * (c.k + 2)) << "at " << row << "," << col;
            }
        }
    }
}

TEST(GemmLibrary, ArgumentsItRefusesAreAnInternalErrorNamingTheShape) {
    std::vector<float> a(16), b(16), c(16);
    // lda below the row length of a row-major 4x4 A.
    const absl::Status status =
        gemm_f32(false, false, 4, 4, 4, 1.0f, a.data(), 2, b.data(), 4, 0.0f, c.data(), 4);
    ASSERT_FALSE(status.ok());
    EXPECT_EQ(status.code(), absl::StatusCode::kInternal);
    EXPECT_NE(status.message().find("m=4 n=4 k=4 lda=2"), std::string::npos) << status.message();
}

// The family oneDNN may use when DNNL_MAX_CPU_ISA caps it (its own names, any case), or the
// CPU's when there is no cap.
std::string capped_family(const std::string& cpu_family) {
    const char* cap = std::getenv("DNNL_MAX_CPU_ISA");
    if (cap == nullptr || absl::AsciiStrToLower(cap) == "all") {
        return cpu_family;
    }
    const std::string order[] = {"sse41", "avx", "avx2", "avx512_core"};
    const std::string capped = absl::AsciiStrToLower(cap);
    int cap_rank = -1, cpu_rank = -1;
    for (int rank = 0; rank < 4; ++rank) {
        if (capped.rfind(order[rank], 0) == 0) { // avx512_core_amx caps at avx512_core too
            cap_rank = rank;
        }
        if (cpu_family == order[rank]) {
            cpu_rank = rank;
        }
    }
    if (cap_rank < 0 || cpu_rank < 0) {
        return cpu_family;
    }
    return order[std::min(cap_rank, cpu_rank)];
}

// The test that fails where the library runs kernels below the CPU: on an AVX-512 machine the
// f32 kernels must be avx512_core, on an AVX2 one avx2.
TEST(GemmLibrary, RunsTheKernelsBuiltForThisCpu) {
    const GemmLibraryInfo& info = gemm_library_info();
    std::printf("%s\n", info.describe().c_str());
    EXPECT_EQ(info.library.rfind("oneDNN ", 0), 0u) << info.library;
    const std::string expected = capped_family(info.cpu_isa);
    EXPECT_EQ(info.f32_kernels, expected) << info.describe();
    EXPECT_EQ(info.below_cpu, expected != info.cpu_isa) << info.describe();
    if (std::getenv("DNNL_MAX_CPU_ISA") == nullptr) {
        EXPECT_FALSE(info.below_cpu) << "the gemm library runs " << info.f32_kernels
                                     << " kernels on a CPU that runs " << info.cpu_isa;
        EXPECT_NE(info.f32_kernels, "reference");
    }
    EXPECT_NE(info.describe().find(info.f32_kernels + " kernels"), std::string::npos);
}

} // namespace
} // namespace einsummable::kernels::cpu
