// On the CPU backend: plans that split argmax along its vocabulary. An LM head's logits
// (h [tokens, d] · w [d, vocab]) and their argmax, the argmax's candidate forced to cut the
// vocabulary (and the tokens), every other operator its first candidate as a random plan
// would; checks that
//   - the lowered graph is well formed and combines partial results by the arg_max ⊕: buffers
//     with statistics and aggregate(arg_max) nodes, exactly when the vocabulary is cut;
//   - the saved indices equal the reference's, exactly: ties to the first index (small integer
//     inputs make them) and NaN first (a row of +inf, -inf and NaN logits);
//   - the bytes its copies move, statistics included, are what the exchange programs say.
#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
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
#include "gtest/gtest.h"
#include "tests/unit/runtime/exec_run.h"

namespace einsummable::runtime {
namespace {

constexpr uint64_t kSeed = 20261207;
constexpr int64_t kTokens = 6;
constexpr int64_t kD = 8;
constexpr int64_t kVocab = 30;

struct Case {
    int devices;
    std::vector<int64_t> argmax_counts; // tokens, vocab
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << "p = " << c.devices << ", argmax split " << absl::StrJoin(c.argmax_counts, "x");
}

ir::Graph lm_head() {
    ir::Graph graph;
    const ir::TensorId h = *graph.add_input("h", ir::DType::f32, {{"tokens", kTokens}, {"d", kD}});
    const ir::TensorId w = *graph.add_input("w", ir::DType::f32, {{"d", kD}, {"vocab", kVocab}});
    const ir::TensorId logits =
        *graph.add("logits", "einsum", {{"equation", std::string("td,dv->tv")}}, {h, w});
    const ir::TensorId ids = *graph.add("ids", "argmax", {}, {logits});
    EXPECT_TRUE(graph.save(ids).ok());
    return graph;
}

// Small integers (exact ties); row 2 of h has +inf, so that row's logits are +inf, -inf or NaN
// (inf · 0) by column.
std::map<std::string, ir::HostTensor> inputs() {
    std::mt19937_64 rng(kSeed);
    std::vector<double> h(kTokens * kD);
    std::vector<double> w(kD * kVocab);
    for (double& v : h) {
        v = static_cast<double>(rng() % 2);
    }
    for (double& v : w) {
        v = static_cast<double>(rng() % 3) - 1.0;
    }
    h[2 * kD + 1] = std::numeric_limits<double>::infinity();
    return {{"h", ir::HostTensor(ir::Box::from_shape({kTokens, kD}), h)},
            {"w", ir::HostTensor(ir::Box::from_shape({kD, kVocab}), w)}};
}

class ArgMaxPlan : public ::testing::TestWithParam<Case> {};

TEST_P(ArgMaxPlan, VocabularySplitsCombinePairsToTheReferenceIndices) {
    const Case& c = GetParam();
    std::cout << "seed " << kSeed << "\n";
    const ir::Graph graph = lm_head();
    absl::StatusOr<logical::GraphCandidates> candidates =
        logical::enumerate_graph(graph, c.devices);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    std::vector<int> choice(graph.nodes().size(), 0);
    bool found = false;
    const size_t node = 1; // the argmax
    ASSERT_EQ(graph.node(static_cast<ir::NodeId>(node)).op->kind(), "argmax");
    for (size_t k = 0; k < (*candidates)[node].size(); ++k) {
        if ((*candidates)[node][k].counts == c.argmax_counts) {
            choice[node] = static_cast<int>(k);
            found = true;
        }
    }
    ASSERT_TRUE(found) << "no argmax candidate with those counts";
    const logical::LogicalPlan logical = logical::make_plan(
        graph, {c.devices, logical::Planner::random, kSeed}, *candidates, choice);
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology("dgx-a100");
    ASSERT_TRUE(topology.ok()) << topology.status();
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::optimized;
    options.synthesis.seed = kSeed;
    options.synthesis.iterations = 40;
    absl::StatusOr<physical::PhysicalPlan> plan =
        physical::compile_physical(graph, logical, *topology, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<physical::ExecGraph> exec = physical::lower(graph, *plan);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const absl::Status checked = physical::check_exec_graph(*exec, c.devices);
    ASSERT_TRUE(checked.ok()) << checked;

    int partial_buffers = 0;
    int arg_max_aggregates = 0;
    for (const physical::Buffer& buffer : exec->buffers) {
        partial_buffers += buffer.stats ? 1 : 0;
    }
    for (const physical::ExecNode& exec_node : exec->nodes) {
        arg_max_aggregates +=
            exec_node.kind == physical::NodeKind::aggregate && exec_node.agg == ir::AggOp::arg_max
                ? 1
                : 0;
    }
    const bool vocab_split = c.argmax_counts[1] > 1;
    EXPECT_EQ(partial_buffers > 0, vocab_split) << partial_buffers << " buffers with statistics";
    EXPECT_EQ(arg_max_aggregates > 0, vocab_split)
        << arg_max_aggregates << " aggregate(arg_max) nodes";

    const std::map<std::string, ir::HostTensor> whole = inputs();
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(graph, whole);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const ir::HostTensor& want = reference->at("ids");
    EXPECT_EQ(want.data()[2], [&] { // row 2's first NaN: the first column where w's row 1 is 0
        for (int64_t v = 0; v < kVocab; ++v) {
            if (whole.at("w").data()[1 * kVocab + v] == 0.0) {
                return static_cast<double>(v);
            }
        }
        return -1.0;
    }());
    const testing::ExecRun run = testing::run_on_cpu(*exec, whole);
    ASSERT_EQ(run.outputs.count("ids"), 1u);
    const std::vector<float>& got = run.outputs.at("ids");
    ASSERT_EQ(static_cast<int64_t>(got.size()), kTokens);
    for (int64_t t = 0; t < kTokens; ++t) {
        EXPECT_EQ(static_cast<double>(got[t]), want.data()[t]) << "token " << t;
    }
    EXPECT_EQ(run.bytes_moved, plan->program_bytes());
    EXPECT_EQ(exec->copy_bytes(), plan->program_bytes());
}

INSTANTIATE_TEST_SUITE_P(LmHead, ArgMaxPlan,
                         ::testing::Values(Case{4, {1, 4}}, Case{8, {2, 4}}, Case{3, {1, 3}},
                                           Case{2, {2, 1}} /* control: no vocabulary split */),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return absl::StrCat("p", info.param.devices, "_",
                                                 absl::StrJoin(info.param.argmax_counts, "x"));
                         });

} // namespace
} // namespace einsummable::runtime
