// runtime::Plan on the CUDA backend (runtime/cuda), against the CPU backend on the same inputs:
// the CPU plan matrix — planner ∈ {dp, greedy, random} × schedule ∈ {naive, optimized} × p ∈
// {1, 2, 4, 8} virtual devices on GPU 0 × {FFN, a small LLaMA block, chains} in f32 — then f16
// and bf16, plans with attention split along its keys against the reference, repeated executes
// on one graph, a plan larger than the card, and plans sharing resident weights. Every test but one
// (a refusal made before any GPU is touched) needs a GPU and skips without one (scripts/gpu-check
// runs them on one).

#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/cudnn_library.h"
#include "kernels/cuda/device_info.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_executable.h"
#include "runtime/plan.h"
#include "tests/unit/gpu_required.h"
#include "tests/unit/runtime/cuda_resident_cases.h"
#include "tests/unit/runtime/exec_run.h"
#include "tests/unit/runtime/key_split_cases.h"
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

// The backend's start-up description names the libraries its kernels open at run time, or its
// warning says which one did not load and what runs instead. Needs no GPU.
TEST(CudaKernelsInfo, NamesTheLibrariesOrWarnsWhatRunsWithoutThem) {
    const KernelsInfo info = cuda::cuda_kernels_info();
    std::cout << "kernels: " << info.description << "\nwarning: " << info.warning << "\n";
    absl::StatusOr<const kernels::cuda::CudnnLibrary*> cudnn = kernels::cuda::load_cudnn();
    if (cudnn.ok()) {
        EXPECT_THAT(info.description, HasSubstr("cuDNN " + (*cudnn)->describe()));
        EXPECT_THAT(info.warning, ::testing::Not(HasSubstr("cuDNN")));
    } else {
        EXPECT_THAT(info.warning, HasSubstr("cuDNN could not be loaded ("));
        EXPECT_THAT(info.warning, HasSubstr(std::string(cudnn.status().message())));
        EXPECT_THAT(info.warning, HasSubstr("flash kernel"));
    }
}

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

// Plans with attention split along its keys (key_split_cases.h) on virtual GPUs: the
// flash kernel's partial results with their log-sum-exp, the statistics' slices, concats and
// copies, and the ⊕ that combines them give the double-precision reference's outputs (within
// 1e-4: f32 on the GPU in another order than the CPU's 1e-5), and the bytes moved are the
// exchange programs'.
class CudaKeySplitPlan : public ::testing::TestWithParam<testing::KeySplitCase> {};

TEST_P(CudaKeySplitPlan, MatchesTheReferenceAndMovesWhatTheProgramsSay) {
    SKIP_WITHOUT_GPU();
    std::cout << "seed " << testing::kKeySplitSeed << "\n";
    const testing::LoweredKeySplit lowered = testing::lower_key_split(GetParam());
    ASSERT_NE(lowered.graph, nullptr);
    const std::map<std::string, ir::HostTensor> inputs =
        testing::random_inputs(*lowered.graph, testing::kKeySplitSeed);
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(*lowered.graph, inputs);
    ASSERT_TRUE(reference.ok()) << reference.status();
    std::shared_ptr<Backend> backend = virtual_gpus(lowered.exec.devices);
    ASSERT_NE(backend, nullptr);
    const testing::ExecRun run = testing::run_on(*backend, lowered.exec, inputs);
    ASSERT_EQ(run.outputs.size(), lowered.exec.outputs.size());
    for (const auto& [name, values] : run.outputs) {
        const ir::HostTensor got(
            physical::saved_output_box(lowered.exec, lowered.exec.outputs.at(name)),
            std::vector<double>(values.begin(), values.end()));
        EXPECT_LE(ir::max_relative_error(got, reference->at(name)), 1e-4) << name;
    }
    EXPECT_EQ(run.bytes_moved, lowered.plan.program_bytes());
}

INSTANTIATE_TEST_SUITE_P(Attention, CudaKeySplitPlan,
                         ::testing::ValuesIn(testing::key_split_cases()),
                         testing::key_split_case_name);

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
    for (const auto& [name, blocks] : graph.outputs) {
        absl::StatusOr<std::vector<std::byte>> a = read_saved_output(**replayed, graph, name);
        absl::StatusOr<std::vector<std::byte>> b = read_saved_output(**eager, graph, name);
        ASSERT_TRUE(a.ok()) << a.status();
        ASSERT_TRUE(b.ok()) << b.status();
        EXPECT_EQ(*a, *b) << name << ": the same kernels in the same order give the same bits";
    }
    EXPECT_EQ((*eager)->bytes_moved(), (*replayed)->bytes_moved());
}

// ---- resident buffers (docs/cuda.md "Resident buffers") ------------------------------------

// Two plans of one FFN model — 48 and 16 tokens, planned separately, so their weight blocks may
// differ — on 4 virtual devices, and the same two graphs with w1 and w2 resident: both read
// one layout (every weight block either reads) in shared resident arenas.
struct SharedWeights {
    std::unique_ptr<Plan> plans[2];
    testing::SharedResidentLayout layout;
    physical::ExecGraph resident[2];
    std::map<std::string, ir::Box> boxes; // whole tensors, by name
};

constexpr const char* kModelPlans[2] = {"ffn:tokens=48,d_model=16,d_ff=40,dtype=f32",
                                        "ffn:tokens=16,d_model=16,d_ff=40,dtype=f32"};

SharedWeights shared_weights() {
    SharedWeights s;
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 20;
    for (int idx = 0; idx < 2; ++idx) {
        absl::StatusOr<std::unique_ptr<Plan>> plan =
            compile_on(kModelPlans[idx], options, cpu::make_cpu_backend({4, 1}));
        EXPECT_TRUE(plan.ok()) << plan.status();
        if (!plan.ok()) {
            return s;
        }
        s.plans[idx] = *std::move(plan);
        for (ir::TensorId id : s.plans[idx]->graph().inputs()) {
            const ir::GraphTensor& tensor = s.plans[idx]->graph().tensor(id);
            s.boxes.insert_or_assign(tensor.name, tensor.type.box());
        }
    }
    s.layout = testing::share_inputs({&s.plans[0]->exec_graph(), &s.plans[1]->exec_graph()},
                                     {"w1", "w2"}, 4);
    for (int idx = 0; idx < 2; ++idx) {
        s.resident[idx] = testing::with_resident_inputs(s.plans[idx]->exec_graph(), s.layout);
        EXPECT_FALSE(s.resident[idx].input_blocks.count("w1"));
        EXPECT_TRUE(s.resident[idx].input_blocks.count("x"));
    }
    return s;
}

std::vector<float> read_floats(Executable& executable, const physical::ExecGraph& graph,
                               physical::BufferId id) {
    std::vector<float> values(static_cast<size_t>(graph.buffers[id].elements()));
    absl::Status read =
        executable.read_buffer(id, absl::MakeSpan(reinterpret_cast<std::byte*>(values.data()),
                                                  values.size() * sizeof(float)));
    EXPECT_TRUE(read.ok()) << read;
    return values;
}

// A saved output, whole: each block from the device that holds it.
std::vector<float> read_output(Executable& executable, const physical::ExecGraph& graph,
                               const std::string& name) {
    absl::StatusOr<std::vector<std::byte>> bytes = read_saved_output(executable, graph, name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<float> values(bytes.ok() ? bytes->size() / sizeof(float) : 0);
    if (!values.empty()) {
        std::memcpy(values.data(), bytes->data(), bytes->size());
    }
    return values;
}

// Runs `executable` on the inputs it still loads itself and returns every saved output.
std::map<std::string, std::vector<float>>
run_graph(Executable& executable, const physical::ExecGraph& graph,
          const std::map<std::string, std::vector<float>>& inputs,
          const std::map<std::string, ir::Box>& boxes) {
    absl::Status written = testing::write_inputs(executable, graph, inputs, boxes);
    EXPECT_TRUE(written.ok()) << written;
    absl::Status ran = executable.run();
    EXPECT_TRUE(ran.ok()) << ran;
    std::map<std::string, std::vector<float>> outputs;
    for (const auto& [name, blocks] : graph.outputs) {
        outputs.emplace(name, read_output(executable, graph, name));
    }
    return outputs;
}

TEST(CudaResident, TwoPlansSharingResidentWeightsMatchPlansWithTheirOwnCopies) {
    SKIP_WITHOUT_GPU();
    SharedWeights s = shared_weights();
    ASSERT_NE(s.plans[1], nullptr);
    std::shared_ptr<Backend> backend = virtual_gpus(4);
    ASSERT_NE(backend, nullptr);
    absl::StatusOr<std::shared_ptr<ResidentMemory>> memory =
        backend->allocate_resident(s.layout.arena_bytes);
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_EQ((*memory)->allocated_bytes(), s.layout.arena_bytes);
    std::unique_ptr<Executable> own[2];
    std::unique_ptr<Executable> shared[2];
    for (int idx = 0; idx < 2; ++idx) {
        absl::StatusOr<std::unique_ptr<Executable>> exe =
            backend->prepare(s.plans[idx]->exec_graph());
        ASSERT_TRUE(exe.ok()) << exe.status();
        own[idx] = *std::move(exe);
        exe = backend->prepare(s.resident[idx], *memory);
        ASSERT_TRUE(exe.ok()) << exe.status();
        shared[idx] = *std::move(exe);
        // The resident plan's own arenas do not hold the weights (nor does it count them).
        EXPECT_EQ(shared[idx]->allocated_bytes(), own[idx]->allocated_bytes());
    }
    // Written once, for both plans.
    std::map<std::string, std::vector<float>> weights = random_inputs(s.plans[0]->graph());
    ASSERT_TRUE(testing::write_resident(**memory, s.layout, weights, s.boxes).ok());
    for (int idx = 0; idx < 2; ++idx) {
        SCOPED_TRACE(kModelPlans[idx]);
        std::map<std::string, std::vector<float>> inputs = random_inputs(s.plans[idx]->graph());
        inputs["w1"] = weights["w1"];
        inputs["w2"] = weights["w2"];
        const auto expected = run_graph(*own[idx], s.plans[idx]->exec_graph(), inputs, s.boxes);
        const auto actual = run_graph(*shared[idx], s.resident[idx], inputs, s.boxes);
        ASSERT_FALSE(expected.empty());
        // The same kernels on the same values, only read from other addresses.
        EXPECT_LE(worst_relative_error(actual, expected), 1e-6);
        // Both backends' counts agree: resident reads are not copies.
        EXPECT_EQ(shared[idx]->bytes_moved(), own[idx]->bytes_moved());
    }
}

TEST(CudaResident, AResidentBlockWrittenOnceIsSeenByEveryPlanReadingIt) {
    SKIP_WITHOUT_GPU();
    SharedWeights s = shared_weights();
    ASSERT_NE(s.plans[1], nullptr);
    std::shared_ptr<Backend> backend = virtual_gpus(4);
    ASSERT_NE(backend, nullptr);
    absl::StatusOr<std::shared_ptr<ResidentMemory>> memory =
        backend->allocate_resident(s.layout.arena_bytes);
    ASSERT_TRUE(memory.ok()) << memory.status();
    std::unique_ptr<Executable> shared[2];
    for (int idx = 0; idx < 2; ++idx) {
        absl::StatusOr<std::unique_ptr<Executable>> exe =
            backend->prepare(s.resident[idx], *memory);
        ASSERT_TRUE(exe.ok()) << exe.status();
        shared[idx] = *std::move(exe);
    }
    // Zeroed when allocated: before any write, every plan reads zeros.
    for (int idx = 0; idx < 2; ++idx) {
        for (physical::BufferId id = 0;
             id < static_cast<physical::BufferId>(s.resident[idx].buffers.size()); ++id) {
            if (s.resident[idx].buffers[id].resident) {
                const std::vector<float> values = read_floats(*shared[idx], s.resident[idx], id);
                EXPECT_EQ(values, std::vector<float>(values.size(), 0.0f));
            }
        }
    }
    std::map<std::string, std::vector<float>> weights = random_inputs(s.plans[0]->graph());
    std::map<std::string, std::vector<float>> inputs[2] = {random_inputs(s.plans[0]->graph()),
                                                           random_inputs(s.plans[1]->graph())};
    for (int round = 0; round < 2; ++round) {
        SCOPED_TRACE(round == 0 ? "first weights" : "weights rewritten");
        if (round == 1) {
            for (float& v : weights["w1"]) {
                v = -2.0f * v;
            }
        }
        ASSERT_TRUE(testing::write_resident(**memory, s.layout, weights, s.boxes).ok());
        // What was written reads back, through the memory and through every executable.
        for (const auto& [key, offset] : s.layout.offsets) {
            const auto& [name, device, box] = key;
            const std::vector<std::byte> want =
                testing::block_of(weights[name], s.boxes[name], box);
            std::vector<std::byte> got(want.size());
            ASSERT_TRUE((*memory)->read(device, offset, absl::MakeSpan(got)).ok());
            EXPECT_EQ(got, want) << name << " on device " << device << " " << box.to_string();
        }
        for (int idx = 0; idx < 2; ++idx) {
            SCOPED_TRACE(kModelPlans[idx]);
            const physical::ExecGraph& graph = s.resident[idx];
            for (physical::BufferId id = 0;
                 id < static_cast<physical::BufferId>(graph.buffers.size()); ++id) {
                const physical::Buffer& buffer = graph.buffers[id];
                if (!buffer.resident) {
                    continue;
                }
                const std::vector<std::byte> want =
                    testing::block_of(weights[buffer.tensor], s.boxes[buffer.tensor], buffer.box);
                std::vector<float> got = read_floats(*shared[idx], graph, id);
                EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0)
                    << physical::buffer_label(graph, id);
            }
            // The outputs follow the weights: against the CPU backend on the same values.
            std::map<std::string, std::vector<float>> all = inputs[idx];
            all["w1"] = weights["w1"];
            all["w2"] = weights["w2"];
            std::shared_ptr<Backend> cpu_backend = cpu::make_cpu_backend({4, 1});
            absl::StatusOr<std::unique_ptr<Executable>> reference =
                cpu_backend->prepare(s.plans[idx]->exec_graph());
            ASSERT_TRUE(reference.ok()) << reference.status();
            const auto expected = run_graph(**reference, s.plans[idx]->exec_graph(), all, s.boxes);
            const auto actual = run_graph(*shared[idx], graph, inputs[idx], s.boxes);
            EXPECT_LE(worst_relative_error(actual, expected), 1e-4);
        }
    }
    // A resident buffer is not written through one plan's executable.
    for (physical::BufferId id = 0;
         id < static_cast<physical::BufferId>(s.resident[0].buffers.size()); ++id) {
        if (s.resident[0].buffers[id].resident) {
            std::vector<std::byte> bytes(static_cast<size_t>(s.resident[0].buffers[id].bytes()));
            absl::Status write = shared[0]->write_buffer(id, bytes);
            EXPECT_EQ(write.code(), absl::StatusCode::kInvalidArgument) << write;
            EXPECT_THAT(std::string(write.message()), HasSubstr("resident"));
            break;
        }
    }
}

TEST(CudaResident, PrepareRefusesMissingOrTooSmallResidentMemory) {
    SKIP_WITHOUT_GPU();
    SharedWeights s = shared_weights();
    ASSERT_NE(s.plans[1], nullptr);
    std::shared_ptr<Backend> backend = virtual_gpus(4);
    ASSERT_NE(backend, nullptr);
    absl::StatusOr<std::unique_ptr<Executable>> none = backend->prepare(s.resident[0]);
    ASSERT_FALSE(none.ok());
    EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument) << none.status();
    EXPECT_THAT(std::string(none.status().message()), HasSubstr("without resident memory"));

    std::vector<int64_t> smaller = s.layout.arena_bytes;
    ASSERT_GT(smaller[1], 0);
    smaller[1] -= 64;
    absl::StatusOr<std::shared_ptr<ResidentMemory>> small = backend->allocate_resident(smaller);
    ASSERT_TRUE(small.ok()) << small.status();
    absl::StatusOr<std::unique_ptr<Executable>> too_small = backend->prepare(s.resident[0], *small);
    ASSERT_FALSE(too_small.ok());
    EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(too_small.status().message()),
                HasSubstr("device 1's resident memory has"));

    // Memory of another backend is not the CUDA backend's.
    absl::StatusOr<std::shared_ptr<ResidentMemory>> host =
        cpu::make_cpu_backend({4, 1})->allocate_resident(s.layout.arena_bytes);
    ASSERT_TRUE(host.ok()) << host.status();
    absl::StatusOr<std::unique_ptr<Executable>> foreign = backend->prepare(s.resident[0], *host);
    EXPECT_EQ(foreign.status().code(), absl::StatusCode::kInvalidArgument) << foreign.status();

    // A plan without resident buffers ignores resident memory it is given.
    absl::StatusOr<std::shared_ptr<ResidentMemory>> memory =
        backend->allocate_resident(s.layout.arena_bytes);
    ASSERT_TRUE(memory.ok()) << memory.status();
    EXPECT_TRUE(backend->prepare(s.plans[0]->exec_graph(), *memory).ok());
}

TEST(CudaResident, AllocationRefusesTooManyDevicesAndWhatDoesNotFit) {
    SKIP_WITHOUT_GPU();
    std::shared_ptr<Backend> backend = virtual_gpus(2);
    ASSERT_NE(backend, nullptr);
    absl::StatusOr<std::shared_ptr<ResidentMemory>> three =
        backend->allocate_resident({64, 64, 64});
    EXPECT_EQ(three.status().code(), absl::StatusCode::kInvalidArgument) << three.status();
    // More than any card has, on the second device: named, and nothing stays allocated.
    absl::StatusOr<std::shared_ptr<ResidentMemory>> huge =
        backend->allocate_resident({1024, int64_t{1} << 50});
    ASSERT_FALSE(huge.ok());
    EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted) << huge.status();
    EXPECT_THAT(std::string(huge.status().message()), HasSubstr("device 1 (GPU 0"));
    // Fewer entries than devices, and a zero-byte arena, are fine; outside an arena is not.
    absl::StatusOr<std::shared_ptr<ResidentMemory>> one = backend->allocate_resident({0});
    ASSERT_TRUE(one.ok()) << one.status();
    EXPECT_EQ((*one)->allocated_bytes(), std::vector<int64_t>{0});
    std::vector<std::byte> byte(1);
    EXPECT_EQ((*one)->write(0, 0, byte).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ((*one)->write(1, 0, byte).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE((*one)->write(0, 0, {}).ok());
}

// Runs anywhere: the refusal comes before anything touches a GPU.
TEST(CudaResident, AnExecutableOfResidentBuffersNeedsResidentMemory) {
    SharedWeights s = shared_weights();
    ASSERT_NE(s.plans[1], nullptr);
    ASSERT_TRUE(physical::check_exec_graph(s.resident[0], 4).ok())
        << physical::check_exec_graph(s.resident[0], 4);
    absl::StatusOr<std::unique_ptr<cuda::CudaExecutable>> exe =
        cuda::CudaExecutable::create(s.resident[0], {0, 0, 0, 0}, {{false}});
    ASSERT_FALSE(exe.ok());
    EXPECT_EQ(exe.status().code(), absl::StatusCode::kInvalidArgument) << exe.status();
    EXPECT_THAT(std::string(exe.status().message()), HasSubstr("without resident memory"));
}

} // namespace
} // namespace einsummable::runtime
