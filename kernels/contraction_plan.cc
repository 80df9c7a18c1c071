#include "kernels/contraction_plan.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/ir/scalar_op.h"

namespace einsummable::kernels {

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

absl::StatusOr<IndexExtents> checked_index_extents(const ir::Einsum& einsum,
                                                   const ir::FunctionSpec& function) {
    const size_t num_inputs = einsum.input_terms().size();
    if (function.inputs.size() != num_inputs || function.outputs.size() != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            einsum.describe(), ": expected ", num_inputs, " input blocks and 1 output block, got ",
            function.inputs.size(), " and ", function.outputs.size()));
    }
    IndexExtents extents{};
    std::array<bool, 128> seen{};
    for (size_t operand = 0; operand <= num_inputs; ++operand) {
        const bool is_output = operand == num_inputs;
        const std::string& term = is_output ? einsum.output_term() : einsum.input_terms()[operand];
        const ir::Box& box = is_output ? function.outputs[0] : function.inputs[operand];
        if (box.rank() != static_cast<int>(term.size())) {
            return absl::InvalidArgumentError(absl::StrCat(
                einsum.describe(), ": ", is_output ? "the output" : "input ",
                is_output ? "" : absl::StrCat(operand), " block ", box.to_string(), " has rank ",
                box.rank(), " but its term '", term, "' has ", term.size(), " letters"));
        }
        for (size_t dim = 0; dim < term.size(); ++dim) {
            const auto letter = static_cast<unsigned char>(term[dim]);
            const int64_t size = box[static_cast<int>(dim)].size();
            if (seen[letter] && extents[letter] != size) {
                return absl::InvalidArgumentError(
                    absl::StrCat(einsum.describe(), ": index '", std::string(1, term[dim]),
                                 "' spans ", size, " in ", is_output ? "the output" : "input ",
                                 is_output ? "" : absl::StrCat(operand), " block ", box.to_string(),
                                 " but ", extents[letter], " in an earlier operand"));
            }
            seen[letter] = true;
            extents[letter] = size;
        }
    }
    return extents;
}

GemmShape gemm_shape(const ContractionPlan& plan, const IndexExtents& extents) {
    GemmShape shape;
    shape.batch = product(plan.batch, extents);
    shape.m = product(plan.m, extents);
    shape.n = product(plan.n, extents);
    shape.k = product(plan.k, extents);
    shape.lda = plan.lhs_transposed ? shape.m : shape.k;
    shape.ldb = plan.rhs_transposed ? shape.k : shape.n;
    shape.ldc = shape.n;
    shape.stride_a = shape.m * shape.k;
    shape.stride_b = shape.k * shape.n;
    shape.stride_c = shape.m * shape.n;
    return shape;
}

bool TermPermutation::identity() const {
    for (size_t dim = 0; dim < perm.size(); ++dim) {
        if (perm[dim] != static_cast<int>(dim)) {
            return false;
        }
    }
    return true;
}

TermPermutation term_permutation(const std::string& src_term, const std::string& dst_term,
                                 const IndexExtents& extents) {
    auto kept = [&](const std::string& term) {
        std::string letters;
        for (char c : term) {
            if (extents[static_cast<unsigned char>(c)] != 1) {
                letters.push_back(c);
            }
        }
        return letters;
    };
    const std::string src = kept(src_term);
    const std::string dst = kept(dst_term);

    // Runs: maximal stretches of dst letters that are also consecutive, in order, in src. Each
    // run becomes one dimension; `run_start[r]` is its first letter's position in src.
    std::vector<size_t> run_start;
    std::vector<int64_t> run_extent;
    for (size_t idx = 0; idx < dst.size(); ++idx) {
        const size_t src_pos = src.find(dst[idx]);
        const int64_t extent = extents[static_cast<unsigned char>(dst[idx])];
        if (idx > 0 && src_pos > 0 && src.find(dst[idx - 1]) == src_pos - 1) {
            run_extent.back() *= extent;
        } else {
            run_start.push_back(src_pos);
            run_extent.push_back(extent);
        }
    }
    // Source dimensions are the runs in src order; dst dimension j is run j.
    std::vector<int> order(run_start.size());
    for (size_t run = 0; run < order.size(); ++run) {
        order[run] = static_cast<int>(run);
    }
    std::sort(order.begin(), order.end(),
              [&](int a, int b) { return run_start[a] < run_start[b]; });
    TermPermutation permutation;
    permutation.src_dims.resize(order.size());
    permutation.perm.resize(order.size());
    for (size_t src_dim = 0; src_dim < order.size(); ++src_dim) {
        permutation.src_dims[src_dim] = run_extent[order[src_dim]];
        permutation.perm[order[src_dim]] = static_cast<int>(src_dim);
    }
    return permutation;
}

} // namespace einsummable::kernels
