// Issue 18 on the CPU backend: plans that split attention along its keys. For a small LLaMA
// block with one causal sequence, each case forces attention's candidate (every other operator
// takes its first candidate, as a random plan would) and checks that
//   - the lowered graph carries partial results: buffers with log-sum-exp statistics and
//     aggregate(log_sum_exp) nodes, and it is well formed (check_exec_graph);
//   - the saved output matches the double-precision reference within 1e-5 (f32);
//   - the bytes its copies move, statistics included, are what the exchange programs say
//     (PhysicalPlan::program_bytes).
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"
#include "tests/unit/runtime/exec_run.h"

namespace einsummable::runtime {
namespace {

using physical::BufferId;
using physical::ExecGraph;
using physical::NodeKind;

constexpr uint64_t kSeed = 20261204;
constexpr double kF32Tolerance = 1e-5; // runtime::output_tolerance(f32)

struct Case {
    std::string workload;
    int devices;
    std::vector<int64_t> attention_counts; // sequence, heads_kv, keys
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.workload << " at p = " << c.devices << ", attention split "
        << absl::StrJoin(c.attention_counts, "x");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    return absl::StrCat("p", info.param.devices, "_",
                        absl::StrJoin(info.param.attention_counts, "x"));
}

class KeySplitPlan : public ::testing::TestWithParam<Case> {};

TEST_P(KeySplitPlan, CpuBackendMatchesTheReferenceAndMovesWhatTheProgramsSay) {
    const Case& param = GetParam();
    std::cout << "seed " << kSeed << "\n";
    absl::StatusOr<ir::Graph> graph = workloads::by_name(param.workload);
    ASSERT_TRUE(graph.ok()) << graph.status();

    absl::StatusOr<logical::GraphCandidates> candidates =
        logical::enumerate_graph(*graph, param.devices);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    std::vector<int> choice(graph->nodes().size(), 0);
    bool found = false;
    for (size_t n = 0; n < graph->nodes().size(); ++n) {
        if (graph->node(static_cast<ir::NodeId>(n)).op->kind() != "attention") {
            continue;
        }
        for (size_t c = 0; c < (*candidates)[n].size(); ++c) {
            if ((*candidates)[n][c].counts == param.attention_counts) {
                choice[n] = static_cast<int>(c);
                found = true;
            }
        }
    }
    ASSERT_TRUE(found) << "no attention candidate with those counts";
    const logical::LogicalPlan logical = logical::make_plan(
        *graph, {param.devices, logical::Planner::random, kSeed}, *candidates, choice);

    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology("dgx-a100");
    ASSERT_TRUE(topology.ok()) << topology.status();
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::optimized;
    options.synthesis.seed = kSeed;
    options.synthesis.iterations = 40;
    absl::StatusOr<physical::PhysicalPlan> plan =
        physical::compile_physical(*graph, logical, *topology, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<ExecGraph> exec = physical::lower(*graph, *plan);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const absl::Status checked = physical::check_exec_graph(*exec, param.devices);
    ASSERT_TRUE(checked.ok()) << checked;

    int partial_buffers = 0, lse_aggregates = 0;
    for (const physical::Buffer& buffer : exec->buffers) {
        partial_buffers += buffer.stats ? 1 : 0;
    }
    for (const physical::ExecNode& node : exec->nodes) {
        lse_aggregates +=
            node.kind == NodeKind::aggregate && node.agg == ir::AggOp::log_sum_exp ? 1 : 0;
    }
    // Partial results exactly where keys are split (the control splits only kv heads).
    const bool keys_split = param.attention_counts[2] > 1;
    EXPECT_EQ(partial_buffers > 0, keys_split) << partial_buffers << " buffers with statistics";
    EXPECT_EQ(lse_aggregates > 0, keys_split) << lse_aggregates << " aggregate(log_sum_exp) nodes";

    // Random f32 inputs; the reference in double.
    const std::map<std::string, ir::HostTensor> inputs = testing::random_inputs(*graph, kSeed);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(*graph, inputs);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const testing::CpuRun run = testing::run_on_cpu(*exec, inputs);
    for (const auto& [name, values] : run.outputs) {
        const ir::HostTensor got(exec->buffers[exec->outputs.at(name)].box,
                                 std::vector<double>(values.begin(), values.end()));
        EXPECT_LE(ir::max_relative_error(got, reference->at(name)), kF32Tolerance) << name;
    }
    EXPECT_EQ(run.outputs.size(), exec->outputs.size());
    EXPECT_EQ(run.bytes_moved, plan->program_bytes());
    EXPECT_EQ(exec->copy_bytes(), plan->program_bytes());
}

// One causal sequence of 40 tokens: keys alone in 4 blocks (each query block's output box is
// written by up to 4 functions); queries and keys in 2 each (3 functions: the pair above the
// diagonal is left out) with 2 kv heads; kv heads alone (a control without partials); keys in
// 2 halves of a packed batch, the cut inside its middle sequence.
const std::string kOneSequence =
    "llama-block:tokens=40,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32";
const std::string kPacked =
    "llama-block:seqs=3x13,d_model=16,heads_q=4,heads_kv=1,d_head=4,d_ff=24,dtype=f32";

INSTANTIATE_TEST_SUITE_P(Attention, KeySplitPlan,
                         ::testing::Values(Case{kOneSequence, 4, {1, 1, 4}},
                                           Case{kOneSequence, 8, {2, 2, 2}},
                                           Case{kOneSequence, 2, {1, 2, 1}} /* control */,
                                           Case{kPacked, 2, {1, 1, 2}}),
                         case_name);

} // namespace
} // namespace einsummable::runtime
