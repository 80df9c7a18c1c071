#pragma once

// Plans that split attention along its keys, lowered for a backend to run: a small
// LLaMA block whose attention takes a forced candidate (every other operator its first, as a
// random plan would), compiled on dgx-a100 with optimized exchange programs. Shared by the CPU
// backend's test (key_split_plan_test.cc) and the CUDA backend's (cuda_key_split_plan_test.cc).

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::runtime::testing {

inline constexpr uint64_t kKeySplitSeed = 20261204;

struct KeySplitCase {
    std::string workload;
    int devices;
    std::vector<int64_t> attention_counts; // sequence, heads_kv, keys
};

inline void PrintTo(const KeySplitCase& c, std::ostream* os) {
    *os << c.workload << " at p = " << c.devices << ", attention split "
        << absl::StrJoin(c.attention_counts, "x");
}

inline std::string key_split_case_name(const ::testing::TestParamInfo<KeySplitCase>& info) {
    return absl::StrCat("p", info.param.devices, "_",
                        absl::StrJoin(info.param.attention_counts, "x"));
}

// One causal sequence of 40 tokens: keys alone in 4 blocks (each query block's output box is
// written by up to 4 functions); queries and keys in 2 each (3 functions: the pair above the
// diagonal is left out) with 2 kv heads; kv heads alone (a control without partials); keys in
// 2 halves of a packed batch, the cut inside its middle sequence.
inline const std::vector<KeySplitCase>& key_split_cases() {
    static const std::string kOneSequence =
        "llama-block:tokens=40,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32";
    static const std::string kPacked =
        "llama-block:seqs=3x13,d_model=16,heads_q=4,heads_kv=1,d_head=4,d_ff=24,dtype=f32";
    static const std::vector<KeySplitCase> cases = {
        {kOneSequence, 4, {1, 1, 4}},
        {kOneSequence, 8, {2, 2, 2}},
        {kOneSequence, 2, {1, 2, 1}} /* control */,
        {kPacked, 2, {1, 1, 2}},
    };
    return cases;
}

// A case compiled and lowered. The graph is held by pointer: the ExecGraph's nodes point at
// its operators.
struct LoweredKeySplit {
    std::unique_ptr<ir::Graph> graph;
    physical::PhysicalPlan plan;
    physical::ExecGraph exec;
};

// Compiles and lowers `c`, checking the ExecGraph (check_exec_graph); failures are test
// failures (the result is then empty: graph null).
inline LoweredKeySplit lower_key_split(const KeySplitCase& c) {
    LoweredKeySplit lowered;
    absl::StatusOr<ir::Graph> graph = workloads::by_name(c.workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (!graph.ok()) {
        return lowered;
    }
    auto held = std::make_unique<ir::Graph>(*std::move(graph));
    absl::StatusOr<logical::GraphCandidates> candidates =
        logical::enumerate_graph(*held, c.devices);
    EXPECT_TRUE(candidates.ok()) << candidates.status();
    if (!candidates.ok()) {
        return lowered;
    }
    std::vector<int> choice(held->nodes().size(), 0);
    bool found = false;
    for (size_t n = 0; n < held->nodes().size(); ++n) {
        if (held->node(static_cast<ir::NodeId>(n)).op->kind() != "attention") {
            continue;
        }
        for (size_t k = 0; k < (*candidates)[n].size(); ++k) {
            if ((*candidates)[n][k].counts == c.attention_counts) {
                choice[n] = static_cast<int>(k);
                found = true;
            }
        }
    }
    EXPECT_TRUE(found) << "no attention candidate with those counts";
    if (!found) {
        return lowered;
    }
    const logical::LogicalPlan logical = logical::make_plan(
        *held, {c.devices, logical::Planner::random, kKeySplitSeed}, *candidates, choice);
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology("dgx-a100");
    EXPECT_TRUE(topology.ok()) << topology.status();
    if (!topology.ok()) {
        return lowered;
    }
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::optimized;
    options.synthesis.seed = kKeySplitSeed;
    options.synthesis.iterations = 40;
    absl::StatusOr<physical::PhysicalPlan> plan =
        physical::compile_physical(*held, logical, *topology, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) {
        return lowered;
    }
    absl::StatusOr<physical::ExecGraph> exec = physical::lower(*held, *plan);
    EXPECT_TRUE(exec.ok()) << exec.status();
    if (!exec.ok()) {
        return lowered;
    }
    const absl::Status checked = physical::check_exec_graph(*exec, c.devices);
    EXPECT_TRUE(checked.ok()) << checked;
    if (!checked.ok()) {
        return lowered;
    }
    // Partial results exactly where keys are split (the control splits only kv heads): buffers
    // with log-sum-exp statistics and aggregate(log_sum_exp) nodes.
    int partial_buffers = 0;
    int lse_aggregates = 0;
    for (const physical::Buffer& buffer : exec->buffers) {
        partial_buffers += buffer.stats ? 1 : 0;
    }
    for (const physical::ExecNode& node : exec->nodes) {
        lse_aggregates +=
            node.kind == physical::NodeKind::aggregate && node.agg == ir::AggOp::log_sum_exp ? 1
                                                                                             : 0;
    }
    const bool keys_split = c.attention_counts[2] > 1;
    EXPECT_EQ(partial_buffers > 0, keys_split) << partial_buffers << " buffers with statistics";
    EXPECT_EQ(lse_aggregates > 0, keys_split) << lse_aggregates << " aggregate(log_sum_exp) nodes";
    lowered.graph = std::move(held);
    lowered.plan = *std::move(plan);
    lowered.exec = *std::move(exec);
    return lowered;
}

} // namespace einsummable::runtime::testing
