#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/ir/internal_error.h"

namespace einsummable::kernels {

// One backend's kernels, by operator class. Every backend has its own registry with its own
// kernel type (kernels/cpu/kernels.h: CpuKernel; kernels/cuda/kernel.h: CudaKernelFactory). A
// kernel file registers the operator classes it implements at static initialisation, beside the
// kernel itself, by type and never by a kind string:
//
//     const bool kRegistered = cuda_kernels().add<ir::Softmax>(&prepare_softmax);
//
// (CPU kernels take their operator class itself; register_cpu_kernel<ir::Softmax>(
// &run_softmax_f32) in kernels/cpu/f32_ops.h casts before calling.) The registry keys a kernel
// by its class's kind constant Op::kKind, which the class's kind() returns, and each backend's
// dispatcher (cpu::run_f32, cuda::prepare_kernel) finds an operator's kernel by its kind(): no
// code compares kind strings, and adding an operator touches only its own files
// (docs/operators.md "Adding an operator"). Kernel libraries are linked whole (CMake's
// WHOLE_ARCHIVE, see kernels/cpu/CMakeLists.txt) so that a registration no symbol refers to is
// still linked. tests/unit/kernels/operator_kinds_test.cc checks that every registered operator
// kind has a kernel in every backend built.
//
// Registration happens before main(); lookups after it. add() is not meant to race with find().
template <typename Kernel>
class KernelRegistry {
public:
    // Registers `kernel` for operator class Op. Registering a class twice is a programming
    // error.
    template <typename Op>
    bool add(Kernel kernel) {
        const bool inserted = kernels_.emplace(std::string(Op::kKind), std::move(kernel)).second;
        EINSUMMABLE_CHECK(inserted, "a kernel for this operator kind is registered twice");
        return inserted;
    }

    // The kernel registered for the operator class whose kind is `kind` (ir::Operator::kind()),
    // or nullptr.
    const Kernel* find(absl::string_view kind) const {
        auto it = kernels_.find(kind);
        return it == kernels_.end() ? nullptr : &it->second;
    }

    // The kind of every registered class, sorted.
    std::vector<std::string> kinds() const {
        std::vector<std::string> kinds;
        for (const auto& [kind, kernel] : kernels_) {
            kinds.push_back(kind);
        }
        return kinds;
    }

private:
    std::map<std::string, Kernel, std::less<>> kernels_;
};

} // namespace einsummable::kernels
