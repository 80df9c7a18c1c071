// Every registered operator kind declares its kernel class (Operator::kernel_class,
// compiler/support/kernel_class.h), the class the device model's per-class efficiencies apply to
// (exprog::kernel_seconds). A new kind missing from the table below fails here, naming it: decide
// its class, override kernel_class() in its header, and add its row.

#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/einsum.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::ir {
namespace {

// The classes each kind may declare: einsum's depends on its equation (tested below), every
// other kind has one.
const std::map<std::string, std::set<KernelClass>>& expected_classes() {
    static const auto* const table = new std::map<std::string, std::set<KernelClass>>{
        {"einsum", {KernelClass::gemm, KernelClass::elementwise}},
        {"softmax", {KernelClass::elementwise}},
        {"rmsnorm", {KernelClass::norm}},
        {"layernorm", {KernelClass::norm}},
        {"rope", {KernelClass::elementwise}},
        {"split_heads", {KernelClass::elementwise}},
        {"merge_heads", {KernelClass::elementwise}},
        {"attention", {KernelClass::attention}},
        {"concat", {KernelClass::elementwise}},
        {"embedding", {KernelClass::elementwise}},
        {"write_rows", {KernelClass::elementwise}},
        {"argmax", {KernelClass::elementwise}},
        {"top_k", {KernelClass::elementwise}},
    };
    return *table;
}

TEST(KernelClass, EveryKindDeclaresItsClass) {
    std::mt19937_64 rng(testing::test_seed());
    for (const OperatorKind& kind : operator_kinds()) {
        const auto expected = expected_classes().find(std::string(kind.name));
        if (expected == expected_classes().end()) {
            ADD_FAILURE() << "operator kind '" << kind.name
                          << "' has no row in tests/unit/ir/kernel_class_test.cc: declare its "
                             "kernel class (Operator::kernel_class) and add it";
            continue;
        }
        for (int round = 0; round < 20; ++round) {
            const testing::RandomCase random = testing::random_case(kind.name, rng);
            ASSERT_NE(random.op, nullptr) << random.description;
            EXPECT_TRUE(expected->second.contains(random.op->kernel_class()))
                << random.description << " declares "
                << support::kernel_class_name(random.op->kernel_class());
        }
    }
}

TEST(KernelClass, EveryRowIsARegisteredKind) {
    std::set<std::string> kinds;
    for (const OperatorKind& kind : operator_kinds()) {
        kinds.emplace(kind.name);
    }
    for (const auto& [kind, classes] : expected_classes()) {
        EXPECT_TRUE(kinds.contains(kind)) << kind;
    }
}

KernelClass einsum_class(const std::string& equation, const std::string& join,
                         std::vector<TensorType> inputs) {
    absl::StatusOr<OperatorPtr> op =
        make_operator("einsum", Attributes{{"equation", equation}, {"join", join}}, inputs);
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? (*op)->kernel_class() : KernelClass::other;
}

TEST(KernelClass, EinsumIsAGemmOnlyWhenItContracts) {
    const TensorType ij{DType::f32, {{"i", 8}, {"j", 4}}};
    const TensorType jk{DType::f32, {{"j", 4}, {"k", 6}}};
    const TensorType j{DType::f32, {{"j", 4}}};
    const TensorType bij{DType::f16, {{"b", 2}, {"i", 8}, {"j", 4}}};
    const TensorType bjk{DType::f16, {{"b", 2}, {"j", 4}, {"k", 6}}};
    EXPECT_EQ(einsum_class("ij,jk->ik", "mul", {ij, jk}), KernelClass::gemm);
    EXPECT_EQ(einsum_class("bij,bjk->bik", "mul", {bij, bjk}), KernelClass::gemm);
    EXPECT_EQ(einsum_class("ij,j->i", "mul", {ij, j}), KernelClass::gemm); // a matrix-vector
    // No index summed away that both inputs carry, or not a product of sums: memory-bound.
    EXPECT_EQ(einsum_class("ij,jk->ik", "add", {ij, jk}), KernelClass::elementwise);
    EXPECT_EQ(einsum_class("ij,j->ij", "mul", {ij, j}), KernelClass::elementwise);
    EXPECT_EQ(einsum_class("ij,ij->ij", "add", {ij, ij}), KernelClass::elementwise);
    EXPECT_EQ(einsum_class("ij->i", "identity", {ij}), KernelClass::elementwise);
    EXPECT_EQ(einsum_class("ij->ji", "identity", {ij}), KernelClass::elementwise);
}

} // namespace
} // namespace einsummable::ir
