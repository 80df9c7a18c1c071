#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/ir/internal_error.h"

namespace einsummable::kernels {

// One backend's kernels, by operator kind (ir::Operator::kind()). Every backend has its own
// registry with its own kernel type (kernels/cpu/kernels.h: CpuKernel; kernels/cuda/kernel.h:
// CudaKernelFactory). A kernel file registers the kinds it implements at static
// initialisation, beside the kernel itself:
//
//     const bool kRegistered = cpu_kernels().add("softmax", &run_softmax);
//
// so adding an operator touches only its own files; nothing dispatches on kind strings. Kernel
// libraries are linked whole (CMake's WHOLE_ARCHIVE, see kernels/cpu/CMakeLists.txt) so that a
// registration no symbol refers to is still linked.
//
// Registration happens before main(); lookups after it. add() is not meant to race with find().
template <typename Kernel>
class KernelRegistry {
public:
    // Registers `kernel` for `kind`. Registering a kind twice is a programming error.
    bool add(absl::string_view kind, Kernel kernel) {
        const bool inserted = kernels_.emplace(std::string(kind), std::move(kernel)).second;
        EINSUMMABLE_CHECK(inserted, "a kernel for this operator kind is registered twice");
        return inserted;
    }

    // The kernel registered for `kind`, or nullptr.
    const Kernel* find(absl::string_view kind) const {
        auto it = kernels_.find(kind);
        return it == kernels_.end() ? nullptr : &it->second;
    }

    // Every registered kind, sorted.
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
