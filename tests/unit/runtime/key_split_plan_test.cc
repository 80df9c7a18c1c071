// On the CPU backend: plans that split attention along its keys. For a small LLaMA
// block with one causal sequence, each case forces attention's candidate (key_split_cases.h)
// and checks that
//   - the lowered graph is well formed and carries partial results exactly where the keys are
//     split (lower_key_split checks both);
//   - the saved output matches the double-precision reference within 1e-5 (f32);
//   - the bytes its copies move, statistics included, are what the exchange programs say
//     (PhysicalPlan::program_bytes).
#include <iostream>
#include <map>
#include <string>

#include "compiler/ir/spec_execution.h"
#include "gtest/gtest.h"
#include "tests/unit/runtime/exec_run.h"
#include "tests/unit/runtime/key_split_cases.h"

namespace einsummable::runtime {
namespace {

using testing::KeySplitCase;

constexpr double kF32Tolerance = 1e-5; // runtime::output_tolerance(f32)

class KeySplitPlan : public ::testing::TestWithParam<KeySplitCase> {};

TEST_P(KeySplitPlan, CpuBackendMatchesTheReferenceAndMovesWhatTheProgramsSay) {
    const KeySplitCase& param = GetParam();
    std::cout << "seed " << testing::kKeySplitSeed << "\n";
    const testing::LoweredKeySplit lowered = testing::lower_key_split(param);
    ASSERT_NE(lowered.graph, nullptr);
    const ir::Graph& graph = *lowered.graph;
    const physical::ExecGraph& exec = lowered.exec;

    // Random f32 inputs; the reference in double.
    const std::map<std::string, ir::HostTensor> inputs =
        testing::random_inputs(graph, testing::kKeySplitSeed);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(graph, inputs);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const testing::ExecRun run = testing::run_on_cpu(exec, inputs);
    for (const auto& [name, values] : run.outputs) {
        const ir::HostTensor got(physical::saved_output_box(exec, exec.outputs.at(name)),
                                 std::vector<double>(values.begin(), values.end()));
        EXPECT_LE(ir::max_relative_error(got, reference->at(name)), kF32Tolerance) << name;
    }
    EXPECT_EQ(run.outputs.size(), exec.outputs.size());
    EXPECT_EQ(run.bytes_moved, lowered.plan.program_bytes());
    EXPECT_EQ(exec.copy_bytes(), lowered.plan.program_bytes());
}

INSTANTIATE_TEST_SUITE_P(Attention, KeySplitPlan, ::testing::ValuesIn(testing::key_split_cases()),
                         testing::key_split_case_name);

} // namespace
} // namespace einsummable::runtime
