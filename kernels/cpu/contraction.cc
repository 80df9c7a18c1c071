#include "kernels/cpu/contraction.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

#include <cblas.h>

#include "compiler/ir/scalar_op.h"
#include "kernels/cpu/scratch.h"

namespace einsummable::kernels::cpu {

namespace {

bool contains_letter(const std::string& term, char c) {
    return term.find(c) != std::string::npos;
}

// The plan for lhs = input `lhs_input` and a given k order.
ContractionPlan make_plan(const ir::Einsum& einsum, int lhs_input, const std::string& k_order) {
    const std::string& lhs = einsum.input_terms()[lhs_input];
    const std::string& rhs = einsum.input_terms()[1 - lhs_input];
    const std::string& out = einsum.output_term();
    ContractionPlan plan;
    plan.lhs_input = lhs_input;
    plan.rhs_input = 1 - lhs_input;
    for (char c : out) {
        const bool in_lhs = contains_letter(lhs, c);
        const bool in_rhs = contains_letter(rhs, c);
        if (in_lhs && in_rhs) {
            plan.batch.push_back(c);
        } else if (in_lhs) {
            plan.m.push_back(c);
        } else {
            plan.n.push_back(c);
        }
    }
    plan.k = k_order;
    plan.lhs_transposed =
        lhs != plan.batch + plan.m + plan.k && lhs == plan.batch + plan.k + plan.m;
    plan.lhs_packed = lhs != plan.batch + plan.m + plan.k && !plan.lhs_transposed;
    plan.rhs_transposed =
        rhs != plan.batch + plan.k + plan.n && rhs == plan.batch + plan.n + plan.k;
    plan.rhs_packed = rhs != plan.batch + plan.k + plan.n && !plan.rhs_transposed;
    plan.out_direct = out == plan.batch + plan.m + plan.n;
    return plan;
}

// The contracted letters of `term` in the order it holds them.
std::string contracted_letters(const std::string& term, const std::string& other,
                               const std::string& out) {
    std::string k;
    for (char c : term) {
        if (contains_letter(other, c) && !contains_letter(out, c)) {
            k.push_back(c);
        }
    }
    return k;
}

int64_t product(const std::string& letters, const IndexExtents& extents) {
    int64_t out = 1;
    for (char c : letters) {
        out *= extents[static_cast<unsigned char>(c)];
    }
    return out;
}

void gemm(CBLAS_TRANSPOSE a_op, CBLAS_TRANSPOSE b_op, int m, int n, int k, const float* a, int lda,
          const float* b, int ldb, float* c, int ldc) {
    cblas_sgemm(CblasRowMajor, a_op, b_op, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
}

void gemm(CBLAS_TRANSPOSE a_op, CBLAS_TRANSPOSE b_op, int m, int n, int k, const double* a, int lda,
          const double* b, int ldb, double* c, int ldc) {
    cblas_dgemm(CblasRowMajor, a_op, b_op, m, n, k, 1.0, a, lda, b, ldb, 0.0, c, ldc);
}

} // namespace

std::optional<ContractionPlan> plan_contraction(const ir::Operator& op) {
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    if (einsum == nullptr || einsum->input_terms().size() != 2 ||
        einsum->join().fn != ir::ScalarFn::mul ||
        (einsum->has_reduction() && einsum->agg() != ir::AggOp::sum)) {
        return std::nullopt;
    }
    const std::string& a = einsum->input_terms()[0];
    const std::string& b = einsum->input_terms()[1];
    const std::string& out = einsum->output_term();
    // An index reduced away inside one operand is not a gemm.
    for (const auto& [term, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        for (char c : *term) {
            if (!contains_letter(out, c) && !contains_letter(*other, c)) {
                return std::nullopt;
            }
        }
    }
    std::optional<ContractionPlan> best;
    for (int lhs_input : {0, 1}) {
        const std::string& lhs = lhs_input == 0 ? a : b;
        const std::string& rhs = lhs_input == 0 ? b : a;
        for (const std::string& k_order :
             {contracted_letters(lhs, rhs, out), contracted_letters(rhs, lhs, out)}) {
            ContractionPlan plan = make_plan(*einsum, lhs_input, k_order);
            if (!best || plan.copies() < best->copies()) {
                best = std::move(plan);
            }
        }
    }
    // Element-wise products with broadcasting (no k, and m or n empty) would be gemm calls of
    // size 1 per element: a loop is the better kernel for them.
    if (best->k.empty() && (best->m.empty() || best->n.empty())) {
        return std::nullopt;
    }
    return best;
}

IndexExtents index_extents(const ir::Einsum& einsum, absl::Span<const ir::Box> input_boxes) {
    IndexExtents extents{};
    for (size_t input_idx = 0; input_idx < input_boxes.size(); ++input_idx) {
        const std::string& term = einsum.input_terms()[input_idx];
        for (size_t dim = 0; dim < term.size(); ++dim) {
            extents[static_cast<unsigned char>(term[dim])] =
                input_boxes[input_idx][static_cast<int>(dim)].size();
        }
    }
    return extents;
}

bool fits_blas(const ContractionPlan& plan, const IndexExtents& extents) {
    const int64_t m = product(plan.m, extents);
    const int64_t n = product(plan.n, extents);
    const int64_t k = product(plan.k, extents);
    // Leading dimensions are m, n or k, so these bound every int argument.
    return m <= INT_MAX && n <= INT_MAX && k <= INT_MAX;
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
void run_contraction(const ContractionPlan& plan, const ir::Einsum& einsum,
                     const IndexExtents& extents, const T* input0, const T* input1, T* out) {
    const int64_t batch = product(plan.batch, extents);
    const int64_t m = product(plan.m, extents);
    const int64_t n = product(plan.n, extents);
    const int64_t k = product(plan.k, extents);
    if (batch == 0 || m == 0 || n == 0) {
        return; // no output elements
    }
    if (k == 0) { // the sum over no terms
        std::fill(out, out + batch * m * n, T{0});
        return;
    }
    const T* lhs_data = plan.lhs_input == 0 ? input0 : input1;
    const T* rhs_data = plan.rhs_input == 0 ? input0 : input1;
    const std::string& lhs_term = einsum.input_terms()[plan.lhs_input];
    const std::string& rhs_term = einsum.input_terms()[plan.rhs_input];
    if (plan.lhs_packed) {
        T* packed = scratch<T>(ScratchSlot::contraction_lhs, batch * m * k);
        permute(lhs_data, lhs_term, plan.batch + plan.m + plan.k, extents, packed);
        lhs_data = packed;
    }
    if (plan.rhs_packed) {
        T* packed = scratch<T>(ScratchSlot::contraction_rhs, batch * k * n);
        permute(rhs_data, rhs_term, plan.batch + plan.k + plan.n, extents, packed);
        rhs_data = packed;
    }
    T* out_data = plan.out_direct ? out : scratch<T>(ScratchSlot::contraction_out, batch * m * n);

    // Stored shapes per batch element: lhs m x k (k x m when transposed), rhs k x n (n x k).
    const CBLAS_TRANSPOSE lhs_op = plan.lhs_transposed ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE rhs_op = plan.rhs_transposed ? CblasTrans : CblasNoTrans;
    const int lda = static_cast<int>(plan.lhs_transposed ? m : k);
    const int ldb = static_cast<int>(plan.rhs_transposed ? k : n);
    const int ldc = static_cast<int>(n);
    for (int64_t b = 0; b < batch; ++b) {
        gemm(lhs_op, rhs_op, static_cast<int>(m), static_cast<int>(n), static_cast<int>(k),
             lhs_data + b * m * k, lda, rhs_data + b * k * n, ldb, out_data + b * m * n, ldc);
    }
    if (!plan.out_direct) {
        permute(out_data, plan.batch + plan.m + plan.n, einsum.output_term(), extents, out);
    }
}

template void permute<float>(const float*, const std::string&, const std::string&,
                             const IndexExtents&, float*);
template void permute<double>(const double*, const std::string&, const std::string&,
                              const IndexExtents&, double*);
template void run_contraction<float>(const ContractionPlan&, const ir::Einsum&, const IndexExtents&,
                                     const float*, const float*, float*);
template void run_contraction<double>(const ContractionPlan&, const ir::Einsum&,
                                      const IndexExtents&, const double*, const double*, double*);

} // namespace einsummable::kernels::cpu
