#pragma once

#include <array>
#include <optional>

#include "absl/strings/string_view.h"

namespace einsummable::support {

// What kind of kernel an operator runs, for the device model's per-class efficiencies
// (exprog::DeviceModel, docs/topologies.md "Devices"): each operator declares its class
// (ir::Operator::kernel_class), and a device reaches its own fraction of peak FLOP/s and of HBM
// bandwidth on each. It lives here, below both the operators (compiler/ir) and the device model
// (compiler/exprog), which do not depend on each other.
//
//   gemm         contractions run by a GEMM library (einsum/matmul with a summed index shared
//                by both inputs);
//   attention    fused attention (one kernel: scores, softmax, weighted sum);
//   elementwise  memory-bound kernels: unary and binary element-wise einsums, reductions,
//                softmax, rope, the head reshapes, concat, and the plan's data-movement nodes
//                (aggregations, slices, local copies; compiler/physical/plan_simulation.cc);
//   norm         rmsnorm and layernorm;
//   other        anything else (the default of ir::Operator::kernel_class).
enum class KernelClass {
    gemm,
    attention,
    elementwise,
    norm,
    other,
};

// Every class, in the enum's order (static_cast<int> of a class is its index here).
inline constexpr std::array<KernelClass, 5> kKernelClasses = {
    KernelClass::gemm, KernelClass::attention, KernelClass::elementwise, KernelClass::norm,
    KernelClass::other};

// "gemm", "attention", "elementwise", "norm", "other": the prefix of the class's keys in the
// topology format (gemm_compute_efficiency, ...).
inline absl::string_view kernel_class_name(KernelClass kernel_class) {
    switch (kernel_class) {
    case KernelClass::gemm:
        return "gemm";
    case KernelClass::attention:
        return "attention";
    case KernelClass::elementwise:
        return "elementwise";
    case KernelClass::norm:
        return "norm";
    case KernelClass::other:
        return "other";
    }
    return "other";
}

// The class named `name`, or nullopt.
inline std::optional<KernelClass> kernel_class_from_name(absl::string_view name) {
    for (KernelClass kernel_class : kKernelClasses) {
        if (kernel_class_name(kernel_class) == name) {
            return kernel_class;
        }
    }
    return std::nullopt;
}

} // namespace einsummable::support
