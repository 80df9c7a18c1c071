#include "kernels/cpu/contraction.h"

#include <algorithm>
#include <climits>
#include <cstring>

#include "compiler/support/status_macros.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_invariant.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/scratch.h"

namespace einsummable::kernels::cpu {

namespace {

// f32: the tuned library (gemm.h), except in batch-invariant mode.
absl::Status gemm(bool a_trans, bool b_trans, int m, int n, int k, const float* a, int lda,
                  const float* b, int ldb, float* c, int ldc) {
    if (batch_invariant()) {
        gemm_invariant(a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
        return absl::OkStatus();
    }
    return gemm_f32(a_trans, b_trans, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

// f64 (run_block, the double-precision reference): the fixed-order kernel, always. oneDNN has
// no f64 gemm, and a reference whose sums have one order on every CPU is easier to trust.
absl::Status gemm(bool a_trans, bool b_trans, int m, int n, int k, const double* a, int lda,
                  const double* b, int ldb, double* c, int ldc) {
    gemm_invariant(a_trans, b_trans, m, n, k, a, lda, b, ldb, c, ldc);
    return absl::OkStatus();
}

thread_local bool batch_invariant_mode = false;

} // namespace

BatchInvariantScope::BatchInvariantScope(bool on) : previous_(batch_invariant_mode) {
    batch_invariant_mode = on;
}

BatchInvariantScope::~BatchInvariantScope() {
    batch_invariant_mode = previous_;
}

bool batch_invariant() {
    return batch_invariant_mode;
}

bool fits_gemm(const ContractionPlan& plan, const IndexExtents& extents) {
    const GemmShape shape = gemm_shape(plan, extents);
    // Leading dimensions are m, n or k, so these bound every int argument.
    return shape.m <= INT_MAX && shape.n <= INT_MAX && shape.k <= INT_MAX;
}

template <typename T>
void permute(const T* src, const std::string& src_term, const std::string& dst_term,
             const IndexExtents& extents, T* dst) {
    const int rank = static_cast<int>(dst_term.size());
    if (rank == 0) {
        dst[0] = src[0];
        return;
    }
    std::array<int64_t, 128> src_stride{};
    int64_t stride = 1;
    for (int dim = static_cast<int>(src_term.size()) - 1; dim >= 0; --dim) {
        src_stride[static_cast<unsigned char>(src_term[dim])] = stride;
        stride *= extents[static_cast<unsigned char>(src_term[dim])];
    }
    // At most 52 distinct index letters per term.
    std::array<int64_t, 64> extent{};
    std::array<int64_t, 64> step{};
    std::array<int64_t, 64> counter{};
    for (int dim = 0; dim < rank; ++dim) {
        extent[dim] = extents[static_cast<unsigned char>(dst_term[dim])];
        step[dim] = src_stride[static_cast<unsigned char>(dst_term[dim])];
    }
    const int64_t inner = extent[rank - 1];
    const int64_t inner_step = step[rank - 1];
    int64_t src_offset = 0;
    while (true) {
        const T* from = src + src_offset;
        if (inner_step == 1) {
            std::memcpy(dst, from, static_cast<size_t>(inner) * sizeof(T));
        } else {
            for (int64_t idx = 0; idx < inner; ++idx) {
                dst[idx] = from[idx * inner_step];
            }
        }
        dst += inner;
        int dim = rank - 2;
        for (; dim >= 0; --dim) {
            src_offset += step[dim];
            if (++counter[dim] < extent[dim]) {
                break;
            }
            src_offset -= step[dim] * extent[dim];
            counter[dim] = 0;
        }
        if (dim < 0) {
            return;
        }
    }
}

template <typename T>
absl::Status run_contraction(const ContractionPlan& plan, const ir::Einsum& einsum,
                             const IndexExtents& extents, const T* input0, const T* input1,
                             T* out) {
    const GemmShape shape = gemm_shape(plan, extents);
    const int64_t batch = shape.batch;
    const int64_t m = shape.m;
    const int64_t n = shape.n;
    const int64_t k = shape.k;
    if (batch == 0 || m == 0 || n == 0) {
        return absl::OkStatus(); // no output elements
    }
    if (k == 0) { // the sum over no terms
        std::fill(out, out + batch * m * n, T{0});
        return absl::OkStatus();
    }
    const T* lhs_data = plan.lhs_input == 0 ? input0 : input1;
    const T* rhs_data = plan.rhs_input == 0 ? input0 : input1;
    const std::string& lhs_term = einsum.input_terms()[plan.lhs_input];
    const std::string& rhs_term = einsum.input_terms()[plan.rhs_input];
    if (plan.lhs_packed) {
        T* packed = scratch<T>(ScratchSlot::contraction_lhs, batch * m * k);
        permute(lhs_data, lhs_term, plan.lhs_gemm_term(), extents, packed);
        lhs_data = packed;
    }
    if (plan.rhs_packed) {
        T* packed = scratch<T>(ScratchSlot::contraction_rhs, batch * k * n);
        permute(rhs_data, rhs_term, plan.rhs_gemm_term(), extents, packed);
        rhs_data = packed;
    }
    T* out_data = plan.out_direct ? out : scratch<T>(ScratchSlot::contraction_out, batch * m * n);

    for (int64_t b = 0; b < batch; ++b) {
        const T* a_block = lhs_data + b * shape.stride_a;
        const T* b_block = rhs_data + b * shape.stride_b;
        T* c_block = out_data + b * shape.stride_c;
        const int im = static_cast<int>(m);
        const int in = static_cast<int>(n);
        const int ik = static_cast<int>(k);
        const int lda = static_cast<int>(shape.lda);
        const int ldb = static_cast<int>(shape.ldb);
        const int ldc = static_cast<int>(shape.ldc);
        EINSUMMABLE_RETURN_IF_ERROR(gemm(plan.lhs_transposed, plan.rhs_transposed, im, in, ik,
                                         a_block, lda, b_block, ldb, c_block, ldc));
    }
    if (!plan.out_direct) {
        permute(out_data, plan.out_gemm_term(), einsum.output_term(), extents, out);
    }
    return absl::OkStatus();
}

template void permute<float>(const float*, const std::string&, const std::string&,
                             const IndexExtents&, float*);
template void permute<double>(const double*, const std::string&, const std::string&,
                              const IndexExtents&, double*);
template absl::Status run_contraction<float>(const ContractionPlan&, const ir::Einsum&,
                                             const IndexExtents&, const float*, const float*,
                                             float*);
template absl::Status run_contraction<double>(const ContractionPlan&, const ir::Einsum&,
                                              const IndexExtents&, const double*, const double*,
                                              double*);

} // namespace einsummable::kernels::cpu
