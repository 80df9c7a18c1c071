#include "kernels/cpu/gemm.h"

#include <array>
#include <atomic>
#include <utility>
#include <vector>

#include <omp.h>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl.h"

namespace einsummable::kernels::cpu {

namespace {

// oneDNN's OpenMP build sizes its parallel regions by the calling thread's OpenMP thread
// count, which starts at the core count. Every caller is one virtual device's worker, whose
// core is its own: one thread each, set once per thread (OpenMP keeps it per thread).
void use_one_thread() {
    thread_local bool set = false;
    if (!set) {
        omp_set_num_threads(1);
        set = true;
    }
}

// The instruction-set families in the order each includes the one before, as oneDNN's f32 gemm
// picks its kernels (the highest the library's ISA includes). The masks are oneDNN's own ISA
// values, each a superset of the bits of the one before, the same in oneDNN 2 and 3.
struct IsaFamily {
    const char* name;
    unsigned mask;
};
constexpr std::array<IsaFamily, 4> kGemmFamilies{{
    {"avx512_core", dnnl_cpu_isa_avx512_core},
    {"avx2", dnnl_cpu_isa_avx2},
    {"avx", dnnl_cpu_isa_avx},
    {"sse41", dnnl_cpu_isa_sse41},
}};

bool includes(unsigned isa, unsigned mask) {
    return (isa & mask) == mask;
}

// The library's ISA by name, the most specific one it includes.
std::string library_isa_name(unsigned isa) {
    constexpr std::array<std::pair<const char*, unsigned>, 8> names{{
        {"avx512_core_amx", dnnl_cpu_isa_avx512_core_amx},
        {"avx512_core_bf16", dnnl_cpu_isa_avx512_core_bf16},
        {"avx512_core_vnni", dnnl_cpu_isa_avx512_core_vnni},
        {"avx512_core", dnnl_cpu_isa_avx512_core},
        {"avx2", dnnl_cpu_isa_avx2},
        {"avx", dnnl_cpu_isa_avx},
        {"sse41", dnnl_cpu_isa_sse41},
        {"none", 0},
    }};
    for (const auto& [name, mask] : names) {
        if (includes(isa, mask)) {
            return name;
        }
    }
    return "none";
}

// The highest family this CPU and its OS run (GCC's cpuid checks include the OS's XSAVE state),
// by the same definitions as oneDNN's: avx512_core is AVX-512 F, BW, VL and DQ.
unsigned cpu_family_mask() {
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
        return dnnl_cpu_isa_avx512_core;
    }
    if (__builtin_cpu_supports("avx2")) {
        return dnnl_cpu_isa_avx2;
    }
    if (__builtin_cpu_supports("avx")) {
        return dnnl_cpu_isa_avx;
    }
    if (__builtin_cpu_supports("sse4.1")) {
        return dnnl_cpu_isa_sse41;
    }
#endif
    return 0;
}

const char* family_name(unsigned isa) {
    for (const IsaFamily& family : kGemmFamilies) {
        if (includes(isa, family.mask)) {
            return family.name;
        }
    }
    return "reference"; // oneDNN's portable C gemm
}

std::atomic<int64_t> library_calls{0};

GemmLibraryInfo detect() {
    GemmLibraryInfo info;
    const dnnl_version_t* version = dnnl_version();
    info.library =
        absl::StrCat("oneDNN ", version->major, ".", version->minor, ".", version->patch);
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    info.library_isa = library_isa_name(isa);
    info.f32_kernels = family_name(isa);
    const unsigned cpu = cpu_family_mask();
    info.cpu_isa = family_name(cpu);
    // Below the CPU when the CPU's family is not among the ones the kernels' ISA includes.
    info.below_cpu = cpu != 0 && !includes(isa, cpu);
    return info;
}

// Whether C = A·Bᵀ runs faster as Cᵀ = B·Aᵀ, then transposed: a few rows of A against a large
// B stored [n, k] — a decode step's tokens against a projection's weights in transformers'
// [out, in] layout. oneDNN 2.6's kernels for that shape take 30–40 % longer than for the swapped
// one on AVX-512 (16 rows against 512×512 … 8000×512 weights, one thread: bench notes in
// bench/README.md "serving/generate"); from ~128 rows on they are as fast, and past that the
// transposition costs more than it saves.
bool swap_operands(bool a_trans, bool b_trans, int m, int n, int k) {
    return b_trans && !a_trans && m >= 2 && m <= 64 && n >= 256 && k >= 256;
}

std::vector<float>& swap_scratch() {
    thread_local std::vector<float> scratch;
    return scratch;
}

} // namespace

absl::Status gemm_f32(bool a_trans, bool b_trans, int m, int n, int k, float alpha, const float* a,
                      int lda, const float* b, int ldb, float beta, float* c, int ldc) {
    use_one_thread();
    library_calls.fetch_add(1, std::memory_order_relaxed);
    const bool swapped = swap_operands(a_trans, b_trans, m, n, k);
    std::vector<float>& scratch = swap_scratch();
    if (swapped) {
        scratch.resize(static_cast<size_t>(m) * static_cast<size_t>(n));
    }
    // oneDNN's sgemm is row-major, unlike BLAS's Fortran convention. Swapped: T [n, m] = B·Aᵀ.
    const dnnl_status_t status =
        swapped ? dnnl_sgemm('N', 'T', n, m, k, alpha, b, ldb, a, lda, 0.0f, scratch.data(), m)
                : dnnl_sgemm(a_trans ? 'T' : 'N', b_trans ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                             ldb, beta, c, ldc);
    if (swapped && status == dnnl_success) {
        // C = Tᵀ (+ beta·C; beta 0 ignores what C held, as BLAS does).
        for (int i = 0; i < m; ++i) {
            float* row = c + static_cast<ptrdiff_t>(i) * ldc;
            for (int j = 0; j < n; ++j) {
                const float value = scratch[static_cast<size_t>(j) * m + i];
                row[j] = beta == 0.0f ? value : value + beta * row[j];
            }
        }
    }
    if (status != dnnl_success) {
        return absl::InternalError(absl::StrCat(
            "oneDNN sgemm refused m=", m, " n=", n, " k=", k, " lda=", lda, " ldb=", ldb,
            " ldc=", ldc, (a_trans ? " A transposed" : ""), (b_trans ? " B transposed" : ""),
            " (status ", static_cast<int>(status), ")"));
    }
    return absl::OkStatus();
}

int64_t gemm_library_calls() {
    return library_calls.load(std::memory_order_relaxed);
}

std::string GemmLibraryInfo::describe() const {
    return absl::StrCat(library, " sgemm, ", f32_kernels, " kernels (CPU: ", cpu_isa,
                        "; library ISA ", library_isa, ")",
                        below_cpu ? " - below what this CPU runs" : "");
}

const GemmLibraryInfo& gemm_library_info() {
    static const GemmLibraryInfo info = detect();
    return info;
}

} // namespace einsummable::kernels::cpu
