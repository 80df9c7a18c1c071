// runtime/cuda's graph plan (graph_plan.h), checked on any machine: the CUDA graph a plan
// becomes keeps every dependency of the ExecGraph and orders every conflicting memory access,
// for the reference workloads compiled by every planner and schedule at 1-8 devices, with the
// devices on distinct GPUs with and without peer access, and as virtual devices on one GPU —
// each also with its inputs resident (read in place from arenas shared with other plans).
// Replay a failure with EINSUMMABLE_TEST_SEED=<printed seed>.

#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/rank_split.h"
#include "compiler/workloads/by_name.h"
#include "compiler/workloads/llama.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/graph_plan.h"
#include "runtime/plan.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/runtime/cuda_resident_cases.h"
#include "tests/unit/runtime/key_split_cases.h"
#include "tests/unit/runtime/reference_check.h"

namespace einsummable::runtime::cuda {
namespace {

using physical::Buffer;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

std::unique_ptr<Plan> compile(const std::string& workload, int devices, logical::Planner planner,
                              exprog::SynthesisMode schedule) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    CompileOptions options;
    options.devices = devices;
    options.planner = planner;
    options.schedule = schedule;
    options.seed = 7;
    options.synthesis_iterations = 40;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(*std::move(graph), options, cpu::make_cpu_backend({devices, 1}));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

// How the logical devices sit on GPUs.
enum class Machine { distinct_peer, distinct_no_peer, one_gpu, pairs_half_peer };

GraphPlanOptions machine_options(const ExecGraph& graph, Machine machine, std::mt19937_64& rng) {
    GraphPlanOptions options;
    const int devices = graph.devices;
    int gpus = devices;
    for (int device = 0; device < devices; ++device) {
        switch (machine) {
        case Machine::one_gpu:
            options.gpu_of_device.push_back(0);
            gpus = 1;
            break;
        case Machine::pairs_half_peer:
            options.gpu_of_device.push_back(device / 2);
            gpus = (devices + 1) / 2;
            break;
        default:
            options.gpu_of_device.push_back(device);
        }
    }
    options.peer_access.assign(gpus, std::vector<bool>(gpus, false));
    for (int a = 0; a < gpus; ++a) {
        for (int b = 0; b < gpus; ++b) {
            const bool peer = machine == Machine::distinct_peer ||
                              (machine == Machine::pairs_half_peer && (a + b) % 2 == 0);
            options.peer_access[a][b] = a != b && peer;
        }
    }
    std::bernoulli_distribution scratch(0.5);
    for (const ExecNode& node : graph.nodes) {
        options.uses_scratch.push_back(node.kind == NodeKind::kernel && scratch(rng));
    }
    return options;
}

struct Case {
    std::string workload;
    int devices;
    logical::Planner planner;
    exprog::SynthesisMode schedule;
};

class GraphPlanTest : public ::testing::TestWithParam<Case> {};

TEST_P(GraphPlanTest, KeepsEveryDependencyAndOrdersEveryConflict) {
    const Case& param = GetParam();
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::unique_ptr<Plan> plan =
        compile(param.workload, param.devices, param.planner, param.schedule);
    ASSERT_NE(plan, nullptr);
    // The same graph with every input that is not also saved read in place.
    std::set<std::string> residable;
    for (const auto& [name, blocks] : plan->exec_graph().input_blocks) {
        if (plan->exec_graph().outputs.count(name) == 0) {
            residable.insert(name);
        }
    }
    const ExecGraph resident = runtime::testing::with_resident_inputs(
        plan->exec_graph(),
        runtime::testing::share_inputs({&plan->exec_graph()}, residable, param.devices));
    ASSERT_TRUE(physical::check_exec_graph(resident, param.devices).ok())
        << physical::check_exec_graph(resident, param.devices);
    for (const ExecGraph* graph : {&plan->exec_graph(), &resident}) {
        for (Machine machine : {Machine::distinct_peer, Machine::distinct_no_peer, Machine::one_gpu,
                                Machine::pairs_half_peer}) {
            SCOPED_TRACE(absl::StrCat("machine ", static_cast<int>(machine),
                                      graph == &resident ? ", inputs resident" : ""));
            const GraphPlanOptions options = machine_options(*graph, machine, rng);
            absl::StatusOr<GraphPlan> graph_plan = plan_graph(*graph, options);
            ASSERT_TRUE(graph_plan.ok()) << graph_plan.status();
            absl::Status check = check_graph_plan(*graph, options, *graph_plan);
            EXPECT_TRUE(check.ok()) << check << "\n" << graph_plan->summary();

            int64_t host_copies = 0;
            for (const GraphOp& op : graph_plan->ops) {
                host_copies += op.kind == GraphOpKind::to_host;
                if (op.kind == GraphOpKind::memcpy && op.src.device != op.dst.device) {
                    const int src_gpu = options.gpu_of_device[op.src.device];
                    const int dst_gpu = options.gpu_of_device[op.dst.device];
                    EXPECT_TRUE(src_gpu == dst_gpu || options.peer_access[src_gpu][dst_gpu])
                        << "a direct copy between GPUs without peer access";
                }
            }
            int64_t cross_gpu_copies = 0;
            for (const ExecNode& node : graph->nodes) {
                if (node.kind == NodeKind::copy && graph->buffers[node.inputs[0]].bytes() > 0) {
                    const int src_gpu =
                        options.gpu_of_device[graph->buffers[node.inputs[0]].device];
                    const int dst_gpu = options.gpu_of_device[node.device];
                    cross_gpu_copies +=
                        src_gpu != dst_gpu && !options.peer_access[src_gpu][dst_gpu];
                }
            }
            EXPECT_EQ(host_copies, cross_gpu_copies)
                << "every copy between GPUs without peer access goes through the host, no other";
            if (cross_gpu_copies == 0) {
                EXPECT_EQ(graph_plan->staging_bytes, 0);
            }
        }
    }
}

std::vector<Case> cases() {
    std::vector<Case> all;
    for (const char* workload :
         {"ffn:tokens=32,d_model=16,d_ff=24",
          "llama-block:seqs=3x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
          "chain:B,scale=512,dtype=f32"}) {
        for (int devices : {1, 2, 4, 8}) {
            for (logical::Planner planner :
                 {logical::Planner::dp, logical::Planner::greedy, logical::Planner::random}) {
                for (exprog::SynthesisMode schedule :
                     {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
                    all.push_back({workload, devices, planner, schedule});
                }
            }
        }
    }
    return all;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    std::string name =
        absl::StrCat(info.param.workload.substr(0, info.param.workload.find(':')), "_p",
                     info.param.devices, "_", logical::planner_name(info.param.planner), "_",
                     exprog::synthesis_mode_name(info.param.schedule));
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) {
            c = '_';
        }
    }
    return name;
}

INSTANTIATE_TEST_SUITE_P(Workloads, GraphPlanTest, ::testing::ValuesIn(cases()), case_name);

// Plans with attention split along its keys (key_split_cases.h): partial results carry
// log-sum-exp statistics after their elements, and every slice or concat of one copies them as
// ops of their own (GraphOp::stats) — one per region, beside the region's elements, and ordered
// like them — on every machine shape.
class KeySplitGraphPlanTest : public ::testing::TestWithParam<runtime::testing::KeySplitCase> {};

TEST_P(KeySplitGraphPlanTest, CopiesTheStatisticsOfEveryRegionAndOrdersEveryAccess) {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const runtime::testing::LoweredKeySplit lowered = runtime::testing::lower_key_split(GetParam());
    ASSERT_NE(lowered.graph, nullptr);
    const ExecGraph& graph = lowered.exec;
    // Per slice or concat node: the regions whose statistics it copies.
    std::vector<int> stats_regions(graph.nodes.size(), 0);
    int expected_stats_ops = 0;
    for (size_t n = 0; n < graph.nodes.size(); ++n) {
        const ExecNode& node = graph.nodes[n];
        const bool regions = node.kind == NodeKind::slice || node.kind == NodeKind::concat;
        if (regions && graph.buffers[node.outputs[0]].stats) {
            stats_regions[n] = static_cast<int>(node.inputs.size());
            expected_stats_ops += stats_regions[n];
        }
    }
    std::cout << expected_stats_ops << " regions of statistics\n";
    for (Machine machine : {Machine::distinct_peer, Machine::distinct_no_peer, Machine::one_gpu}) {
        SCOPED_TRACE(absl::StrCat("machine ", static_cast<int>(machine)));
        const GraphPlanOptions options = machine_options(graph, machine, rng);
        absl::StatusOr<GraphPlan> graph_plan = plan_graph(graph, options);
        ASSERT_TRUE(graph_plan.ok()) << graph_plan.status();
        absl::Status check = check_graph_plan(graph, options, *graph_plan);
        EXPECT_TRUE(check.ok()) << check << "\n" << graph_plan->summary();
        int stats_ops = 0;
        for (size_t n = 0; n < graph.nodes.size(); ++n) {
            int of_node = 0;
            for (int op_idx : graph_plan->ops_of_node[n]) {
                const GraphOp& op = graph_plan->ops[static_cast<size_t>(op_idx)];
                if (!op.stats) {
                    continue;
                }
                ++of_node;
                // The statistics are f32 after the elements: what the op touches lies there.
                const Buffer& to = graph.buffers[graph.nodes[n].outputs[0]];
                ASSERT_EQ(op.writes.size(), 1u);
                EXPECT_EQ(op.writes[0].part, BufferPart::stats);
                EXPECT_GE(op.writes[0].offset, to.offset + to.stats_offset());
                EXPECT_LE(op.writes[0].offset + op.writes[0].bytes, to.offset + to.bytes());
            }
            EXPECT_EQ(of_node, stats_regions[n])
                << physical::node_label(graph, static_cast<int>(n));
            stats_ops += of_node;
        }
        EXPECT_EQ(stats_ops, expected_stats_ops);
    }
}

INSTANTIATE_TEST_SUITE_P(Attention, KeySplitGraphPlanTest,
                         ::testing::ValuesIn(runtime::testing::key_split_cases()),
                         runtime::testing::key_split_case_name);

// A buffer's elements and its statistics are disjoint bytes: writing one while another op
// reads the other needs no order, but each still conflicts with the whole buffer.
TEST(GraphPlanCheckTest, ElementsAndStatisticsOfOneBufferConflictOnlyWithThemselves) {
    ExecGraph graph;
    graph.devices = 1;
    Buffer buffer;
    buffer.box = ir::Box({{0, 4}, {0, 8}});
    buffer.dtype = ir::DType::f32;
    buffer.stats = true;
    graph.buffers = {buffer};
    const MemoryRange all{.buffer = 0, .region = buffer.box, .part = BufferPart::all};
    MemoryRange elements = all;
    elements.part = BufferPart::elements;
    MemoryRange stats = all;
    stats.part = BufferPart::stats;
    MemoryRange other_rows = stats;
    other_rows.region = ir::Box({{2, 4}, {0, 8}});
    stats.region = ir::Box({{0, 2}, {0, 8}});
    auto conflict = [&](const MemoryRange& a, const MemoryRange& b) {
        GraphOp writer;
        writer.writes = {a};
        GraphOp reader;
        reader.reads = {b};
        GraphPlan unordered;
        unordered.ops = {writer, reader};
        unordered.ops_of_node = {{0, 1}};
        ExecGraph one = graph;
        physical::ExecNode node;
        node.kind = NodeKind::aggregate;
        one.nodes = {node};
        GraphPlanOptions options;
        options.gpu_of_device = {0};
        options.peer_access = {{false}};
        options.uses_scratch = {false};
        return !check_graph_plan(one, options, unordered).ok();
    };
    EXPECT_FALSE(conflict(elements, stats));
    EXPECT_FALSE(conflict(stats, elements));
    EXPECT_TRUE(conflict(all, stats));
    EXPECT_TRUE(conflict(stats, all));
    EXPECT_TRUE(conflict(elements, all));
    EXPECT_TRUE(conflict(stats, stats));
    // The statistics of rows [0, 2) and of rows [2, 4) are different floats.
    EXPECT_FALSE(conflict(stats, other_rows));
}

// ---- the checker catches what a wrong plan does --------------------------------------------

struct Fixture {
    std::unique_ptr<Plan> plan;
    GraphPlanOptions options;
    GraphPlan graph_plan;
};

Fixture four_devices(Machine machine) {
    Fixture f;
    f.plan = compile("ffn:tokens=32,d_model=16,d_ff=24", 4, logical::Planner::dp,
                     exprog::SynthesisMode::optimized);
    std::mt19937_64 rng(1);
    f.options = machine_options(f.plan->exec_graph(), machine, rng);
    absl::StatusOr<GraphPlan> graph_plan = plan_graph(f.plan->exec_graph(), f.options);
    EXPECT_TRUE(graph_plan.ok()) << graph_plan.status();
    f.graph_plan = *std::move(graph_plan);
    return f;
}

TEST(GraphPlanCheckTest, CatchesADroppedDependency) {
    Fixture f = four_devices(Machine::distinct_peer);
    ASSERT_TRUE(check_graph_plan(f.plan->exec_graph(), f.options, f.graph_plan).ok());
    bool dropped = false;
    for (GraphOp& op : f.graph_plan.ops) {
        if (op.kind == GraphOpKind::kernel && !op.deps.empty()) {
            op.deps.clear();
            dropped = true;
            break;
        }
    }
    ASSERT_TRUE(dropped);
    absl::Status check = check_graph_plan(f.plan->exec_graph(), f.options, f.graph_plan);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
}

// Two slices of a [4,8] f32 block on device 0 (rows: contiguous; columns: strided), each
// copied to device 1.
ExecGraph slices_then_copies() {
    ExecGraph g;
    g.devices = 2;
    g.arena_bytes = {1024, 1024};
    auto buffer = [&](int device, ir::Box box, int64_t offset) {
        Buffer b;
        b.device = device;
        b.box = std::move(box);
        b.tensor = "x";
        b.offset = offset;
        g.buffers.push_back(b);
    };
    buffer(0, ir::Box({{0, 4}, {0, 8}}), 0);   // b0: the whole block
    buffer(0, ir::Box({{0, 2}, {0, 8}}), 128); // b1: rows 0-1
    buffer(0, ir::Box({{0, 4}, {0, 4}}), 192); // b2: columns 0-3
    buffer(1, ir::Box({{0, 2}, {0, 8}}), 0);   // b3: b1 on device 1
    buffer(1, ir::Box({{0, 4}, {0, 4}}), 64);  // b4: b2 on device 1
    g.buffers[0].persistent = true;
    auto node = [&](NodeKind kind, int device, int input, int output, std::vector<int> deps) {
        ExecNode n;
        n.kind = kind;
        n.device = device;
        n.inputs = {input};
        n.outputs = {output};
        n.deps = std::move(deps);
        g.nodes.push_back(n);
    };
    node(NodeKind::slice, 0, 0, 1, {});
    node(NodeKind::slice, 0, 0, 2, {});
    node(NodeKind::copy, 1, 1, 3, {0});
    node(NodeKind::copy, 1, 2, 4, {1});
    return g;
}

GraphPlanOptions two_gpus(bool peer) {
    GraphPlanOptions options;
    options.gpu_of_device = {0, 1};
    options.peer_access = {{false, peer}, {peer, false}};
    options.uses_scratch.assign(4, false);
    return options;
}

TEST(GraphPlanShapeTest, ContiguousSlicesAreMemcpysStridedOnesKernels) {
    const ExecGraph g = slices_then_copies();
    ASSERT_TRUE(physical::check_exec_graph(g, 2).ok()) << physical::check_exec_graph(g, 2);
    const GraphPlanOptions options = two_gpus(true);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->ops.size(), 4u);
    EXPECT_EQ(plan->ops[0].kind, GraphOpKind::memcpy);
    EXPECT_EQ(plan->ops[0].src.offset, 0);
    EXPECT_EQ(plan->ops[0].src.bytes, 64);
    EXPECT_EQ(plan->ops[0].dst.offset, 128);
    EXPECT_EQ(plan->ops[1].kind, GraphOpKind::region_copy);
    EXPECT_EQ(plan->ops[1].region, g.buffers[2].box);
    EXPECT_EQ(plan->ops[2].kind, GraphOpKind::memcpy);
    EXPECT_EQ(plan->ops[2].dst.device, 1);
    EXPECT_EQ(plan->ops[3].kind, GraphOpKind::memcpy);
    // The second copy out of device 0 waits for the first (the exchange's order), besides its
    // own slice.
    EXPECT_EQ(plan->ops[3].deps, (std::vector<int>{1, 2}));
    EXPECT_EQ(plan->staging_bytes, 0);
    EXPECT_TRUE(check_graph_plan(g, options, *plan).ok()) << check_graph_plan(g, options, *plan);
}

TEST(GraphPlanShapeTest, CopiesWithoutPeerAccessGoThroughPinnedHostMemory) {
    const ExecGraph g = slices_then_copies();
    const GraphPlanOptions options = two_gpus(false);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->ops.size(), 6u);
    EXPECT_EQ(plan->ops[2].kind, GraphOpKind::to_host);
    EXPECT_EQ(plan->ops[2].device, 0); // the source GPU copies out
    EXPECT_EQ(plan->ops[3].kind, GraphOpKind::from_host);
    EXPECT_EQ(plan->ops[3].device, 1);
    EXPECT_EQ(plan->ops[3].deps, (std::vector<int>{2}));
    EXPECT_EQ(plan->ops[4].kind, GraphOpKind::to_host);
    EXPECT_EQ(plan->ops[4].deps, (std::vector<int>{1, 2}));
    // Each copy has its own 256-byte aligned staging range.
    EXPECT_EQ(plan->ops[2].dst.offset, 0);
    EXPECT_EQ(plan->ops[4].dst.offset, 256);
    EXPECT_EQ(plan->staging_bytes, 512);
    EXPECT_TRUE(check_graph_plan(g, options, *plan).ok()) << check_graph_plan(g, options, *plan);
}

TEST(GraphPlanCheckTest, CatchesCopiesOutOfOneDeviceLeavingTheirOrder) {
    const ExecGraph g = slices_then_copies();
    const GraphPlanOptions options = two_gpus(true);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    plan->ops[3].deps = {1};
    absl::Status check = check_graph_plan(g, options, *plan);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
    EXPECT_NE(check.message().find("exchange's order"), std::string::npos) << check;
}

TEST(GraphPlanCheckTest, CatchesUnorderedWritesToTheSameBytes) {
    ExecGraph g = slices_then_copies();
    // Both slices now write the same bytes, with nothing ordering them.
    g.buffers[2].offset = 128;
    g.buffers[2].box = ir::Box({{0, 2}, {0, 8}});
    const GraphPlanOptions options = two_gpus(true);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::Status check = check_graph_plan(g, options, *plan);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
    EXPECT_NE(check.message().find("touch the same bytes"), std::string::npos) << check;
}

// A [4,8] f32 block on device 0 concatenated from its two column halves: each half is a
// strided region of the output, and the two regions interleave in its bytes.
ExecGraph column_concat() {
    ExecGraph g;
    g.devices = 1;
    g.arena_bytes = {512};
    auto buffer = [&](ir::Box box, int64_t offset) {
        Buffer b;
        b.device = 0;
        b.box = std::move(box);
        b.tensor = "x";
        b.offset = offset;
        b.persistent = true;
        g.buffers.push_back(b);
    };
    buffer(ir::Box({{0, 4}, {0, 4}}), 0);   // b0: columns 0-3
    buffer(ir::Box({{0, 4}, {4, 8}}), 64);  // b1: columns 4-7
    buffer(ir::Box({{0, 4}, {0, 8}}), 128); // b2: the whole block
    ExecNode concat;
    concat.kind = NodeKind::concat;
    concat.device = 0;
    concat.inputs = {0, 1};
    concat.outputs = {2};
    g.nodes.push_back(concat);
    return g;
}

TEST(GraphPlanCheckTest, StridedPartsOfOneBufferConflictOnlyWhereTheirBoxesMeet) {
    const ExecGraph g = column_concat();
    ASSERT_TRUE(physical::check_exec_graph(g, 1).ok()) << physical::check_exec_graph(g, 1);
    GraphPlanOptions options;
    options.gpu_of_device = {0};
    options.peer_access = {{false}};
    options.uses_scratch = {false};
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->ops.size(), 2u);
    EXPECT_EQ(plan->ops[0].kind, GraphOpKind::region_copy);
    EXPECT_EQ(plan->ops[1].kind, GraphOpKind::region_copy);
    // Their byte spans overlap (rows interleave), their boxes do not: unordered is right.
    EXPECT_TRUE(check_graph_plan(g, options, *plan).ok()) << check_graph_plan(g, options, *plan);
    // Widen the second part's write by one column into the first's: now they conflict.
    plan->ops[1].writes[0].region = ir::Box({{0, 4}, {3, 8}});
    absl::Status check = check_graph_plan(g, options, *plan);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
    EXPECT_NE(check.message().find("touch the same bytes"), std::string::npos) << check;
}

TEST(GraphPlanCheckTest, CatchesScratchUsersRunningTogether) {
    // The q, k and v projections of a LLaMA block are independent kernels on each device.
    std::unique_ptr<Plan> plan =
        compile("llama-block:seqs=2x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32",
                2, logical::Planner::dp, exprog::SynthesisMode::optimized);
    ASSERT_NE(plan, nullptr);
    const ExecGraph& g = plan->exec_graph();
    GraphPlanOptions options = two_gpus(true);
    options.uses_scratch.assign(g.nodes.size(), false);
    absl::StatusOr<GraphPlan> unaware = plan_graph(g, options);
    ASSERT_TRUE(unaware.ok()) << unaware.status();
    std::vector<int> kernels;
    for (size_t idx = 0; idx < g.nodes.size(); ++idx) {
        if (g.nodes[idx].kind == NodeKind::kernel && g.nodes[idx].device == 0) {
            kernels.push_back(static_cast<int>(idx));
        }
    }
    int caught = 0;
    for (size_t i = 0; i < kernels.size(); ++i) {
        for (size_t j = i + 1; j < kernels.size(); ++j) {
            GraphPlanOptions pair = options;
            pair.uses_scratch[kernels[i]] = true;
            pair.uses_scratch[kernels[j]] = true;
            // A plan that knows orders them; one that does not is caught unless data orders them.
            absl::StatusOr<GraphPlan> aware = plan_graph(g, pair);
            ASSERT_TRUE(aware.ok());
            EXPECT_TRUE(check_graph_plan(g, pair, *aware).ok())
                << check_graph_plan(g, pair, *aware);
            absl::Status check = check_graph_plan(g, pair, *unaware);
            if (!check.ok()) {
                EXPECT_NE(check.message().find("scratch"), std::string::npos) << check;
                ++caught;
            }
        }
    }
    EXPECT_GT(caught, 0) << "no two independent kernels on device 0";
}

// A resident [4,8] f32 block on device 0 (resident offset 0) read four ways with no order among
// them: copied whole into device 0's arena at offset 0 (the same offset, the other space), its
// first two rows (contiguous) and first four columns (strided) sliced into the arena, and the
// whole block copied to device 1.
ExecGraph resident_reads() {
    ExecGraph g;
    g.devices = 2;
    g.arena_bytes = {512, 512};
    g.resident_bytes = {128, 0};
    auto buffer = [&](int device, ir::Box box, int64_t offset) {
        Buffer b;
        b.device = device;
        b.box = std::move(box);
        b.tensor = "w";
        b.offset = offset;
        g.buffers.push_back(b);
    };
    buffer(0, ir::Box({{0, 4}, {0, 8}}), 0);   // b0: resident
    buffer(0, ir::Box({{0, 4}, {0, 8}}), 0);   // b1: all of b0, in the arena
    buffer(0, ir::Box({{0, 2}, {0, 8}}), 128); // b2: rows 0-1
    buffer(0, ir::Box({{0, 4}, {0, 4}}), 192); // b3: columns 0-3
    buffer(1, ir::Box({{0, 4}, {0, 8}}), 0);   // b4: b0 on device 1
    g.buffers[0].persistent = true;
    g.buffers[0].resident = true;
    auto node = [&](NodeKind kind, int device, int output) {
        ExecNode n;
        n.kind = kind;
        n.device = device;
        n.inputs = {0};
        n.outputs = {output};
        g.nodes.push_back(n);
    };
    node(NodeKind::slice, 0, 1);
    node(NodeKind::slice, 0, 2);
    node(NodeKind::slice, 0, 3);
    node(NodeKind::copy, 1, 4);
    return g;
}

TEST(GraphPlanResidentTest, ResidentBuffersAreReadWhereTheyLie) {
    const ExecGraph g = resident_reads();
    ASSERT_TRUE(physical::check_exec_graph(g, 2).ok()) << physical::check_exec_graph(g, 2);
    for (bool peer : {true, false}) {
        SCOPED_TRACE(peer ? "peer access" : "no peer access");
        const GraphPlanOptions options = two_gpus(peer);
        absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
        ASSERT_TRUE(plan.ok()) << plan.status();
        ASSERT_EQ(plan->ops.size(), peer ? 4u : 5u);
        EXPECT_EQ(plan->ops[0].kind, GraphOpKind::memcpy);
        EXPECT_EQ(plan->ops[0].src.space, MemorySpace::resident);
        EXPECT_EQ(plan->ops[0].dst.space, MemorySpace::arena);
        EXPECT_EQ(plan->ops[0].dst.offset, 0);
        EXPECT_EQ(plan->ops[1].kind, GraphOpKind::memcpy);
        EXPECT_EQ(plan->ops[1].src.space, MemorySpace::resident);
        EXPECT_EQ(plan->ops[2].kind, GraphOpKind::region_copy);
        EXPECT_EQ(plan->ops[2].reads[0].space, MemorySpace::resident);
        EXPECT_EQ(plan->ops[2].writes[0].space, MemorySpace::arena);
        // The copy to device 1 reads the resident block directly, or copies it out to the host.
        EXPECT_EQ(plan->ops[3].kind, peer ? GraphOpKind::memcpy : GraphOpKind::to_host);
        EXPECT_EQ(plan->ops[3].src.space, MemorySpace::resident);
        EXPECT_EQ(plan->ops[3].dst.space, peer ? MemorySpace::arena : MemorySpace::staging);
        EXPECT_EQ(plan->staging_bytes, peer ? 0 : 256);
        // Op 0 writes arena bytes [0, 128) of device 0 while the others read resident bytes
        // [0, 128) of device 0, all unordered: different memory, so no conflict.
        for (int op = 0; op < 4; ++op) {
            EXPECT_TRUE(plan->ops[op].deps.empty()) << op;
        }
        EXPECT_TRUE(check_graph_plan(g, options, *plan).ok())
            << check_graph_plan(g, options, *plan);
    }
}

TEST(GraphPlanResidentTest, CatchesAnOpWritingResidentMemory) {
    const ExecGraph g = resident_reads();
    const GraphPlanOptions options = two_gpus(true);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    // The first slice now writes where it reads: into the resident block other plans share.
    plan->ops[0].writes[0].space = MemorySpace::resident;
    plan->ops[0].writes[0].buffer = 0;
    absl::Status check = check_graph_plan(g, options, *plan);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
    EXPECT_NE(check.message().find("resident memory"), std::string::npos) << check;
}

// A LLaMA block's decode step on resident caches (docs/runtime.md "Resident state"): its
// write_rows kernels write the caches' resident blocks in place, the one write to resident
// memory a graph plan admits, and every later reader is ordered after them.
TEST(GraphPlanResidentTest, StateUpdatesInPlaceWriteResidentMemoryInOrder) {
    workloads::LlamaConfig config = runtime::testing::tiny_llama();
    config.sequence_lengths = {1, 1};
    absl::StatusOr<ir::Graph> graph = workloads::llama_decode_step(config, 6);
    ASSERT_TRUE(graph.ok()) << graph.status();
    CompileOptions options;
    options.devices = 2;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"k_cache", "v_cache"};
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(*std::move(graph), options, cpu::make_cpu_backend({2, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ((*plan)->states().size(), 2u);
    const ExecGraph& exec = (*plan)->exec_graph();
    std::mt19937_64 rng(7);
    for (Machine machine : {Machine::distinct_peer, Machine::one_gpu}) {
        const GraphPlanOptions graph_options = machine_options(exec, machine, rng);
        absl::StatusOr<GraphPlan> graph_plan = plan_graph(exec, graph_options);
        ASSERT_TRUE(graph_plan.ok()) << graph_plan.status();
        EXPECT_TRUE(check_graph_plan(exec, graph_options, *graph_plan).ok())
            << check_graph_plan(exec, graph_options, *graph_plan);
        int resident_writes = 0;
        for (const GraphOp& op : graph_plan->ops) {
            for (const MemoryRange& write : op.writes) {
                resident_writes += write.space == MemorySpace::resident;
            }
        }
        EXPECT_GE(resident_writes, 2) << "the caches' updates";
    }
}

// A rank's part of a graph split over processes (docs/cluster.md): its send and recv nodes become
// message ops. Every part of the LLaMA block on 8 devices, split over 2 ranks of 4 and 4 of 2,
// on each machine and both message paths: the plan passes the check (each GPU's messages one
// after another in tag order on the device path), every message node has its op, and on the
// host path each block goes through its own staging range.
TEST(GraphPlanRankTest, PartsOfASplitGraphPassTheCheckOnBothPaths) {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::unique_ptr<Plan> plan = compile("llama-block:seqs=2x8,d_model=32,heads_q=4,heads_kv=2,"
                                         "d_head=8,d_ff=48,dtype=f32",
                                         8, logical::Planner::dp, exprog::SynthesisMode::optimized);
    ASSERT_NE(plan, nullptr);
    for (int per_rank : {4, 2}) {
        absl::StatusOr<physical::RankSplit> split =
            physical::split_by_rank(plan->exec_graph(), per_rank);
        ASSERT_TRUE(split.ok()) << split.status();
        for (size_t rank = 0; rank < split->parts.size(); ++rank) {
            const ExecGraph& part = split->parts[rank];
            for (Machine machine :
                 {Machine::distinct_peer, Machine::one_gpu, Machine::pairs_half_peer}) {
                for (MessagePath path : {MessagePath::device, MessagePath::host}) {
                    SCOPED_TRACE(absl::StrCat(per_rank, " per rank, rank ", rank, ", machine ",
                                              static_cast<int>(machine), ", path ",
                                              static_cast<int>(path)));
                    GraphPlanOptions options = machine_options(part, machine, rng);
                    options.message_path = path;
                    absl::StatusOr<GraphPlan> graph_plan = plan_graph(part, options);
                    ASSERT_TRUE(graph_plan.ok()) << graph_plan.status();
                    absl::Status check = check_graph_plan(part, options, *graph_plan);
                    EXPECT_TRUE(check.ok()) << check;
                    int messages = 0;
                    for (size_t n = 0; n < part.nodes.size(); ++n) {
                        const ExecNode& node = part.nodes[n];
                        if (node.kind != NodeKind::send && node.kind != NodeKind::recv) {
                            continue;
                        }
                        ++messages;
                        const std::vector<int>& ops = graph_plan->ops_of_node[n];
                        const bool data =
                            !(node.kind == NodeKind::send ? node.inputs : node.outputs).empty();
                        const bool staged = path == MessagePath::host && data;
                        ASSERT_EQ(ops.size(), staged ? 2u : 1u);
                        const GraphOp& message =
                            graph_plan->ops[ops[node.kind == NodeKind::send && staged ? 1 : 0]];
                        EXPECT_EQ(message.kind, node.kind == NodeKind::send ? GraphOpKind::send
                                                                            : GraphOpKind::recv);
                        EXPECT_EQ(message.tag, node.tag);
                        EXPECT_EQ(message.peer, node.peer);
                        EXPECT_EQ(message.peer_device, node.peer_device);
                        const MemoryRange& range =
                            node.kind == NodeKind::send ? message.src : message.dst;
                        EXPECT_EQ(range.space, staged ? MemorySpace::staging : MemorySpace::arena);
                        if (staged) {
                            const GraphOp& copy =
                                graph_plan->ops[ops[node.kind == NodeKind::send ? 0 : 1]];
                            EXPECT_EQ(copy.kind, node.kind == NodeKind::send
                                                     ? GraphOpKind::to_host
                                                     : GraphOpKind::from_host);
                        }
                    }
                    EXPECT_GT(messages, 0);
                }
            }
        }
    }
}

// Device 0 of rank 0 sends b0 and b1 to rank 1 (tags 0 and 1), and receives a token (tag 2):
// independent nodes, which the device path still runs one after another.
ExecGraph two_sends_and_a_token(int first_tag = 0) {
    ExecGraph g;
    g.devices = 1;
    g.arena_bytes = {1024};
    for (int64_t offset : {0, 256}) {
        Buffer b;
        b.device = 0;
        b.box = ir::Box({{0, 4}, {0, 8}});
        b.tensor = "x";
        b.offset = offset;
        b.persistent = true;
        g.buffers.push_back(b);
    }
    for (int n = 0; n < 3; ++n) {
        ExecNode node;
        node.kind = n < 2 ? NodeKind::send : NodeKind::recv;
        node.device = 0;
        if (n < 2) {
            node.inputs = {n};
        }
        node.peer = 1;
        node.peer_device = n;
        node.tag = n == 0 ? first_tag : n;
        g.nodes.push_back(node);
    }
    return g;
}

GraphPlanOptions one_gpu(MessagePath path) {
    GraphPlanOptions options;
    options.gpu_of_device = {0};
    options.peer_access = {{false}};
    options.uses_scratch.assign(3, false);
    options.message_path = path;
    return options;
}

TEST(GraphPlanRankTest, TheDevicePathRunsAGpusMessagesInTagOrder) {
    const ExecGraph g = two_sends_and_a_token();
    ASSERT_TRUE(physical::check_exec_graph(g, 1).ok()) << physical::check_exec_graph(g, 1);
    const GraphPlanOptions options = one_gpu(MessagePath::device);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->ops.size(), 3u);
    EXPECT_EQ(plan->ops[0].kind, GraphOpKind::send);
    EXPECT_EQ(plan->ops[0].src.bytes, 128);
    EXPECT_EQ(plan->ops[1].deps, (std::vector<int>{0}));
    EXPECT_EQ(plan->ops[2].kind, GraphOpKind::recv);
    EXPECT_EQ(plan->ops[2].dst.bytes, 0); // a token
    EXPECT_EQ(plan->ops[2].deps, (std::vector<int>{1}));
    EXPECT_EQ(plan->staging_bytes, 0);
    EXPECT_TRUE(check_graph_plan(g, options, *plan).ok()) << check_graph_plan(g, options, *plan);

    // Without the chain, NCCL could run the two sends at once.
    GraphPlan unchained = *plan;
    unchained.ops[1].deps.clear();
    absl::Status check = check_graph_plan(g, options, unchained);
    EXPECT_EQ(check.code(), absl::StatusCode::kFailedPrecondition) << check;
    EXPECT_NE(check.message().find("in tag order"), std::string::npos) << check;

    // A part whose messages are not in tag order is refused, naming the node.
    absl::StatusOr<GraphPlan> reordered = plan_graph(two_sends_and_a_token(5), options);
    EXPECT_EQ(reordered.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(reordered.status().message().find("tag order"), std::string::npos)
        << reordered.status();
}

TEST(GraphPlanRankTest, TheHostPathStagesEachBlockAndOrdersNothingBetweenMessages) {
    const ExecGraph g = two_sends_and_a_token(5); // any tag order is fine here
    const GraphPlanOptions options = one_gpu(MessagePath::host);
    absl::StatusOr<GraphPlan> plan = plan_graph(g, options);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_EQ(plan->ops.size(), 5u);
    EXPECT_EQ(plan->ops[0].kind, GraphOpKind::to_host);
    EXPECT_EQ(plan->ops[1].kind, GraphOpKind::send);
    EXPECT_EQ(plan->ops[1].deps, (std::vector<int>{0}));
    EXPECT_EQ(plan->ops[1].src.space, MemorySpace::staging);
    EXPECT_EQ(plan->ops[1].src.offset, 0);
    EXPECT_EQ(plan->ops[3].src.offset, 256); // each block its own staging range
    // The copies out keep their order (a copy leaving the device); the sends do not wait for
    // each other.
    EXPECT_EQ(plan->ops[2].deps, (std::vector<int>{0}));
    EXPECT_EQ(plan->ops[3].deps, (std::vector<int>{2}));
    EXPECT_EQ(plan->ops[4].kind, GraphOpKind::recv);
    EXPECT_TRUE(plan->ops[4].deps.empty());
    EXPECT_EQ(plan->staging_bytes, 512);
    EXPECT_TRUE(check_graph_plan(g, options, *plan).ok()) << check_graph_plan(g, options, *plan);
}

TEST(GraphPlanTest, RefusesOptionsThatDoNotCoverTheGraph) {
    const ExecGraph g = slices_then_copies();
    GraphPlanOptions options = two_gpus(true);
    options.gpu_of_device = {0};
    EXPECT_EQ(plan_graph(g, options).status().code(), absl::StatusCode::kInvalidArgument);
    options = two_gpus(true);
    options.gpu_of_device = {0, 5};
    EXPECT_EQ(plan_graph(g, options).status().code(), absl::StatusCode::kInvalidArgument);
    options = two_gpus(true);
    options.uses_scratch.pop_back();
    EXPECT_EQ(plan_graph(g, options).status().code(), absl::StatusCode::kInvalidArgument);
}

} // namespace
} // namespace einsummable::runtime::cuda
