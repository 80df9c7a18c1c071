#include "kernels/cpu/block_kernel.h"

#include <array>
#include <optional>
#include <string>

#include "compiler/ir/box.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/support/status_macros.h"
#include "kernels/cpu/contraction.h"

namespace einsummable::kernels::cpu {

namespace {

using ir::Box;
using ir::HostTensor;
using ir::Interval;

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

} // namespace

bool uses_gemm(const ir::Operator& op) {
    return plan_contraction(op).has_value();
}

absl::StatusOr<std::vector<HostTensor>> run_block(const ir::Operator& op,
                                                  absl::Span<const HostTensor> inputs,
                                                  const ir::FunctionSpec& function) {
    const std::optional<ContractionPlan> plan = plan_contraction(op);
    if (!plan) {
        return op.reference(inputs, function);
    }
    const auto& einsum = static_cast<const ir::Einsum&>(op);
    if (!blocks_match(einsum, inputs, function)) {
        return op.reference(inputs, function); // reports the mismatch as op.reference does
    }

    const IndexExtents extents = index_extents(einsum, function.inputs);
    if (!fits_gemm(*plan, extents)) {
        return op.reference(inputs, function);
    }
    HostTensor output(function.outputs[0]);
    EINSUMMABLE_RETURN_IF_ERROR(
        run_contraction(*plan, einsum, extents, inputs[0].data(), inputs[1].data(), output.data()));
    return std::vector<HostTensor>{std::move(output)};
}

} // namespace einsummable::kernels::cpu
