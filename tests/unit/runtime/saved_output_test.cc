// Saved outputs fetched from the devices that hold them (docs/runtime.md "Saved outputs"): the
// lowering leaves each block of a saved output on one device that computed it — reduced there
// when several devices wrote partial results — and Plan::offload reads every block into its part
// of the host tensor, strided blocks included. On the CPU backend, for the baselines and the
// dynamic programme at p = 2, 4 and 8, against the double-precision reference.

#include <iostream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/box.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "runtime/saved_output.h"

namespace einsummable::runtime {
namespace {

constexpr uint64_t kSeed = 20261206;

// What one plan's saved outputs look like, for the checks across plans.
struct Shape {
    bool split = false;      // some saved output has blocks on several devices
    bool aggregated = false; // some block is the reduction of partial results
    bool strided = false;    // some block is not one contiguous range of the host tensor
};

// The blocks of every saved output tile it, each is persistent, and none was stitched together
// (a concat) or moved whole (a copy) only to be fetched: what the plan says of their shape.
Shape check_blocks(const physical::ExecGraph& exec, const ir::Graph& graph) {
    std::vector<int> writer(exec.buffers.size(), -1);
    for (size_t n = 0; n < exec.nodes.size(); ++n) {
        for (physical::BufferId out : exec.nodes[n].outputs) {
            writer[out] = static_cast<int>(n);
        }
    }
    Shape shape;
    for (const auto& [name, blocks] : exec.outputs) {
        SCOPED_TRACE(name);
        const ir::Box whole = graph.tensor(*graph.find_tensor(name)).type.box();
        EXPECT_EQ(physical::saved_output_box(exec, blocks), whole);
        int64_t volume = 0;
        std::set<int> devices;
        for (physical::BufferId id : blocks) {
            const physical::Buffer& buffer = exec.buffers[id];
            EXPECT_TRUE(buffer.persistent);
            EXPECT_FALSE(buffer.stats);
            EXPECT_TRUE(whole.contains(buffer.box));
            volume += buffer.box.volume();
            devices.insert(buffer.device);
            shape.strided = shape.strided ||
                            contiguous_offset(buffer.box, whole, ir::dtype_size(buffer.dtype)) < 0;
            if (writer[id] >= 0) {
                const physical::NodeKind kind = exec.nodes[writer[id]].kind;
                EXPECT_NE(kind, physical::NodeKind::concat);
                EXPECT_NE(kind, physical::NodeKind::copy);
                shape.aggregated = shape.aggregated || kind == physical::NodeKind::aggregate;
            }
        }
        EXPECT_EQ(volume, whole.volume()) << "blocks that do not tile the output";
        shape.split = shape.split || devices.size() > 1;
    }
    return shape;
}

// Compiles `workload` for the CPU backend, runs it on random inputs and compares every saved
// output, offloaded from its devices, with the reference. The plan's shape.
Shape run_against_reference(const std::string& workload, logical::Planner planner, int devices) {
    SCOPED_TRACE(absl::StrCat(workload, " ", logical::planner_name(planner), " p", devices));
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    if (!graph.ok()) {
        return {};
    }
    CompileOptions options;
    options.devices = devices;
    options.planner = planner;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(*std::move(graph), options, cpu::make_cpu_backend({devices, 1}));
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) {
        return {};
    }
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::map<std::string, ir::HostTensor> host;
    for (ir::TensorId id : (*plan)->graph().inputs()) {
        const ir::GraphTensor& tensor = (*plan)->graph().tensor(id);
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = static_cast<float>(uniform(rng));
        }
        EXPECT_TRUE((*plan)->load(tensor.name, values).ok()) << tensor.name;
        host.emplace(
            tensor.name,
            ir::HostTensor(tensor.type.box(), std::vector<double>(values.begin(), values.end())));
    }
    absl::Status executed = (*plan)->execute();
    EXPECT_TRUE(executed.ok()) << executed;
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph((*plan)->graph(), host, kernels::cpu::run_block);
    EXPECT_TRUE(reference.ok()) << reference.status();
    if (!reference.ok()) {
        return {};
    }
    for (const auto& [name, expected] : *reference) {
        absl::StatusOr<std::vector<float>> actual = (*plan)->offload(name);
        EXPECT_TRUE(actual.ok()) << name << ": " << actual.status();
        if (actual.ok()) {
            const ir::HostTensor got(expected.box(),
                                     std::vector<double>(actual->begin(), actual->end()));
            EXPECT_LE(ir::max_relative_error(got, expected), 1e-5) << name;
        }
    }
    return check_blocks((*plan)->exec_graph(), (*plan)->graph());
}

TEST(SavedOutput, BlocksFetchedFromTheirDevicesMatchTheReference) {
    std::cout << "seed " << kSeed << "\n";
    Shape seen;
    for (const std::string& workload :
         {std::string("ffn:tokens=48,d_model=16,d_ff=40"),
          std::string("llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,"
                      "dtype=f32"),
          std::string("chain:E,scale=1024,dtype=f32")}) {
        for (logical::Planner planner :
             {logical::Planner::dp, logical::Planner::data_parallel, logical::Planner::megatron,
              logical::Planner::ulysses, logical::Planner::row_sharded}) {
            for (int devices : {2, 4, 8}) {
                const Shape shape = run_against_reference(workload, planner, devices);
                seen.split = seen.split || shape.split;
                seen.aggregated = seen.aggregated || shape.aggregated;
                seen.strided = seen.strided || shape.strided;
            }
        }
    }
    // The matrix covers outputs split across devices, reduced from partial results, and held in
    // strided blocks.
    EXPECT_TRUE(seen.split);
    EXPECT_TRUE(seen.aggregated);
    EXPECT_TRUE(seen.strided);
}

// One hand-made output: a [4, 6] f32 tensor in four blocks on four devices — two row blocks,
// each cut in two column blocks (strided in the host tensor) — read back whole.
TEST(SavedOutput, StridedBlocksLandInTheirPartOfTheHostTensor) {
    physical::ExecGraph exec;
    exec.devices = 4;
    const ir::Box whole({ir::Interval{0, 4}, ir::Interval{0, 6}});
    int device = 0;
    for (const ir::Interval rows : {ir::Interval{0, 2}, ir::Interval{2, 4}}) {
        for (const ir::Interval columns : {ir::Interval{0, 1}, ir::Interval{1, 6}}) {
            exec.buffers.push_back(
                {device++, ir::DType::f32, ir::Box({rows, columns}), "y", true, 0});
            exec.outputs["y"].push_back(static_cast<physical::BufferId>(exec.buffers.size()) - 1);
        }
    }
    exec.arena_bytes.assign(4, 64);
    std::unique_ptr<Backend> backend = cpu::make_cpu_backend({4, 1});
    absl::StatusOr<std::unique_ptr<Executable>> exe = backend->prepare(exec);
    ASSERT_TRUE(exe.ok()) << exe.status();
    // Element (r, c) of the whole tensor is 10 r + c.
    for (physical::BufferId id = 0; id < 4; ++id) {
        const ir::Box& box = exec.buffers[id].box;
        std::vector<float> values;
        for (int64_t r = box[0].lower; r < box[0].upper; ++r) {
            for (int64_t c = box[1].lower; c < box[1].upper; ++c) {
                values.push_back(static_cast<float>(10 * r + c));
            }
        }
        ASSERT_TRUE((*exe)
                        ->write_buffer(id, absl::MakeConstSpan(
                                               reinterpret_cast<const std::byte*>(values.data()),
                                               values.size() * sizeof(float)))
                        .ok());
    }
    absl::StatusOr<std::vector<std::byte>> bytes = read_saved_output(**exe, exec, "y");
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    ASSERT_EQ(bytes->size(), 24 * sizeof(float));
    const float* got = reinterpret_cast<const float*>(bytes->data());
    for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 6; ++c) {
            EXPECT_EQ(got[r * 6 + c], static_cast<float>(10 * r + c)) << r << ", " << c;
        }
    }
    EXPECT_EQ(contiguous_offset(exec.buffers[0].box, whole, 4), -1);
    EXPECT_EQ(contiguous_offset(ir::Box({ir::Interval{2, 4}, ir::Interval{0, 6}}), whole, 4),
              2 * 6 * 4);
    EXPECT_EQ(contiguous_offset(ir::Box({ir::Interval{3, 4}, ir::Interval{2, 5}}), whole, 4),
              (3 * 6 + 2) * 4);
    EXPECT_EQ(read_saved_output(**exe, exec, "z").status().code(), absl::StatusCode::kNotFound);
}

} // namespace
} // namespace einsummable::runtime
