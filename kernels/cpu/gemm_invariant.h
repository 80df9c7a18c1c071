#pragma once

namespace einsummable::kernels::cpu {

// C = op(A)·op(B) (row-major, C m×n, the inner dimension k; op(X) is Xᵀ where x_trans) for
// batch-invariant plans (BatchInvariantScope, kernels.h): every element is its products added in k
// order, starting from zero, in one accumulator, by the same instructions for every element of
// every call. So an element's bits depend on its row of op(A) and its column of op(B) only, never
// on m, n or the block around it, which a gemm library does not promise (OpenBLAS's edge rows and
// columns take other kernels). The order is fixed; the speed comes from register tiles: op(B) is
// packed once into panels of one vector's width and op(A) a few rows at a time, zero-padded, and
// each tile of C stays in registers over the whole of k.
//
// The instructions are chosen once per process from the CPU (AVX-512 with FMA, AVX2 with FMA,
// else the baseline's SSE2 without FMA), so bits agree within a process, which is what
// batching needs (a batch and a request alone run in the same daemon); they may differ between
// machines, as a library's do.
void gemm_invariant(bool a_trans, bool b_trans, int m, int n, int k, const float* a, int lda,
                    const float* b, int ldb, float* c, int ldc);
void gemm_invariant(bool a_trans, bool b_trans, int m, int n, int k, const double* a, int lda,
                    const double* b, int ldb, double* c, int ldc);

// The instruction sets gemm_invariant has, in order: each CPU that runs one runs those before.
enum class GemmIsa { baseline, avx2, avx512 };

// The instruction set gemm_invariant uses in this process: the last this CPU runs.
GemmIsa gemm_invariant_isa();
bool gemm_isa_supported(GemmIsa isa);
const char* gemm_isa_name(GemmIsa isa); // "avx512", "avx2", "baseline"

// gemm_invariant with a given instruction set, which this CPU must support: for tests, so every
// set this CPU runs is checked, not only the one a process uses.
void gemm_invariant_using(GemmIsa isa, bool a_trans, bool b_trans, int m, int n, int k,
                          const float* a, int lda, const float* b, int ldb, float* c, int ldc);
void gemm_invariant_using(GemmIsa isa, bool a_trans, bool b_trans, int m, int n, int k,
                          const double* a, int lda, const double* b, int ldb, double* c, int ldc);

} // namespace einsummable::kernels::cpu
