// kernels/cpu/gemm_invariant.h (the batch-invariant plans' contractions) against the library
// gemm the other plans use (kernels/cpu/gemm.h: oneDNN's sgemm) on one thread, side by side: the
// two take turns, round after round, on the same operands, and the table gives each one's median
// GFLOP/s and the median of the per-round ratios. Shapes: the projections of bench/serving's block
// (d_model 256, kv 64, d_ff 512) at one request's 16 tokens and at a batch of 16 such requests, and
// a square one.
//
//     build/bin/gemm_invariant_bench [rounds]

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_invariant.h"

namespace {

struct Shape {
    const char* name;
    int m, n, k;
    bool b_trans;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Seconds per call of `run`, over enough calls to take about 20 ms.
template <typename F>
double seconds_per_call(F&& run) {
    using Clock = std::chrono::steady_clock;
    int calls = 0;
    const Clock::time_point start = Clock::now();
    Clock::time_point now;
    do {
        run();
        ++calls;
        now = Clock::now();
    } while (now - start < std::chrono::milliseconds(20));
    return std::chrono::duration<double>(now - start).count() / calls;
}

} // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 15;
    const Shape shapes[] = {
        {"q/o proj, 16 tokens", 16, 256, 256, false},
        {"ffn up, 16 tokens", 16, 512, 256, false},
        {"ffn down, 16 tokens", 16, 256, 512, false},
        {"q/o proj, 256 tokens", 256, 256, 256, false},
        {"kv proj, 256 tokens", 256, 64, 256, false},
        {"ffn up, 256 tokens", 256, 512, 256, false},
        {"x·Wᵀ, 256 tokens", 256, 256, 256, true},
        {"square 512", 512, 512, 512, false},
    };
    std::printf(
        "gemm_invariant (%s) against %s, one thread, %d rounds, medians\n\n",
        einsummable::kernels::cpu::gemm_isa_name(einsummable::kernels::cpu::gemm_invariant_isa()),
        einsummable::kernels::cpu::gemm_library_info().describe().c_str(), rounds);
    std::printf(
        "| shape | m | n | k | invariant GFLOP/s | library GFLOP/s | invariant / library |\n");
    std::printf("|---|---|---|---|---|---|---|\n");
    std::mt19937 rng(20261203);
    std::normal_distribution<float> normal;
    for (const Shape& s : shapes) {
        std::vector<float> a(static_cast<size_t>(s.m) * s.k), b(static_cast<size_t>(s.k) * s.n);
        std::vector<float> c(static_cast<size_t>(s.m) * s.n);
        for (float& v : a) {
            v = normal(rng);
        }
        for (float& v : b) {
            v = normal(rng);
        }
        const int ldb = s.b_trans ? s.k : s.n;
        const double flops = 2.0 * s.m * s.n * s.k;
        std::vector<double> invariant, blas, ratio;
        for (int round = 0; round < rounds; ++round) {
            const double t_inv = seconds_per_call([&] {
                einsummable::kernels::cpu::gemm_invariant(false, s.b_trans, s.m, s.n, s.k, a.data(),
                                                          s.k, b.data(), ldb, c.data(), s.n);
            });
            const double t_blas = seconds_per_call([&] {
                (void)einsummable::kernels::cpu::gemm_f32(false, s.b_trans, s.m, s.n, s.k, 1.0f,
                                                          a.data(), s.k, b.data(), ldb, 0.0f,
                                                          c.data(), s.n);
            });
            invariant.push_back(flops / t_inv / 1e9);
            blas.push_back(flops / t_blas / 1e9);
            ratio.push_back(t_blas / t_inv);
        }
        std::printf("| %s | %d | %d | %d | %.1f | %.1f | %.2f |\n", s.name, s.m, s.n, s.k,
                    median(invariant), median(blas), median(ratio));
    }
    return 0;
}
