// The whole-plan simulator (compiler/physical/plan_simulation.h): kernel times from the device
// model, one event-driven run in which transfers of different operators share links, the
// per-device split, the critical path and its errors.

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/workloads/workloads.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::physical {
namespace {

using ::testing::HasSubstr;

#define EXPECT_TIME(actual, expected) EXPECT_NEAR((actual), (expected), 1e-9 * (expected) + 1e-15)

exprog::Topology builtin(const std::string& name) {
    return *exprog::builtin_topology(name);
}

// The graph owns the operators the ExecGraph's kernels point to: it lives beside the plan.
struct Compiled {
    std::unique_ptr<ir::Graph> graph;
    SimulatedPlan plan;
};

Compiled compile(const std::string& workload, int devices, const exprog::Topology& topology,
                 exprog::SynthesisMode mode = exprog::SynthesisMode::naive) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    Compiled compiled{std::make_unique<ir::Graph>(*std::move(graph)), {}};
    absl::StatusOr<logical::LogicalPlan> plan =
        logical::optimize(*compiled.graph, {devices, logical::Planner::dp, 0});
    EXPECT_TRUE(plan.ok()) << plan.status();
    PhysicalOptions options;
    options.synthesis.mode = mode;
    absl::StatusOr<SimulatedPlan> simulated =
        compile_and_simulate(*compiled.graph, *plan, topology, options);
    EXPECT_TRUE(simulated.ok()) << simulated.status();
    compiled.plan = *std::move(simulated);
    return compiled;
}

// What the simulator promises of every run: device times add up, the critical path runs
// without gaps from 0 to the predicted time, and nothing ends after it.
void expect_consistent(const SimulatedPlan& plan) {
    const PlanSimulation& sim = plan.simulation;
    // One task per node, then one offload per block of a saved output.
    size_t blocks = 0;
    for (const auto& [name, ids] : plan.exec.outputs) {
        blocks += ids.size();
    }
    ASSERT_EQ(sim.tasks.size(), plan.exec.nodes.size() + blocks);
    for (size_t index = plan.exec.nodes.size(); index < sim.tasks.size(); ++index) {
        EXPECT_EQ(sim.tasks[index].kind, exprog::SimTask::Kind::offload);
    }
    ASSERT_EQ(sim.devices.size(), static_cast<size_t>(plan.exec.devices));
    EXPECT_GT(sim.predicted_s, 0.0);
    for (const DeviceTime& device : sim.devices) {
        EXPECT_GE(device.compute_s, 0.0);
        EXPECT_GE(device.communication_s, 0.0);
        EXPECT_GE(device.idle_s, 0.0);
        EXPECT_TIME(device.compute_s + device.communication_s + device.idle_s, sim.predicted_s);
    }
    ASSERT_FALSE(sim.critical_path.empty());
    EXPECT_EQ(sim.critical_path.front().start, 0.0);
    EXPECT_TIME(sim.critical_path.back().end, sim.predicted_s);
    for (size_t at = 1; at < sim.critical_path.size(); ++at) {
        EXPECT_TIME(sim.critical_path[at].start, sim.critical_path[at - 1].end) << at;
    }
    for (const exprog::TaskTrace& trace : sim.result.trace) {
        EXPECT_LE(trace.end, sim.predicted_s);
        EXPECT_LE(trace.ready, trace.start);
    }
}

TEST(PlanSimulation, ComputeBoundKernelTakesFlopsAtPeakTimesEfficiency) {
    const exprog::Topology a100 = builtin("dgx-a100");
    const Compiled compiled = compile("matmul:4096x4096x4096,dtype=f16", 1, a100);
    const SimulatedPlan& plan = compiled.plan;
    expect_consistent(plan);
    const exprog::DeviceModel& device = a100.device();
    // One device: the nodes run one after another, each as the formula says, with the
    // efficiencies of its kernel class (data movement: elementwise).
    double expected = 0.0;
    int kernels = 0;
    for (const ExecNode& node : plan.exec.nodes) {
        double bytes = 0.0;
        for (BufferId b : node.inputs) {
            bytes += plan.exec.buffers[b].bytes();
        }
        for (BufferId b : node.outputs) {
            bytes += plan.exec.buffers[b].bytes();
        }
        const exprog::KernelClass kernel_class = node.kind == NodeKind::kernel
                                                     ? node.op->kernel_class()
                                                     : exprog::KernelClass::elementwise;
        double seconds = bytes / (a100.hbm_bandwidth() * device.memory_efficiency_of(kernel_class));
        if (node.kind == NodeKind::kernel) {
            ++kernels;
            EXPECT_EQ(kernel_class, exprog::KernelClass::gemm);
            const double flops = node.op->flops(node.spec);
            EXPECT_DOUBLE_EQ(flops, 2.0 * 4096 * 4096 * 4096);
            const double compute =
                flops / (device.peak_f16 * device.compute_efficiency_of(kernel_class));
            EXPECT_GT(compute, seconds); // bound
            seconds = compute;
        }
        expected += seconds + device.launch_overhead_s;
    }
    EXPECT_EQ(kernels, 1);
    EXPECT_TIME(plan.simulation.devices[0].compute_s, expected);
    // Then the output goes to the host over the GPU's host link.
    const double offload = a100.latency_s() + 2.0 * 4096 * 4096 / a100.host_bandwidth();
    EXPECT_TIME(plan.simulation.predicted_s, expected + offload);
    EXPECT_TIME(plan.simulation.devices[0].communication_s, offload);
}

TEST(PlanSimulation, MemoryBoundKernelTakesBytesAtHbm) {
    // An element-wise op moves bytes and does next to no arithmetic.
    const exprog::Topology h100 = builtin("dgx-h100");
    const Compiled compiled = compile("ffn:tokens=8192,d_model=4096,d_ff=64", 1, h100);
    const SimulatedPlan& plan = compiled.plan;
    expect_consistent(plan);
    const exprog::DeviceModel& device = h100.device();
    bool saw_memory_bound = false;
    for (size_t n = 0; n < plan.exec.nodes.size(); ++n) {
        const ExecNode& node = plan.exec.nodes[n];
        if (node.kind != NodeKind::kernel) {
            continue;
        }
        const double flops = node.op->flops(node.spec);
        const exprog::KernelClass kernel_class = node.op->kernel_class();
        const double compute =
            flops / (device.peak_f32 * device.compute_efficiency_of(kernel_class));
        const double memory = plan.simulation.tasks[n].bytes /
                              (h100.hbm_bandwidth() * device.memory_efficiency_of(kernel_class));
        EXPECT_TIME(plan.simulation.tasks[n].duration_s,
                    std::max(compute, memory) + device.launch_overhead_s);
        saw_memory_bound = saw_memory_bound || memory > compute;
    }
    EXPECT_TRUE(saw_memory_bound);
}

// A hand-made ExecGraph of one kernel on device 0: `op` on whole f32 blocks.
ExecGraph one_kernel(const ir::Operator& op) {
    ExecGraph exec;
    const ir::FunctionSpec function = op.whole_spec().functions.at(0);
    ExecNode node;
    node.kind = NodeKind::kernel;
    node.op = &op;
    node.spec = function;
    node.label = "k#0";
    for (const ir::Box& box : function.inputs) {
        node.inputs.push_back(static_cast<BufferId>(exec.buffers.size()));
        exec.buffers.push_back({0, ir::DType::f32, box, "in", true, 0});
    }
    for (const ir::Box& box : function.outputs) {
        node.outputs.push_back(static_cast<BufferId>(exec.buffers.size()));
        exec.buffers.push_back({0, ir::DType::f32, box, "out", true, 0});
    }
    exec.nodes.push_back(std::move(node));
    return exec;
}

TEST(PlanSimulation, EachKernelClassTakesItsOwnEfficiency) {
    // ij,jk->ik as a product-sum (a GEMM) and as a sum of sums (element-wise): the same FLOPs
    // and bytes, on a device whose two classes differ.
    const ir::TensorType ij{ir::DType::f32, {{"i", 512}, {"j", 512}}};
    const ir::TensorType jk{ir::DType::f32, {{"j", 512}, {"k", 512}}};
    absl::StatusOr<ir::OperatorPtr> gemm = ir::make_operator(
        "einsum", ir::Attributes{{"equation", std::string("ij,jk->ik")}}, {ij, jk});
    absl::StatusOr<ir::OperatorPtr> sums = ir::make_operator(
        "einsum",
        ir::Attributes{{"equation", std::string("ij,jk->ik")}, {"join", std::string("add")}},
        {ij, jk});
    ASSERT_TRUE(gemm.ok() && sums.ok());
    ASSERT_EQ((*gemm)->kernel_class(), exprog::KernelClass::gemm);
    ASSERT_EQ((*sums)->kernel_class(), exprog::KernelClass::elementwise);
    const ir::FunctionSpec function = (*gemm)->whole_spec().functions[0];
    const double flops = (*gemm)->flops(function);
    ASSERT_DOUBLE_EQ((*sums)->flops(function), flops);
    const double bytes = 3.0 * 512 * 512 * 4;

    exprog::DeviceModel device;
    device.peak_f32 = 1e12;
    device.launch_overhead_s = 2e-6;
    device.compute_efficiency = 0.5;
    device.memory_efficiency = 0.5;
    device.efficiency(exprog::KernelClass::gemm).compute = 0.8;
    device.efficiency(exprog::KernelClass::elementwise).compute = 0.25;
    const exprog::Topology topology = *builtin("dgx-a100").with_device(device);
    const double hbm = topology.hbm_bandwidth();
    ASSERT_GT(flops / 1e12, bytes / (hbm * 0.5)); // compute-bound in both classes

    absl::StatusOr<PlanSimulation> as_gemm = simulate_plan(one_kernel(**gemm), topology);
    absl::StatusOr<PlanSimulation> as_sums = simulate_plan(one_kernel(**sums), topology);
    ASSERT_TRUE(as_gemm.ok() && as_sums.ok());
    EXPECT_DOUBLE_EQ(as_gemm->tasks[0].bytes, bytes);
    EXPECT_DOUBLE_EQ(as_sums->tasks[0].bytes, bytes);
    EXPECT_TIME(as_gemm->predicted_s, flops / (1e12 * 0.8) + 2e-6);
    EXPECT_TIME(as_sums->predicted_s, flops / (1e12 * 0.25) + 2e-6);

    // Memory-bound (a peak far above the bytes' time): the memory efficiencies decide.
    device.peak_f32 = 1e18;
    device.efficiency(exprog::KernelClass::gemm).memory = 1.0;
    device.efficiency(exprog::KernelClass::elementwise).memory = 0.125;
    const exprog::Topology fast = *builtin("dgx-a100").with_device(device);
    as_gemm = simulate_plan(one_kernel(**gemm), fast);
    as_sums = simulate_plan(one_kernel(**sums), fast);
    ASSERT_TRUE(as_gemm.ok() && as_sums.ok());
    EXPECT_TIME(as_gemm->predicted_s, bytes / hbm + 2e-6);
    EXPECT_TIME(as_sums->predicted_s, bytes / (hbm * 0.125) + 2e-6);
}

// A hand-made ExecGraph: `copies` transfers of `bytes` each, from device 0 to devices 1.. .
ExecGraph fan_out(int copies, int64_t elements) {
    ExecGraph exec;
    exec.devices = copies + 1;
    const ir::Box box({ir::Interval{0, elements}});
    exec.buffers.push_back({0, ir::DType::f32, box, "x", true, 0});
    for (int c = 1; c <= copies; ++c) {
        exec.buffers.push_back({c, ir::DType::f32, box, "x", true, 0});
        ExecNode copy;
        copy.kind = NodeKind::copy;
        copy.device = c;
        copy.inputs = {0};
        copy.outputs = {c};
        exec.nodes.push_back(copy);
    }
    return exec;
}

TEST(PlanSimulation, OverlappingTransfersShareTheSendersLink) {
    const exprog::Topology a100 = builtin("dgx-a100");
    const int64_t elements = 75'000'000; // 300 MB: 1 ms alone on a 300 GB/s link
    const double alone = a100.latency_s() + 4.0 * elements / a100.link_bandwidth();
    absl::StatusOr<PlanSimulation> one = simulate_plan(fan_out(1, elements), a100);
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_TIME(one->predicted_s, alone);
    // Three at once share egress(0): each gets a third, so all end at 3x — not 1x each as a
    // sum of separate programs would have it in parallel, and not 3x in sequence either.
    absl::StatusOr<PlanSimulation> three = simulate_plan(fan_out(3, elements), a100);
    ASSERT_TRUE(three.ok()) << three.status();
    for (const exprog::TaskTrace& trace : three->result.trace) {
        EXPECT_TIME(trace.end, a100.latency_s() + 3 * 4.0 * elements / a100.link_bandwidth());
    }
    EXPECT_TIME(three->devices[0].communication_s, three->predicted_s);
    EXPECT_EQ(three->devices[0].compute_s, 0.0);
    // Mapped onto other GPUs of the machine, the same plan takes the same time on a switch.
    absl::StatusOr<PlanSimulation> mapped =
        simulate_plan(fan_out(3, elements), a100, {{7, 2, 4, 5}});
    ASSERT_TRUE(mapped.ok()) << mapped.status();
    EXPECT_TIME(mapped->predicted_s, three->predicted_s);
    EXPECT_EQ(mapped->tasks[0].src_gpu, 7);
}

// A hand-made ExecGraph of one saved output of `elements` f32 per device, the block of device d
// covering [d·elements, (d+1)·elements), present from the start (no node writes it).
ExecGraph spread_output(int devices, int64_t elements) {
    ExecGraph exec;
    exec.devices = devices;
    for (int d = 0; d < devices; ++d) {
        const ir::Box box({ir::Interval{d * elements, (d + 1) * elements}});
        exec.buffers.push_back({d, ir::DType::f32, box, "y", true, 0});
        exec.outputs["y"].push_back(d);
    }
    return exec;
}

TEST(PlanSimulation, SavedOutputsAreOffloadedFromEveryDeviceAtOnce) {
    for (const std::string name : {"dgx-a100", "dgx-h100", "dgx-v100"}) {
        SCOPED_TRACE(name);
        const exprog::Topology topology = builtin(name);
        const int64_t elements = 25'000'000; // 100 MB per device
        const double alone = topology.latency_s() + 100e6 / topology.host_bandwidth();
        absl::StatusOr<PlanSimulation> one = simulate_plan(spread_output(1, elements), topology);
        ASSERT_TRUE(one.ok()) << one.status();
        ASSERT_EQ(one->tasks.size(), 1u);
        EXPECT_EQ(one->tasks[0].kind, exprog::SimTask::Kind::offload);
        EXPECT_TIME(one->predicted_s, alone);
        // Each device over its own host link: eight blocks take as long as one.
        absl::StatusOr<PlanSimulation> eight = simulate_plan(spread_output(8, elements), topology);
        ASSERT_TRUE(eight.ok()) << eight.status();
        EXPECT_TIME(eight->predicted_s, alone);
        EXPECT_TIME(eight->devices[7].communication_s, alone);
        // Left out, the delivery takes no time.
        PlanSimulationOptions distributed;
        distributed.offload_saved_outputs = false;
        absl::StatusOr<PlanSimulation> without =
            simulate_plan(spread_output(8, elements), topology, distributed);
        ASSERT_TRUE(without.ok()) << without.status();
        EXPECT_TRUE(without->tasks.empty());
        EXPECT_EQ(without->predicted_s, 0.0);
    }
    // Two blocks on one device share its link.
    const exprog::Topology a100 = builtin("dgx-a100");
    ExecGraph two = spread_output(2, 1'000'000);
    two.buffers[1].device = 0;
    absl::StatusOr<PlanSimulation> shared = simulate_plan(two, a100);
    ASSERT_TRUE(shared.ok()) << shared.status();
    EXPECT_TIME(shared->predicted_s, a100.latency_s() + 8e6 / a100.host_bandwidth());
}

TEST(PlanSimulation, LinksOfTheV100DecideTransferTimes) {
    // 0 -> 3 has two NVLinks (50 GB/s), 0 -> 5 none (the shared 15.75 GB/s bridge).
    const exprog::Topology v100 = builtin("dgx-v100");
    const int64_t elements = 25'000'000; // 100 MB
    absl::StatusOr<PlanSimulation> linked = simulate_plan(fan_out(1, elements), v100, {{0, 3}});
    absl::StatusOr<PlanSimulation> bridged = simulate_plan(fan_out(1, elements), v100, {{0, 5}});
    ASSERT_TRUE(linked.ok() && bridged.ok());
    EXPECT_TIME(linked->predicted_s, v100.latency_s() + 100e6 / 50e9);
    EXPECT_TIME(bridged->predicted_s, v100.latency_s() + 100e6 / 15.75e9);
}

TEST(PlanSimulation, MorePlanDevicesThanGpusIsAnError) {
    const exprog::Topology a100 = builtin("dgx-a100");
    absl::StatusOr<PlanSimulation> sim = simulate_plan(fan_out(8, 16), a100);
    ASSERT_FALSE(sim.ok());
    EXPECT_THAT(sim.status().message(),
                HasSubstr("the plan has 9 devices; topology 'dgx-a100' has 8 GPUs"));
    EXPECT_THAT(simulate_plan(fan_out(1, 16), a100, {{0, 0}}).status().message(),
                HasSubstr("GPU 0 named twice"));
    EXPECT_THAT(simulate_plan(fan_out(1, 16), a100, {{0, 8}}).status().message(),
                HasSubstr("GPU 8 out of range"));
    EXPECT_THAT(simulate_plan(fan_out(1, 16), a100, {{0}}).status().message(),
                HasSubstr("names 1 GPUs; the plan has 2 devices"));
}

TEST(PlanSimulation, AKernelWithoutAPeakForItsDtypeNamesTheKernelAndTheKey) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name("matmul:64,dtype=bf16");
    ASSERT_TRUE(graph.ok());
    absl::StatusOr<logical::LogicalPlan> plan =
        logical::optimize(*graph, {1, logical::Planner::dp, 0});
    ASSERT_TRUE(plan.ok());
    PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::naive;
    absl::StatusOr<SimulatedPlan> sim =
        compile_and_simulate(*graph, *plan, builtin("dgx-v100"), options);
    ASSERT_FALSE(sim.ok());
    EXPECT_THAT(sim.status().message(),
                HasSubstr("is bf16, but topology 'dgx-v100' gives no peak_bf16"));
    EXPECT_THAT(sim.status().message(), HasSubstr("kernel '"));
}

TEST(PlanSimulation, LlamaBlockAtPaperScaleGetsFasterWithDevices) {
    // The 8K-token LLaMA block (fp16) on dgx-a100: the DP's plan at 1, 4 and 8 devices.
    const exprog::Topology a100 = builtin("dgx-a100");
    std::map<int, double> predicted;
    for (int devices : {1, 4, 8}) {
        const Compiled compiled = compile("llama-block:tokens=8192", devices, a100);
        const SimulatedPlan& plan = compiled.plan;
        expect_consistent(plan);
        predicted[devices] = plan.simulation.predicted_s;
        // Every device computes: the plan splits every operator.
        for (const DeviceTime& device : plan.simulation.devices) {
            EXPECT_GT(device.compute_s, 0.0);
        }
        // Nothing can beat the busiest device's compute, nor the critical path's own time.
        double busiest = 0.0;
        for (const DeviceTime& device : plan.simulation.devices) {
            busiest = std::max(busiest, device.compute_s);
        }
        EXPECT_GE(plan.simulation.predicted_s, busiest * (1 - 1e-12));
        // Every kernel belongs to an operator.
        for (size_t n = 0; n < plan.exec.nodes.size(); ++n) {
            if (plan.exec.nodes[n].kind == NodeKind::kernel) {
                EXPECT_FALSE(plan.simulation.node_operator[n].empty());
            }
        }
        const std::string text = explain_simulation(plan.exec, plan.simulation);
        EXPECT_THAT(text, HasSubstr("predicted time: "));
        EXPECT_THAT(text, HasSubstr("critical path ("));
    }
    // Leaving the output distributed drops exactly its delivery: the offloads, and the nodes
    // that reduce its partial blocks.
    {
        const Compiled compiled = compile("llama-block:tokens=8192", 8, a100);
        PlanSimulationOptions distributed;
        distributed.offload_saved_outputs = false;
        absl::StatusOr<PlanSimulation> without =
            simulate_plan(compiled.plan.exec, a100, distributed);
        ASSERT_TRUE(without.ok()) << without.status();
        EXPECT_LT(without->predicted_s, compiled.plan.simulation.predicted_s);
        ASSERT_EQ(without->tasks.size(), compiled.plan.exec.nodes.size());
        for (size_t n = 0; n < without->tasks.size(); ++n) {
            const bool gather = compiled.plan.exec.nodes[n].kind != NodeKind::kernel &&
                                without->node_operator[n].empty();
            if (gather) {
                EXPECT_EQ(without->tasks[n].duration_s, 0.0);
                EXPECT_EQ(without->tasks[n].kind, exprog::SimTask::Kind::compute);
            } else {
                EXPECT_EQ(without->tasks[n].kind, compiled.plan.simulation.tasks[n].kind);
            }
        }
    }
    EXPECT_LT(predicted[4], predicted[1] / 2.5);
    EXPECT_LT(predicted[8], predicted[4]);
}

// A copy or aggregate that writes a chunk into its place in a block (a view, docs/physical.md
// "Buffer views") is read only through that block: it still belongs to the operator reading the
// block, so leaving the saved outputs distributed does not drop it as gathering.
TEST(PlanSimulation, NodesWritingViewsBelongToTheOperatorReadingTheirBlock) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name("chain:A,scale=256,dtype=f16");
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<logical::LogicalPlan> logical =
        logical::optimize(*graph, {8, logical::Planner::dp, 0});
    ASSERT_TRUE(logical.ok()) << logical.status();
    const exprog::Topology v100 = builtin("dgx-v100");
    PhysicalOptions options;
    options.synthesis.iterations = 40;
    absl::StatusOr<PhysicalPlan> physical = compile_physical(*graph, *logical, v100, options);
    ASSERT_TRUE(physical.ok()) << physical.status();
    ASSERT_TRUE(pipeline_exchanges(*physical, v100, 4).ok());
    absl::StatusOr<ExecGraph> exec = lower(*graph, *physical);
    ASSERT_TRUE(exec.ok()) << exec.status();
    absl::StatusOr<PlanSimulation> sim = simulate_plan(*exec, v100);
    ASSERT_TRUE(sim.ok()) << sim.status();
    std::set<BufferId> kernel_read; // roots some kernel reads
    for (const ExecNode& node : exec->nodes) {
        if (node.kind == NodeKind::kernel) {
            for (BufferId in : node.inputs) {
                kernel_read.insert(exec->view_root(in));
            }
        }
    }
    int into_views = 0;
    for (size_t n = 0; n < exec->nodes.size(); ++n) {
        const ExecNode& node = exec->nodes[n];
        const Buffer& out = exec->buffers[node.outputs[0]];
        if (node.kind != NodeKind::kernel && out.is_view() &&
            kernel_read.count(exec->view_root(node.outputs[0]))) {
            ++into_views;
            EXPECT_FALSE(sim->node_operator[n].empty()) << "node " << n;
        }
    }
    EXPECT_GT(into_views, 0);
}

} // namespace
} // namespace einsummable::physical
