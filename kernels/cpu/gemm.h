#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace einsummable::kernels::cpu {

// The CPU kernels' one route to a tuned f32 gemm (contractions, attention's score and value
// tiles): oneDNN's sgemm, on the calling thread. oneDNN chooses its kernels from the CPU's
// instruction sets (cpuid), not from a list of known CPU models, so a CPU newer than the
// library still gets the AVX-512 or AVX2 kernels it can run. Debian's OpenBLAS 0.3.21, used
// before, recognises CPUs by model number and fell back to its SSE3 kernels (3.5x slower) on
// models it did not know (docs/runtime.md "The gemm library"). Static TLS of a few bytes, where
// OpenBLAS's 60 KB came out of every thread's stack (a thread started with a small fixed stack,
// as civetweb's were, had too little left).
//
// Row-major: C = alpha·op(A)·op(B) + beta·C, C m×n, op(X) = Xᵀ where x_trans. Batch-invariant
// plans never come here (gemm_invariant.h): a library's results for an element may depend on
// where it lies in its block. Internal naming the shape when the library refuses the arguments
// (a bug in the caller).
absl::Status gemm_f32(bool a_trans, bool b_trans, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc);

// How many times gemm_f32 has run in this process: tests check that batch-invariant plans never
// call it.
int64_t gemm_library_calls();

// What runs gemm_f32 in this process, for the daemon's log and GetServerInfo.
struct GemmLibraryInfo {
    std::string library;     // "oneDNN 2.6.3"
    std::string library_isa; // the instruction set the library dispatches to: "avx512_core_amx"
    std::string f32_kernels; // the family of its f32 gemm kernels: "avx512_core", "avx2", ...
    std::string cpu_isa;     // the best family this CPU (and OS) runs, from cpuid
    // The f32 kernels use less than the CPU runs (an AVX-512 CPU on AVX2 kernels, an AVX2 CPU
    // on SSE4.1 ones): a library that does not know the CPU, or DNNL_MAX_CPU_ISA set.
    bool below_cpu = false;
    // One line: "oneDNN 2.6.3 sgemm, avx512_core kernels (CPU: avx512_core; library ISA
    // avx512_core_amx)".
    std::string describe() const;
};
const GemmLibraryInfo& gemm_library_info();

} // namespace einsummable::kernels::cpu
