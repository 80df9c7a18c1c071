// prepare_generic_einsum (einsum_generic.h): the function spec becomes loops and strides here, on
// the host; the kernel is in einsum_generic.cu behind einsum_generic_launch.h.

#include "kernels/cuda/einsum_generic.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/scalar_op.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/einsum_generic_launch.h"
#include "kernels/scalar_math_ir.h"

namespace einsummable::kernels::cuda {
namespace {

absl::Status op_error(const ir::Operator& op, absl::string_view message) {
    return absl::InvalidArgumentError(
        absl::StrCat(op.describe(), ": generic CUDA einsum: ", message));
}

std::string equation_of(const ir::Einsum& einsum) {
    return absl::StrCat(absl::StrJoin(einsum.input_terms(), ","), "->", einsum.output_term());
}

// A loop over one index before merging: its extent and each input's stride along it.
struct Loop {
    int64_t extent = 1;
    std::array<int64_t, kMaxGenericEinsumInputs> stride{};
};

// Merges each loop into the one inside it where every input walks the pair contiguously (the
// output, dense, always does), so that element-wise ops over equal layouts need no divisions.
std::vector<Loop> merge_contiguous(const std::vector<Loop>& loops, int num_inputs) {
    std::vector<Loop> merged;
    for (const Loop& loop : loops) {
        if (!merged.empty()) {
            Loop& outer = merged.back();
            bool contiguous = true;
            for (int input = 0; input < num_inputs && contiguous; ++input) {
                contiguous = outer.stride[input] == loop.stride[input] * loop.extent;
            }
            if (contiguous) {
                outer.extent *= loop.extent;
                outer.stride = loop.stride;
                continue;
            }
        }
        merged.push_back(loop);
    }
    return merged;
}

class GenericEinsumKernel final : public PreparedKernel {
public:
    GenericEinsumKernel(std::string op_description, std::string summary, GenericEinsumPlan plan,
                        ir::DType dtype, std::vector<int64_t> input_volumes)
        : op_description_(std::move(op_description)), summary_(std::move(summary)), plan_(plan),
          dtype_(dtype), input_volumes_(std::move(input_volumes)) {}

    int64_t scratch_bytes() const override { return 0; }

    absl::Status enqueue(const KernelLaunch& launch) const override {
        if (launch.inputs.size() != input_volumes_.size() || launch.outputs.size() != 1) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_description_, ": generic CUDA einsum: launch has ",
                             launch.inputs.size(), " inputs and ", launch.outputs.size(),
                             " outputs; expected ", input_volumes_.size(), " and 1"));
        }
        if (plan_.output_count == 0) {
            return absl::OkStatus();
        }
        if (launch.outputs[0] == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(op_description_, ": generic CUDA einsum: output 0 is null"));
        }
        for (size_t input = 0; input < input_volumes_.size(); ++input) {
            if (launch.inputs[input] == nullptr && input_volumes_[input] > 0) {
                return absl::InvalidArgumentError(absl::StrCat(
                    op_description_, ": generic CUDA einsum: input ", input, " is null"));
            }
        }
        return cuda_status(launch_generic_einsum(plan_, dtype_, launch.inputs.data(),
                                                 launch.outputs[0], launch.stream),
                           absl::StrCat(op_description_, ": generic einsum kernel launch"));
    }

    std::string describe() const override { return summary_; }

private:
    std::string op_description_;
    std::string summary_;
    GenericEinsumPlan plan_;
    ir::DType dtype_;
    std::vector<int64_t> input_volumes_;
};

} // namespace

absl::StatusOr<GenericEinsumPlan> plan_generic_einsum(const KernelRequest& request) {
    if (request.op == nullptr || request.function == nullptr) {
        return absl::InvalidArgumentError(
            "prepare_generic_einsum: the request needs an operator and a function spec");
    }
    const ir::Operator& op = *request.op;
    const ir::FunctionSpec& function = *request.function;
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    if (einsum == nullptr) {
        return op_error(op, absl::StrCat("operator kind '", op.kind(), "' is not an einsum"));
    }
    const std::vector<std::string>& terms = einsum->input_terms();
    const std::string& out_term = einsum->output_term();
    const auto num_inputs = static_cast<int>(terms.size());
    if (function.inputs.size() != terms.size() || function.outputs.size() != 1 ||
        request.input_dtypes.size() != terms.size() || request.output_dtypes.size() != 1) {
        return op_error(op, absl::StrCat("expected ", terms.size(),
                                         " input blocks and dtypes and 1 output; the function "
                                         "spec has ",
                                         function.inputs.size(), " and ", function.outputs.size(),
                                         ", the request ", request.input_dtypes.size(), " and ",
                                         request.output_dtypes.size(), " dtypes"));
    }
    if (num_inputs > kMaxGenericEinsumInputs) {
        return op_error(op, absl::StrCat(num_inputs, " inputs; at most ", kMaxGenericEinsumInputs));
    }
    const ir::DType dtype = request.output_dtypes[0];
    for (size_t input = 0; input < terms.size(); ++input) {
        if (request.input_dtypes[input] != dtype) {
            return op_error(op, absl::StrCat("input ", input, " is stored as ",
                                             ir::dtype_name(request.input_dtypes[input]),
                                             " and the output as ", ir::dtype_name(dtype),
                                             "; every operand must share one dtype"));
        }
    }
    std::string reduced_letters;
    for (char c : einsum->indices()) {
        if (out_term.find(c) == std::string::npos) {
            reduced_letters.push_back(c);
        }
    }

    // Extents from the blocks (not the operator's types: blocks are sub-blocks); every index
    // must span the same extent in every operand that carries it.
    std::array<int64_t, 128> extent{};
    std::array<bool, 128> seen{};
    for (int operand = 0; operand <= num_inputs; ++operand) {
        const bool is_output = operand == num_inputs;
        const std::string& term = is_output ? out_term : terms[static_cast<size_t>(operand)];
        const ir::Box& box =
            is_output ? function.outputs[0] : function.inputs[static_cast<size_t>(operand)];
        const std::string what =
            is_output ? "output block" : absl::StrCat("input ", operand, " block");
        if (box.rank() != static_cast<int>(term.size())) {
            return op_error(op, absl::StrCat(what, " ", box.to_string(), " has rank ", box.rank(),
                                             " but its term '", term, "' has ", term.size(),
                                             " indices"));
        }
        for (int dim = 0; dim < box.rank(); ++dim) {
            const auto letter = static_cast<unsigned char>(term[static_cast<size_t>(dim)]);
            const int64_t size = box[dim].size();
            if (size < 0 || (seen[letter] && extent[letter] != size)) {
                return op_error(op,
                                absl::StrCat("index '", std::string(1, term[dim]), "' spans ", size,
                                             " in the ", what, " ", box.to_string(), " but ",
                                             extent[letter], " in an earlier operand"));
            }
            seen[letter] = true;
            extent[letter] = size;
        }
    }

    // Each input's row-major stride along every letter (0 where the input lacks it).
    std::vector<std::array<int64_t, 128>> letter_stride(terms.size());
    for (size_t input = 0; input < terms.size(); ++input) {
        letter_stride[input].fill(0);
        int64_t step = 1;
        for (int dim = static_cast<int>(terms[input].size()) - 1; dim >= 0; --dim) {
            const auto letter = static_cast<unsigned char>(terms[input][static_cast<size_t>(dim)]);
            letter_stride[input][letter] = step;
            step *= extent[letter];
        }
    }
    auto loop_of = [&](char c) {
        Loop loop;
        loop.extent = extent[static_cast<unsigned char>(c)];
        for (int input = 0; input < num_inputs; ++input) {
            loop.stride[static_cast<size_t>(input)] =
                letter_stride[static_cast<size_t>(input)][static_cast<unsigned char>(c)];
        }
        return loop;
    };

    GenericEinsumPlan plan;
    plan.num_inputs = num_inputs;
    plan.join = scalar_math_fn(einsum->join().fn);
    plan.constant = einsum->join().constant;
    switch (einsum->agg()) {
    case ir::AggOp::max:
        plan.agg = EinsumAgg::max;
        break;
    case ir::AggOp::min:
        plan.agg = EinsumAgg::min;
        break;
    default:
        plan.agg = EinsumAgg::sum;
        break;
    }

    // Output loops in the output's (row-major) order; loops of extent 1 change nothing.
    std::vector<Loop> output_loops;
    plan.output_count = 1;
    for (char c : out_term) {
        plan.output_count *= extent[static_cast<unsigned char>(c)];
        if (extent[static_cast<unsigned char>(c)] != 1) {
            output_loops.push_back(loop_of(c));
        }
    }
    // Reduced loops with the smallest strides innermost (the CPU kernel's order), so each
    // thread's walk stays in few cache lines; their order does not change a sum by more than
    // rounding.
    std::vector<Loop> reduced_loops;
    plan.reduced_count = 1;
    for (char c : reduced_letters) {
        plan.reduced_count *= extent[static_cast<unsigned char>(c)];
        if (extent[static_cast<unsigned char>(c)] != 1) {
            reduced_loops.push_back(loop_of(c));
        }
    }
    std::stable_sort(reduced_loops.begin(), reduced_loops.end(), [&](const Loop& a, const Loop& b) {
        const int64_t a_weight =
            std::accumulate(a.stride.begin(), a.stride.begin() + num_inputs, int64_t{0});
        const int64_t b_weight =
            std::accumulate(b.stride.begin(), b.stride.begin() + num_inputs, int64_t{0});
        return a_weight > b_weight;
    });
    output_loops = merge_contiguous(output_loops, num_inputs);
    reduced_loops = merge_contiguous(reduced_loops, num_inputs);
    // The limit is on loops after extent-1 indices are dropped and contiguous ones merged, not
    // on the equation's letters: sharded blocks often have many such dimensions.
    if (output_loops.size() > static_cast<size_t>(kMaxGenericEinsumLoops) ||
        reduced_loops.size() > static_cast<size_t>(kMaxGenericEinsumLoops)) {
        return op_error(op, absl::StrCat("equation ", equation_of(*einsum), " needs ",
                                         output_loops.size(), " output and ", reduced_loops.size(),
                                         " reduced loops; at most ", kMaxGenericEinsumLoops,
                                         " of each"));
    }
    if (plan.reduced_count == 0) {
        reduced_loops.clear();
    }
    plan.output_loops = static_cast<int>(output_loops.size());
    plan.reduced_loops = static_cast<int>(reduced_loops.size());
    for (size_t loop = 0; loop < output_loops.size(); ++loop) {
        plan.output_extent[loop] = output_loops[loop].extent;
        for (int input = 0; input < num_inputs; ++input) {
            plan.output_stride[input][loop] = output_loops[loop].stride[static_cast<size_t>(input)];
        }
    }
    for (size_t loop = 0; loop < reduced_loops.size(); ++loop) {
        plan.reduced_extent[loop] = reduced_loops[loop].extent;
        for (int input = 0; input < num_inputs; ++input) {
            plan.reduced_stride[input][loop] =
                reduced_loops[loop].stride[static_cast<size_t>(input)];
        }
    }

    return plan;
}

absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_generic_einsum(const KernelRequest& request) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const GenericEinsumPlan plan, plan_generic_einsum(request));
    const auto& einsum = static_cast<const ir::Einsum&>(*request.op);
    const ir::DType dtype = request.output_dtypes[0];
    std::vector<int64_t> input_volumes;
    for (const ir::Box& box : request.function->inputs) {
        input_volumes.push_back(box.volume());
    }
    std::string summary =
        absl::StrCat("generic einsum ", ir::dtype_name(dtype), " ", equation_of(einsum),
                     " join=", einsum.join().name(), " agg=", ir::agg_op_name(einsum.agg()),
                     " outputs=", plan.output_count, " points_per_output=", plan.reduced_count);
    return std::unique_ptr<PreparedKernel>(new GenericEinsumKernel(
        request.op->describe(), std::move(summary), plan, dtype, std::move(input_volumes)));
}

} // namespace einsummable::kernels::cuda
