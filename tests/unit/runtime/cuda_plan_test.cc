// runtime::Plan on the CUDA backend (runtime/cuda), against the CPU backend on the same inputs:
// the CPU plan matrix — planner ∈ {dp, greedy, random} × schedule ∈ {naive, optimized} × p ∈
// {1, 2, 4, 8} virtual devices on GPU 0 × {FFN, a small LLaMA block, chains} in f32 — then f16
// and bf16, repeated executes on one graph, and a plan larger than the card. Every test needs a
// GPU and skips without one (scripts/gpu-check runs them on one).

#include <iostream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/plan.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/runtime/plan_cases.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20261201;

bool gpu_visible() {
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> gpus = kernels::cuda::list_devices();
    return gpus.ok() && !gpus->empty();
}

#define SKIP_WITHOUT_GPU()                                                                         \
    do {                                                                                           \
        if (!gpu_visible()) {                                                                      \
            EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("no CUDA GPU: this test runs on a machine with "  \
                                                 "one (scripts/gpu-check)");                       \
        }                                                                                          \
    } while (0)

std::shared_ptr<Backend> virtual_gpus(int devices) {
    absl::StatusOr<std::unique_ptr<Backend>> backend =
        cuda::make_cuda_backend({std::vector<int>(static_cast<size_t>(devices), 0)});
    EXPECT_TRUE(backend.ok()) << backend.status();
    return backend.ok() ? std::shared_ptr<Backend>(*std::move(backend)) : nullptr;
}

absl::StatusOr<std::unique_ptr<Plan>> compile_on(const std::string& workload,
                                                 const CompileOptions& options,
                                                 std::shared_ptr<Backend> backend) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    if (!graph.ok()) {
        return graph.status();
    }
    return Plan::compile(*std::move(graph), options, std::move(backend));
}

std::map<std::string, std::vector<float>> random_inputs(const ir::Graph& graph) {
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<double> uniform(-1.0, 1.0);
    std::map<std::string, std::vector<float>> inputs;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        std::vector<float> values(static_cast<size_t>(tensor.type.elements()));
        for (float& v : values) {
            v = static_cast<float>(ir::round_to_dtype(uniform(rng), tensor.type.dtype));
        }
        inputs.emplace(tensor.name, std::move(values));
    }
    return inputs;
}

// Loads, executes and offloads every saved output.
std::map<std::string, std::vector<float>> run(Plan& plan,
                                              const std::map<std::string, std::vector<float>>& in) {
    for (const auto& [name, values] : in) {
        absl::Status loaded = plan.load(name, values);
        EXPECT_TRUE(loaded.ok()) << loaded;
    }
    absl::Status executed = plan.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    std::map<std::string, std::vector<float>> out;
    for (ir::TensorId id : plan.graph().saved()) {
        const std::string& name = plan.graph().tensor(id).name;
        absl::StatusOr<std::vector<float>> values = plan.offload(name);
        EXPECT_TRUE(values.ok()) << values.status();
        if (values.ok()) {
            out.emplace(name, *std::move(values));
        }
    }
    return out;
}

// max |a - b| / max(1, max |b|) over every saved output (as ir::max_relative_error).
double worst_relative_error(const std::map<std::string, std::vector<float>>& actual,
                            const std::map<std::string, std::vector<float>>& expected) {
    double worst = 0.0;
    for (const auto& [name, want] : expected) {
        auto it = actual.find(name);
        if (it == actual.end() || it->second.size() != want.size()) {
            return 1e9;
        }
        double scale = 1.0;
        for (float v : want) {
            scale = std::max(scale, std::abs(static_cast<double>(v)));
        }
        for (size_t idx = 0; idx < want.size(); ++idx) {
            const double diff = std::abs(static_cast<double>(it->second[idx]) - want[idx]);
            worst = std::max(worst, std::isnan(diff) ? 1e9 : diff / scale);
        }
    }
    return worst;
}

// The same workload on the CUDA backend (virtual devices on GPU 0) and on the CPU backend.
double cuda_vs_cpu(const std::string& workload, CompileOptions options, ir::DType* dtype) {
    absl::StatusOr<std::unique_ptr<Plan>> gpu =
        compile_on(workload, options, virtual_gpus(options.devices));
    EXPECT_TRUE(gpu.ok()) << gpu.status();
    absl::StatusOr<std::unique_ptr<Plan>> cpu =
        compile_on(workload, options, cpu::make_cpu_backend({options.devices, 1}));
    EXPECT_TRUE(cpu.ok()) << cpu.status();
    if (!gpu.ok() || !cpu.ok()) {
        return 1e9;
    }
    const auto inputs = random_inputs((*gpu)->graph());
    const auto expected = run(**cpu, inputs);
    const auto actual = run(**gpu, inputs);
    // Both backends copy exactly what the exchange programs send.
    EXPECT_EQ((*gpu)->bytes_moved(), (*cpu)->bytes_moved());
    *dtype = (*gpu)->graph().tensor((*gpu)->graph().saved()[0]).type.dtype;
    return worst_relative_error(actual, expected);
}

using testing::PlanCase;

class CudaPlanMatrix : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaPlanMatrix, MatchesTheCpuBackend) {
    SKIP_WITHOUT_GPU();
    const PlanCase& param = GetParam();
    std::cout << "seed " << kSeed << "\n";
    CompileOptions options;
    options.devices = param.devices;
    options.planner = param.planner;
    options.schedule = param.schedule;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    ir::DType dtype = ir::DType::f32;
    const double error = cuda_vs_cpu(param.workload, options, &dtype);
    // f32 on both sides; the GPU sums in another order.
    EXPECT_LE(error, 1e-4) << param.workload;
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, CudaPlanMatrix,
    ::testing::ValuesIn(testing::plan_matrix(
        {"ffn:tokens=48,d_model=16,d_ff=40",
         "llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32",
         "chain:A,scale=256,dtype=f32", "chain:B,scale=256,dtype=f32",
         "chain:E,scale=1024,dtype=f32"},
        {1, 2, 4, 8})),
    testing::plan_case_name);

TEST(CudaPlan, HalfPrecisionMatchesTheCpuBackendWithinItsTolerance) {
    SKIP_WITHOUT_GPU();
    for (const char* dtype : {"f16", "bf16"}) {
        for (const std::string& workload :
             {absl::StrCat("ffn:tokens=48,d_model=16,d_ff=40,dtype=", dtype),
              absl::StrCat("llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,"
                           "d_ff=48,dtype=",
                           dtype),
              absl::StrCat("llama-block:tokens=256,d_model=256,heads_q=8,heads_kv=2,d_head=32,"
                           "d_ff=512,dtype=",
                           dtype)}) {
            CompileOptions options;
            options.devices = 4;
            options.synthesis_iterations = 20;
            ir::DType type = ir::DType::f32;
            const double error = cuda_vs_cpu(workload, options, &type);
            // Both sides round to the dtype between kernels, in different places.
            EXPECT_LE(error, 2 * output_tolerance(type)) << workload;
        }
    }
}

TEST(CudaPlan, RepeatedExecutesGiveTheSameAnswer) {
    SKIP_WITHOUT_GPU();
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        compile_on("ffn:tokens=48,d_model=16,d_ff=40", options, virtual_gpus(4));
    ASSERT_TRUE(plan.ok()) << plan.status();
    const auto inputs = random_inputs((*plan)->graph());
    const auto first = run(**plan, inputs);
    for (int repeat = 0; repeat < 20; ++repeat) {
        EXPECT_EQ(run(**plan, inputs), first) << "execute " << repeat + 2;
    }
    EXPECT_EQ((*plan)->executions(), 21);
}

TEST(CudaPlan, APlanLargerThanTheCardIsResourceExhaustedAndTheNextOneRuns) {
    SKIP_WITHOUT_GPU();
    CompileOptions options;
    options.devices = 1;
    options.synthesis_iterations = 20;
    std::shared_ptr<Backend> backend = virtual_gpus(1);
    // Two 128 GiB weights and a 128 GiB activation: more than any card has.
    absl::StatusOr<std::unique_ptr<Plan>> huge =
        compile_on("ffn:tokens=262144,d_model=262144,d_ff=262144,dtype=f16", options, backend);
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
    EXPECT_THAT(std::string(huge.status().message()), HasSubstr("device 0 (GPU 0"));
    EXPECT_THAT(std::string(huge.status().message()), HasSubstr("bytes are free"));
    // Nothing of the failed plan stays allocated: a normal plan still compiles and runs.
    ir::DType dtype = ir::DType::f32;
    EXPECT_LE(cuda_vs_cpu("ffn:tokens=48,d_model=16,d_ff=40", options, &dtype), 1e-4);
}

// The same ExecGraph through the CUDA graph and through eager launches (run_eager, the GPU
// check's comparison and the way to find a failing kernel) gives the same outputs.
TEST(CudaExecutable, EagerLaunchesMatchTheGraph) {
    SKIP_WITHOUT_GPU();
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 50;
    absl::StatusOr<std::unique_ptr<Plan>> plan = compile_on(
        "llama-block:seqs=2x8,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32", options,
        cpu::make_cpu_backend({4, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    const physical::ExecGraph& graph = (*plan)->exec_graph();
    const std::vector<int> gpus = {0, 0, 0, 0};
    const std::vector<std::vector<bool>> peers = {{false}};
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutable>> replayed =
        cuda::CudaExecutable::create(graph, gpus, peers);
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutable>> eager =
        cuda::CudaExecutable::create(graph, gpus, peers);
    ASSERT_TRUE(replayed.ok()) << replayed.status();
    ASSERT_TRUE(eager.ok()) << eager.status();
    std::mt19937_64 rng(kSeed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (const auto& [name, blocks] : graph.input_blocks) {
        for (physical::BufferId id : blocks) {
            std::vector<float> values(static_cast<size_t>(graph.buffers[id].elements()));
            for (float& v : values) {
                v = uniform(rng);
            }
            const auto bytes = absl::MakeConstSpan(
                reinterpret_cast<const std::byte*>(values.data()), values.size() * sizeof(float));
            ASSERT_TRUE((*replayed)->write_buffer(id, bytes).ok()) << name;
            ASSERT_TRUE((*eager)->write_buffer(id, bytes).ok()) << name;
        }
    }
    ASSERT_TRUE((*replayed)->run().ok());
    absl::Status eager_run = (*eager)->run_eager();
    ASSERT_TRUE(eager_run.ok()) << eager_run;
    ASSERT_FALSE(graph.outputs.empty());
    for (const auto& [name, id] : graph.outputs) {
        std::vector<float> a(static_cast<size_t>(graph.buffers[id].elements()));
        std::vector<float> b(a.size());
        ASSERT_TRUE((*replayed)
                        ->read_buffer(id, absl::MakeSpan(reinterpret_cast<std::byte*>(a.data()),
                                                         a.size() * sizeof(float)))
                        .ok());
        ASSERT_TRUE((*eager)
                        ->read_buffer(id, absl::MakeSpan(reinterpret_cast<std::byte*>(b.data()),
                                                         b.size() * sizeof(float)))
                        .ok());
        EXPECT_EQ(a, b) << name << ": the same kernels in the same order give the same bits";
    }
    EXPECT_EQ((*eager)->bytes_moved(), (*replayed)->bytes_moved());
}

} // namespace
} // namespace einsummable::runtime
