// Every registered operator kind (ir::operator_kinds()) is complete: its name is unique, the
// property suites have a random-case generator for it (tests/unit/ir/random_cases.h), the CPU
// backend an f32 kernel, and — in a build with the CUDA backend — the CUDA backend a kernel. So a
// new operator that misses one of the files docs/operators.md "Adding an operator" lists fails
// here, naming the kind and the file. Kernels are registered by operator class, so the reverse
// also holds: no backend has a kernel for a kind the registry does not know.

#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/operator_registry.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "tests/unit/ir/random_cases.h"
#if EINSUMMABLE_TEST_CUDA_KERNELS
#include "kernels/cuda/kernel.h"
#endif

namespace einsummable {
namespace {

std::set<std::string> registered_kinds() {
    std::set<std::string> kinds;
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        kinds.emplace(kind.name);
    }
    return kinds;
}

TEST(OperatorKinds, NamesAreUnique) {
    EXPECT_EQ(registered_kinds().size(), ir::operator_kinds().size());
}

TEST(OperatorKinds, EveryKindHasARandomCaseGenerator) {
    std::mt19937_64 rng(ir::testing::test_seed());
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        if (!ir::testing::has_random_case(kind.name)) {
            ADD_FAILURE() << "operator kind '" << kind.name
                          << "' has no random-case generator: add one to "
                             "tests/unit/ir/random_cases.cc";
            continue;
        }
        // The generator makes operators of its own kind (the class's kKind is its kind()).
        const ir::testing::RandomCase random = ir::testing::random_case(kind.name, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        EXPECT_EQ(random.op->kind(), kind.name);
    }
}

TEST(OperatorKinds, EveryKindHasACpuKernel) {
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        EXPECT_NE(kernels::cpu::cpu_kernels().find(kind.name), nullptr)
            << "operator kind '" << kind.name
            << "' has no f32 CPU kernel: register one in kernels/cpu/ "
               "(register_cpu_kernel<Op>, kernels/cpu/f32_ops.h)";
    }
}

TEST(OperatorKinds, EveryCpuKernelIsForARegisteredKind) {
    const std::set<std::string> kinds = registered_kinds();
    for (const std::string& kind : kernels::cpu::cpu_kernels().kinds()) {
        EXPECT_TRUE(kinds.count(kind))
            << "a CPU kernel for '" << kind << "', which compiler/ir/operator_registry.cc lacks";
    }
}

#if EINSUMMABLE_TEST_CUDA_KERNELS
TEST(OperatorKinds, EveryKindHasACudaKernel) {
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        EXPECT_NE(kernels::cuda::cuda_kernels().find(kind.name), nullptr)
            << "operator kind '" << kind.name
            << "' has no CUDA kernel: register one in kernels/cuda/ "
               "(cuda_kernels().add<Op>, kernels/cuda/kernel.h)";
    }
}

TEST(OperatorKinds, EveryCudaKernelIsForARegisteredKind) {
    const std::set<std::string> kinds = registered_kinds();
    for (const std::string& kind : kernels::cuda::cuda_kernels().kinds()) {
        EXPECT_TRUE(kinds.count(kind))
            << "a CUDA kernel for '" << kind << "', which compiler/ir/operator_registry.cc lacks";
    }
}
#endif

} // namespace
} // namespace einsummable
