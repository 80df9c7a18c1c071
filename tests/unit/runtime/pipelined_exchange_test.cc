// The CPU backend on pipelined exchanges: every exchange program of a compiled plan rewritten
// into 3 chunks with ordered sends (compiler/exprog/pipelining.h: split_relays, chunk_actions,
// order_sends), lowered (compiler/physical/lower.cc: chunks become slice/copy/aggregate/concat
// nodes, ORDER becomes deps between copies) and run on the CPU backend with random f32 inputs.
//
// For the FFN, a small LLaMA block and chain B at p ∈ {3, 4} (dp planner, optimized synthesis on
// dgx-a100), each case checks that
//   - every rewritten program is valid under its membership, and the rewrite is not vacuous:
//     some program has an ORDER pair and a chunked action; in the lowered graph more copy nodes
//     move a box strictly inside an exchange cell than in the un-rewritten one, and some copy
//     waits (deps) for another copy that wrote none of its inputs (ORDER survived lowering);
//   - the pipelined plan's saved outputs match the double-precision reference within 1e-5
//     (what runtime::output_tolerance gives f32, as in plan_test);
//   - the same plan un-rewritten gives bitwise the same outputs (chunking keeps every
//     aggregate's tree, so the same f32 additions happen in the same order), and both move the
//     same bytes per device pair, which are what their ExecGraphs' copies move;
//   - the pipelined plan lowered without buffer views (every slice and concat a node) has more
//     nodes, the same copies, aggregates and kernels, and gives bitwise the same outputs.

#include <algorithm>
#include <cctype>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/pipelining.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/lower.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/cpu/cpu_backend.h"
#include "tests/unit/runtime/exec_run.h"

namespace einsummable::runtime {
namespace {

using physical::BufferId;
using physical::Exchange;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;
using physical::PhysicalPlan;

constexpr uint64_t kSeed = 20261130;
constexpr int kChunks = 3;
constexpr double kF32Tolerance = 1e-5; // runtime::output_tolerance(f32)

template <typename F>
void for_each_exchange(const PhysicalPlan& plan, F&& f) {
    for (const physical::OperatorPlacement& op : plan.operators) {
        for (const Exchange& exchange : op.exchanges) {
            f(exchange);
        }
    }
    for (const Exchange& exchange : plan.saved) {
        f(exchange);
    }
}

using testing::ExecRun;
using testing::random_inputs;
using testing::run_on_cpu;

struct Case {
    std::string workload;
    int devices;
};

void PrintTo(const Case& c, std::ostream* os) {
    *os << c.workload << " at p = " << c.devices;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    std::string name = absl::StrCat(info.param.workload, "_p", info.param.devices);
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) {
            c = '_';
        }
    }
    return name;
}

class PipelinedExchange : public ::testing::TestWithParam<Case> {};

TEST_P(PipelinedExchange, CpuBackendMatchesTheReferenceAndTheUnpipelinedPlan) {
    const Case& param = GetParam();
    std::cout << "seed " << kSeed << "\n";

    absl::StatusOr<ir::Graph> graph = workloads::by_name(param.workload);
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<logical::LogicalPlan> logical =
        logical::optimize(*graph, {param.devices, logical::Planner::dp, kSeed});
    ASSERT_TRUE(logical.ok()) << logical.status();
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology("dgx-a100");
    ASSERT_TRUE(topology.ok()) << topology.status();
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::optimized;
    options.synthesis.seed = kSeed;
    options.synthesis.iterations = 40;
    absl::StatusOr<PhysicalPlan> plain =
        physical::compile_physical(*graph, *logical, *topology, options);
    ASSERT_TRUE(plain.ok()) << plain.status();

    PhysicalPlan pipelined = *plain;
    const absl::Status rewritten = physical::pipeline_exchanges(pipelined, *topology, kChunks);
    ASSERT_TRUE(rewritten.ok()) << rewritten;

    // The rewrite did something — where the plan moves anything: the DP plans of the FFN and
    // the LLaMA block at p = 3 send nothing between devices now that no plan gathers its saved
    // outputs onto device 0 (those sends were all they had), so only their results are checked.
    bool moves = false;
    for (const std::vector<int64_t>& row : plain->program_bytes()) {
        for (int64_t bytes : row) {
            moves = moves || bytes > 0;
        }
    }
    int orders = 0, chunked_actions = 0;
    std::map<std::string, std::vector<ir::Box>> cells; // by tensor name
    for_each_exchange(pipelined, [&](const Exchange& exchange) {
        orders += static_cast<int>(exchange.program.orders.size());
        for (const exprog::Action& action : exchange.program.actions) {
            chunked_actions += action.chunk.count > 1 ? 1 : 0;
        }
        std::vector<ir::Box>& mine = cells[graph->tensor(exchange.tensor).name];
        mine.insert(mine.end(), exchange.cells.begin(), exchange.cells.end());
    });
    if (moves) {
        EXPECT_GT(orders, 0) << "no exchange program has an ORDER pair";
        EXPECT_GT(chunked_actions, 0) << "no exchange program has a chunked action";
    }

    absl::StatusOr<ExecGraph> plain_exec = physical::lower(*graph, *plain);
    ASSERT_TRUE(plain_exec.ok()) << plain_exec.status();
    absl::StatusOr<ExecGraph> pipelined_exec = physical::lower(*graph, pipelined);
    ASSERT_TRUE(pipelined_exec.ok()) << pipelined_exec.status();
    for (const ExecGraph* exec : {&*plain_exec, &*pipelined_exec}) {
        absl::Status checked = physical::check_exec_graph(*exec, param.devices);
        ASSERT_TRUE(checked.ok()) << checked;
    }

    // Some copy moves a chunk: a nonempty box strictly inside a cell of an exchange of its
    // tensor; more of them than in the un-pipelined plan (whose synthesis may chunk too).
    auto chunk_copies = [&](const ExecGraph& exec) {
        int count = 0;
        for (const ExecNode& node : exec.nodes) {
            if (node.kind != NodeKind::copy) {
                continue;
            }
            const physical::Buffer& buffer = exec.buffers[node.outputs[0]];
            auto it = cells.find(buffer.tensor);
            if (it == cells.end() || buffer.box.empty()) {
                continue;
            }
            for (const ir::Box& cell : it->second) {
                if (cell.contains(buffer.box) && buffer.box.volume() < cell.volume()) {
                    ++count;
                    break;
                }
            }
        }
        return count;
    };
    if (moves) {
        EXPECT_GT(chunk_copies(*pipelined_exec), chunk_copies(*plain_exec))
            << "no more copy nodes move less than a whole exchange cell than before the rewrite";
    }

    // ORDER became deps between copies: some copy waits for another copy that wrote none of
    // its inputs (the send ahead of it on its port).
    bool ordered = false;
    for (const ExecNode& node : pipelined_exec->nodes) {
        if (node.kind != NodeKind::copy) {
            continue;
        }
        for (int dep : node.deps) {
            const ExecNode& before = pipelined_exec->nodes[dep];
            ordered = ordered || (before.kind == NodeKind::copy &&
                                  std::find(node.inputs.begin(), node.inputs.end(),
                                            before.outputs[0]) == node.inputs.end());
        }
    }
    EXPECT_TRUE(ordered || !moves) << "no copy waits for another: ORDER was lost in the lowering";

    const std::map<std::string, ir::HostTensor> inputs = random_inputs(*graph, kSeed);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(*graph, inputs, kernels::cpu::run_block);
    ASSERT_TRUE(reference.ok()) << reference.status();

    const ExecRun plain_run = run_on_cpu(*plain_exec, inputs);
    const ExecRun pipelined_run = run_on_cpu(*pipelined_exec, inputs);
    ASSERT_EQ(pipelined_run.outputs.size(), reference->size());
    ASSERT_EQ(plain_run.outputs.size(), reference->size());
    for (const auto& [name, expected] : *reference) {
        ASSERT_EQ(pipelined_run.outputs.count(name), 1u) << name;
        const std::vector<float>& got = pipelined_run.outputs.at(name);
        const std::vector<float>& plain_got = plain_run.outputs.at(name);
        ASSERT_EQ(static_cast<int64_t>(got.size()), expected.size()) << name;
        EXPECT_LE(ir::max_relative_error(
                      ir::HostTensor(expected.box(), std::vector<double>(got.begin(), got.end())),
                      expected),
                  kF32Tolerance)
            << name << " (pipelined)";
        EXPECT_LE(ir::max_relative_error(
                      ir::HostTensor(expected.box(),
                                     std::vector<double>(plain_got.begin(), plain_got.end())),
                      expected),
                  kF32Tolerance)
            << name << " (un-pipelined)";
        ASSERT_EQ(got.size(), plain_got.size()) << name;
        EXPECT_EQ(std::memcmp(got.data(), plain_got.data(), got.size() * sizeof(float)), 0)
            << name << ": the pipelined plan's output differs bitwise from the un-pipelined one";
    }

    // Buffer views (exec_graph.h Buffer::parent): lowered without them, the pipelined plan
    // has the same copies, aggregates and kernels but a slice per chunk read out of a larger
    // block and a concat per block assembled; with them, fewer nodes and bitwise the same
    // outputs.
    absl::StatusOr<ExecGraph> unviewed_exec =
        physical::lower(*graph, pipelined, nullptr, nullptr, /*views=*/false);
    ASSERT_TRUE(unviewed_exec.ok()) << unviewed_exec.status();
    auto count = [](const ExecGraph& exec, std::initializer_list<NodeKind> kinds) {
        return std::count_if(exec.nodes.begin(), exec.nodes.end(), [&](const ExecNode& node) {
            return std::find(kinds.begin(), kinds.end(), node.kind) != kinds.end();
        });
    };
    for (NodeKind kind : {NodeKind::copy, NodeKind::aggregate, NodeKind::kernel}) {
        EXPECT_EQ(count(*pipelined_exec, {kind}), count(*unviewed_exec, {kind}))
            << physical::node_kind_name(kind);
    }
    if (moves) {
        EXPECT_LT(count(*pipelined_exec, {NodeKind::slice, NodeKind::concat}),
                  count(*unviewed_exec, {NodeKind::slice, NodeKind::concat}))
            << "views replaced no slice or concat of the pipelined plan";
    }
    std::cout << "pipelined plan: " << pipelined_exec->nodes.size() << " nodes with views, "
              << unviewed_exec->nodes.size() << " without\n";
    const ExecRun unviewed_run = run_on_cpu(*unviewed_exec, inputs);
    for (const auto& [name, got] : pipelined_run.outputs) {
        const std::vector<float>& unviewed_got = unviewed_run.outputs.at(name);
        ASSERT_EQ(got.size(), unviewed_got.size()) << name;
        EXPECT_EQ(std::memcmp(got.data(), unviewed_got.data(), got.size() * sizeof(float)), 0)
            << name << ": the plan with views differs bitwise from the one without";
    }
    EXPECT_EQ(unviewed_run.bytes_moved, pipelined_run.bytes_moved);

    EXPECT_EQ(pipelined_run.bytes_moved, plain_run.bytes_moved);
    EXPECT_EQ(pipelined_run.bytes_moved, pipelined_exec->copy_bytes());
    EXPECT_EQ(plain_run.bytes_moved, plain_exec->copy_bytes());
}

std::vector<Case> cases() {
    std::vector<Case> all;
    for (const char* workload :
         {"ffn:tokens=32,d_model=16,d_ff=24",
          "llama-block:seqs=3x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
          "chain:B,scale=512,dtype=f32"}) {
        for (int devices : {3, 4}) {
            all.push_back({workload, devices});
        }
    }
    return all;
}

INSTANTIATE_TEST_SUITE_P(Workloads, PipelinedExchange, ::testing::ValuesIn(cases()), case_name);

} // namespace
} // namespace einsummable::runtime
