#include "kernels/cpu/block_kernel.h"

#include <array>
#include <climits>
#include <cstdint>
#include <optional>
#include <string>

#include <cblas.h>

#include "compiler/ir/box.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/scalar_op.h"

namespace einsummable::kernels::cpu {

namespace {

using ir::Box;
using ir::HostTensor;
using ir::Interval;

bool contains_letter(const std::string& term, char c) {
    return term.find(c) != std::string::npos;
}

// How one contraction maps onto dgemm calls: C[batch, m, n] = sum_k A[batch, m, k] B[batch, k, n]
// with A the block of input `lhs_input` and B that of the other input. Index groups are strings
// of letters in the order the packed operands use.
struct Plan {
    int lhs_input = 0;
    int rhs_input = 1;
    std::string batch;
    std::string m;
    std::string n;
    std::string k;
    // An operand is used as stored ("batch+rows+k" for the lhs, "batch+k+cols" for the rhs), as
    // stored but transposed within each batch element, or packed to the untransposed layout.
    bool lhs_transposed = false;
    bool lhs_packed = false;
    bool rhs_transposed = false;
    bool rhs_packed = false;
    // The output is written in place when its term is batch+m+n; otherwise through a buffer.
    bool out_direct = true;

    int copies() const {
        return static_cast<int>(lhs_packed) + static_cast<int>(rhs_packed) +
               static_cast<int>(!out_direct);
    }
};

// The plan for lhs = input `lhs_input` and a given k order.
Plan make_plan(const ir::Einsum& einsum, int lhs_input, const std::string& k_order) {
    const std::string& lhs = einsum.input_terms()[lhs_input];
    const std::string& rhs = einsum.input_terms()[1 - lhs_input];
    const std::string& out = einsum.output_term();
    Plan plan;
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

// The cheapest plan (fewest copies; ties keep the inputs' order and the lhs's k order), or
// nullopt when `op` is not a contraction dgemm can run.
std::optional<Plan> plan_contraction(const ir::Operator& op) {
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    if (einsum == nullptr || einsum->input_terms().size() != 2 ||
        einsum->join().fn != ir::ScalarFn::mul ||
        (einsum->has_reduction() && einsum->agg() != ir::AggOp::sum)) {
        return std::nullopt;
    }
    const std::string& a = einsum->input_terms()[0];
    const std::string& b = einsum->input_terms()[1];
    const std::string& out = einsum->output_term();
    // An index reduced away inside one operand is not a dgemm.
    for (const auto& [term, other] : {std::pair{&a, &b}, std::pair{&b, &a}}) {
        for (char c : *term) {
            if (!contains_letter(out, c) && !contains_letter(*other, c)) {
                return std::nullopt;
            }
        }
    }
    std::optional<Plan> best;
    for (int lhs_input : {0, 1}) {
        const std::string& lhs = lhs_input == 0 ? a : b;
        const std::string& rhs = lhs_input == 0 ? b : a;
        for (const std::string& k_order :
             {contracted_letters(lhs, rhs, out), contracted_letters(rhs, lhs, out)}) {
            Plan plan = make_plan(*einsum, lhs_input, k_order);
            if (!best || plan.copies() < best->copies()) {
                best = std::move(plan);
            }
        }
    }
    // Element-wise products with broadcasting (no k, and m or n empty) would be dgemm calls of
    // size 1 per element: the reference loop is the better kernel for them.
    if (best->k.empty() && (best->m.empty() || best->n.empty())) {
        return std::nullopt;
    }
    return best;
}

// Whether the blocks are ones op.reference accepts: the counts and boxes match `function`, the
// boxes lie inside the operand types, and every index has one interval across all operands.
bool blocks_match(const ir::Einsum& einsum, absl::Span<const HostTensor> inputs,
                  const ir::FunctionSpec& function) {
    if (inputs.size() != 2 || function.inputs.size() != 2 || function.outputs.size() != 1) {
        return false;
    }
    std::array<std::optional<Interval>, 128> interval_of;
    auto consistent = [&](const std::string& term, const Box& box, const Box& type_box) {
        if (box.rank() != static_cast<int>(term.size()) || type_box.rank() != box.rank() ||
            !type_box.contains(box)) {
            return false;
        }
        for (int dim = 0; dim < box.rank(); ++dim) {
            std::optional<Interval>& seen = interval_of[static_cast<unsigned char>(term[dim])];
            if (seen && *seen != box[dim]) {
                return false;
            }
            seen = box[dim];
        }
        return true;
    };
    for (int input_idx = 0; input_idx < 2; ++input_idx) {
        const HostTensor& block = inputs[input_idx];
        if (block.box() != function.inputs[input_idx] || block.size() != block.box().volume() ||
            !consistent(einsum.input_terms()[input_idx], block.box(),
                        einsum.input_types()[input_idx].box())) {
            return false;
        }
    }
    return consistent(einsum.output_term(), function.outputs[0], einsum.output_types()[0].box());
}

using Extents = std::array<int64_t, 128>; // extent of each index letter in this block

int64_t product(const std::string& letters, const Extents& extents) {
    int64_t out = 1;
    for (char c : letters) {
        out *= extents[static_cast<unsigned char>(c)];
    }
    return out;
}

// Copies a dense row-major block laid out as `src_term` into `dst`, laid out as `dst_term` (the
// same letters in another order).
void permute(const double* src, const std::string& src_term, const std::string& dst_term,
             const Extents& extents, double* dst) {
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
    std::vector<int64_t> extent(rank);
    std::vector<int64_t> step(rank);
    for (int dim = 0; dim < rank; ++dim) {
        extent[dim] = extents[static_cast<unsigned char>(dst_term[dim])];
        step[dim] = src_stride[static_cast<unsigned char>(dst_term[dim])];
    }
    const int64_t inner = extent[rank - 1];
    const int64_t inner_step = step[rank - 1];
    std::vector<int64_t> counter(rank, 0);
    int64_t src_offset = 0;
    while (true) {
        const double* from = src + src_offset;
        for (int64_t idx = 0; idx < inner; ++idx) {
            dst[idx] = from[idx * inner_step];
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

bool fits_blas_int(int64_t value) {
    return value <= INT_MAX;
}

} // namespace

bool uses_blas(const ir::Operator& op) {
    return plan_contraction(op).has_value();
}

absl::StatusOr<std::vector<HostTensor>> run_block(const ir::Operator& op,
                                                  absl::Span<const HostTensor> inputs,
                                                  const ir::FunctionSpec& function) {
    const std::optional<Plan> plan = plan_contraction(op);
    if (!plan) {
        return op.reference(inputs, function);
    }
    const auto& einsum = static_cast<const ir::Einsum&>(op);
    if (!blocks_match(einsum, inputs, function)) {
        return op.reference(inputs, function); // reports the mismatch as op.reference does
    }

    Extents extents{};
    for (int input_idx = 0; input_idx < 2; ++input_idx) {
        const std::string& term = einsum.input_terms()[input_idx];
        for (size_t dim = 0; dim < term.size(); ++dim) {
            extents[static_cast<unsigned char>(term[dim])] = inputs[input_idx].box()[dim].size();
        }
    }
    HostTensor output(function.outputs[0]); // zeros: the result when any extent is empty
    const int64_t batch = product(plan->batch, extents);
    const int64_t m = product(plan->m, extents);
    const int64_t n = product(plan->n, extents);
    const int64_t k = product(plan->k, extents);
    if (batch == 0 || m == 0 || n == 0 || k == 0) {
        return std::vector<HostTensor>{std::move(output)};
    }
    if (!fits_blas_int(m) || !fits_blas_int(n) || !fits_blas_int(k)) {
        return op.reference(inputs, function);
    }

    const HostTensor& lhs = inputs[plan->lhs_input];
    const HostTensor& rhs = inputs[plan->rhs_input];
    const std::string& lhs_term = einsum.input_terms()[plan->lhs_input];
    const std::string& rhs_term = einsum.input_terms()[plan->rhs_input];
    std::vector<double> lhs_buffer;
    std::vector<double> rhs_buffer;
    std::vector<double> out_buffer;
    const double* lhs_data = lhs.data();
    const double* rhs_data = rhs.data();
    if (plan->lhs_packed) {
        lhs_buffer.resize(lhs.size());
        permute(lhs.data(), lhs_term, plan->batch + plan->m + plan->k, extents, lhs_buffer.data());
        lhs_data = lhs_buffer.data();
    }
    if (plan->rhs_packed) {
        rhs_buffer.resize(rhs.size());
        permute(rhs.data(), rhs_term, plan->batch + plan->k + plan->n, extents, rhs_buffer.data());
        rhs_data = rhs_buffer.data();
    }
    double* out_data = output.data();
    if (!plan->out_direct) {
        out_buffer.resize(output.size());
        out_data = out_buffer.data();
    }

    // Stored shapes per batch element: lhs m x k (k x m when transposed), rhs k x n (n x k).
    const CBLAS_TRANSPOSE lhs_op = plan->lhs_transposed ? CblasTrans : CblasNoTrans;
    const CBLAS_TRANSPOSE rhs_op = plan->rhs_transposed ? CblasTrans : CblasNoTrans;
    const int lda = static_cast<int>(plan->lhs_transposed ? m : k);
    const int ldb = static_cast<int>(plan->rhs_transposed ? k : n);
    const int ldc = static_cast<int>(n);
    for (int64_t b = 0; b < batch; ++b) {
        cblas_dgemm(CblasRowMajor, lhs_op, rhs_op, static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.0, lhs_data + b * m * k, lda, rhs_data + b * k * n, ldb,
                    0.0, out_data + b * m * n, ldc);
    }
    if (!plan->out_direct) {
        permute(out_buffer.data(), plan->batch + plan->m + plan->n, einsum.output_term(), extents,
                output.data());
    }
    return std::vector<HostTensor>{std::move(output)};
}

} // namespace einsummable::kernels::cpu
