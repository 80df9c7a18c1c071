// On the CPU backend: plans that split argmax and top_k along their vocabulary. An LM head's
// logits (h [tokens, d] · w [d, vocab]) with their argmax and their top_k, both operators'
// candidates forced to cut the vocabulary (and the tokens), every other operator its first
// candidate as a random plan would, exchanges synthesised with up to 8 chunks and then every one
// cut into 4 (physical::pipeline_exchanges); checks that
//   - the lowered graph is well formed and combines partial results by the arg_max ⊕ (buffers
//     with statistics, aggregate(arg_max) nodes) and the top_k ⊕ (aggregate(top_k) nodes),
//     exactly when the vocabulary is cut — whole rows of k pairs, even where a cell is one row
//     and chunks would cut its pairs (the one-token cases);
//   - the saved indices and pairs equal the reference's, exactly: ties to the first index (small
//     integer inputs make them) and NaN first (a row of +inf, -inf and NaN logits);
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
constexpr int64_t kD = 8;
constexpr int64_t kVocab = 30;
constexpr int64_t kTopK = 5;

struct Case {
    int devices;
    int64_t tokens;
    std::vector<int64_t> counts; // argmax's and top_k's: tokens, vocab
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << "p = " << c.devices << ", " << c.tokens << " tokens, split "
        << absl::StrJoin(c.counts, "x");
}

ir::Graph lm_head(int64_t tokens) {
    ir::Graph graph;
    const ir::TensorId h = *graph.add_input("h", ir::DType::f32, {{"tokens", tokens}, {"d", kD}});
    const ir::TensorId w = *graph.add_input("w", ir::DType::f32, {{"d", kD}, {"vocab", kVocab}});
    const ir::TensorId logits =
        *graph.add("logits", "einsum", {{"equation", std::string("td,dv->tv")}}, {h, w});
    const ir::TensorId ids = *graph.add("ids", "argmax", {}, {logits});
    const ir::TensorId pairs = *graph.add("pairs", "top_k", {{"k", kTopK}}, {logits});
    EXPECT_TRUE(graph.save(ids).ok());
    EXPECT_TRUE(graph.save(pairs).ok());
    return graph;
}

// Small integers (exact ties); the last row of h has +inf, so that row's logits are +inf, -inf
// or NaN (inf · 0) by column.
std::map<std::string, ir::HostTensor> inputs(int64_t tokens) {
    std::mt19937_64 rng(kSeed);
    std::vector<double> h(tokens * kD);
    std::vector<double> w(kD * kVocab);
    for (double& v : h) {
        v = static_cast<double>(rng() % 2);
    }
    for (double& v : w) {
        v = static_cast<double>(rng() % 3) - 1.0;
    }
    h[(tokens - 1) * kD + 1] = std::numeric_limits<double>::infinity();
    return {{"h", ir::HostTensor(ir::Box::from_shape({tokens, kD}), h)},
            {"w", ir::HostTensor(ir::Box::from_shape({kD, kVocab}), w)}};
}

class ArgMaxPlan : public ::testing::TestWithParam<Case> {};

bool same(double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || a == b;
}

TEST_P(ArgMaxPlan, VocabularySplitsCombinePairsToTheReferenceIndices) {
    const Case& c = GetParam();
    std::cout << "seed " << kSeed << "\n";
    const ir::Graph graph = lm_head(c.tokens);
    absl::StatusOr<logical::GraphCandidates> candidates =
        logical::enumerate_graph(graph, c.devices);
    ASSERT_TRUE(candidates.ok()) << candidates.status();
    std::vector<int> choice(graph.nodes().size(), 0);
    for (size_t node : {1, 2}) { // the argmax and the top_k
        bool found = false;
        for (size_t k = 0; k < (*candidates)[node].size(); ++k) {
            if ((*candidates)[node][k].counts == c.counts) {
                choice[node] = static_cast<int>(k);
                found = true;
            }
        }
        ASSERT_TRUE(found) << "no " << graph.node(static_cast<ir::NodeId>(node)).op->kind()
                           << " candidate with those counts";
    }
    const logical::LogicalPlan logical = logical::make_plan(
        graph, {c.devices, logical::Planner::random, kSeed}, *candidates, choice);
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology("dgx-a100");
    ASSERT_TRUE(topology.ok()) << topology.status();
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::optimized;
    options.synthesis.seed = kSeed;
    options.synthesis.iterations = 40;
    options.synthesis.max_chunks = 8; // offered to every exchange
    absl::StatusOr<physical::PhysicalPlan> plan =
        physical::compile_physical(graph, logical, *topology, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // Every exchange in 4 chunks, which the synthesis rarely picks for blocks this small.
    const absl::Status pipelined = physical::pipeline_exchanges(*plan, *topology, 4);
    ASSERT_TRUE(pipelined.ok()) << pipelined;
    absl::StatusOr<physical::ExecGraph> exec = physical::lower(graph, *plan);
    ASSERT_TRUE(exec.ok()) << exec.status();
    const absl::Status checked = physical::check_exec_graph(*exec, c.devices);
    ASSERT_TRUE(checked.ok()) << checked;

    int partial_buffers = 0;
    std::map<ir::AggOp, int> aggregates;
    for (const physical::Buffer& buffer : exec->buffers) {
        partial_buffers += buffer.stats ? 1 : 0;
    }
    for (const physical::ExecNode& exec_node : exec->nodes) {
        if (exec_node.kind == physical::NodeKind::aggregate) {
            aggregates[exec_node.agg] += 1;
        }
    }
    const bool vocab_split = c.counts[1] > 1;
    EXPECT_EQ(partial_buffers > 0, vocab_split) << partial_buffers << " buffers with statistics";
    EXPECT_EQ(aggregates[ir::AggOp::arg_max] > 0, vocab_split)
        << aggregates[ir::AggOp::arg_max] << " aggregate(arg_max) nodes";
    EXPECT_EQ(aggregates[ir::AggOp::top_k] > 0, vocab_split)
        << aggregates[ir::AggOp::top_k] << " aggregate(top_k) nodes";

    const std::map<std::string, ir::HostTensor> whole = inputs(c.tokens);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(graph, whole);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const ir::HostTensor& want = reference->at("ids");
    const int64_t last = c.tokens - 1;
    EXPECT_EQ(want.data()[last], [&] { // the last row's first NaN: the first column where w's
                                       // row 1 is 0
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
    ASSERT_EQ(static_cast<int64_t>(got.size()), c.tokens);
    for (int64_t t = 0; t < c.tokens; ++t) {
        EXPECT_EQ(static_cast<double>(got[t]), want.data()[t]) << "token " << t;
    }
    // The pairs: pair 0 is argmax's choice, and every pair the reference's, NaN first.
    const ir::HostTensor& want_pairs = reference->at("pairs");
    ASSERT_EQ(run.outputs.count("pairs"), 1u);
    const std::vector<float>& got_pairs = run.outputs.at("pairs");
    ASSERT_EQ(static_cast<int64_t>(got_pairs.size()), want_pairs.size());
    for (int64_t t = 0; t < c.tokens; ++t) {
        EXPECT_EQ(want_pairs.data()[t * 2 * kTopK + 1], want.data()[t]) << "token " << t;
        for (int64_t at = t * 2 * kTopK; at < (t + 1) * 2 * kTopK; ++at) {
            EXPECT_TRUE(same(got_pairs[at], want_pairs.data()[at]))
                << "token " << t << ", element " << at - t * 2 * kTopK << ": " << got_pairs[at]
                << " vs " << want_pairs.data()[at];
        }
    }
    EXPECT_EQ(run.bytes_moved, plan->program_bytes());
    EXPECT_EQ(exec->copy_bytes(), plan->program_bytes());
}

INSTANTIATE_TEST_SUITE_P(LmHead, ArgMaxPlan,
                         ::testing::Values(Case{4, 6, {1, 4}}, Case{8, 6, {2, 4}},
                                           Case{3, 6, {1, 3}}, Case{4, 1, {1, 4}},
                                           Case{8, 1, {1, 8}},
                                           Case{2, 6, {2, 1}} /* control: no vocabulary split */),
                         [](const ::testing::TestParamInfo<Case>& info) {
                             return absl::StrCat("p", info.param.devices, "_t", info.param.tokens,
                                                 "_", absl::StrJoin(info.param.counts, "x"));
                         });

} // namespace
} // namespace einsummable::runtime
