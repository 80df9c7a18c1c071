#pragma once

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "kernels/cpu/kernels.h"

namespace einsummable::kernels::cpu {

// What the per-operator f32 kernels behind run_f32 (kernels.h) share. Kernels live one file
// per theme — einsum_f32.cc, rowwise_f32.cc (softmax, norms, rope, head layouts),
// attention_f32.cc, and <kind>_f32.cc for any other kind — and each registers itself in
// cpu_kernels() by operator kind.
// run_f32 has already checked the block counts, that no pointer is null where a block holds
// elements, and that every box has its operand's rank and lies inside its operand's type. Each
// kernel checks the shape relations it relies on and reports a mismatch through block_error.

// InvalidArgument "<op.describe()>: <message>".
absl::Status block_error(const ir::Operator& op, absl::string_view message);

// The inputs and outputs of one function spec, in the spec's order.
using F32Inputs = absl::Span<const float* const>;
using F32Outputs = absl::Span<float* const>;

// Registers, in cpu_kernels(), `kernel` — written for operator class Op, which it takes as its
// first argument — as the f32 kernel of Op's kind (Op::kKind). The registered kernel refuses an
// operator of another class by name. Each kernel file registers its classes beside the kernels
// (see kernel_registry.h).
template <typename Op, typename Kernel>
bool register_cpu_kernel(Kernel kernel) {
    return cpu_kernels().add<Op>([kernel](const ir::Operator& op, const ir::FunctionSpec& function,
                                          F32Inputs inputs, F32Outputs outputs) -> absl::Status {
        const auto* typed = dynamic_cast<const Op*>(&op);
        if (typed == nullptr) {
            return block_error(op, absl::StrCat("the CPU kernel of kind '", op.kind(),
                                                "' does not take this operator class"));
        }
        return kernel(*typed, function, inputs, outputs);
    });
}

// The same for Op's partial kernel (cpu_partial_kernels, kernels.h).
template <typename Op, typename Kernel>
bool register_cpu_partial_kernel(Kernel kernel) {
    return cpu_partial_kernels().add<Op>(
        [kernel](const ir::Operator& op, const ir::FunctionSpec& function, F32Inputs inputs,
                 F32Outputs outputs, F32Outputs stats) -> absl::Status {
            const auto* typed = dynamic_cast<const Op*>(&op);
            if (typed == nullptr) {
                return block_error(op, absl::StrCat("the CPU partial kernel of kind '", op.kind(),
                                                    "' does not take this operator class"));
            }
            return kernel(*typed, function, inputs, outputs, stats);
        });
}

} // namespace einsummable::kernels::cpu
