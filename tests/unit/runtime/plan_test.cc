// runtime::Plan end to end on the CPU backend: compile (logical plan, exchange programs,
// ExecGraph), load, execute, offload — against the single-device double-precision reference.
//
// The matrix: planner ∈ {dp, greedy, random} × schedule ∈ {naive, optimized} × p ∈ {1, 2, 3,
// 4, 8} × {FFN, a small LLaMA block (GQA, causal, packed sequences), small chains A–E}, in f32
// within 1e-5; the bytes the backend copied equal what the exchange programs send. Then f16 and
// bf16 within output_tolerance, repeated and concurrent executes, the search objective's plans
// (run like the others, simulated no slower than the bytes objective's), the default objective
// and API errors.

#include <iostream>
#include <map>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/plan_cases.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

// The CPU backend with as many virtual devices as the options ask for.
std::shared_ptr<Backend> cpu_backend(const CompileOptions& options) {
    return cpu::make_cpu_backend({options.devices, 1});
}

constexpr uint64_t kSeed = 20261130;

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

// Random inputs rounded to each tensor's dtype, as floats and as reference host tensors.
struct Inputs {
    std::map<std::string, std::vector<float>> values;
    std::map<std::string, ir::HostTensor> host;
};

Inputs random_inputs(const ir::Graph& graph, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Inputs inputs;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        std::uniform_real_distribution<double> uniform(-1.0, 1.0);
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = static_cast<float>(ir::round_to_dtype(uniform(rng), tensor.type.dtype));
        }
        inputs.host.emplace(
            tensor.name,
            ir::HostTensor(tensor.type.box(), std::vector<double>(values.begin(), values.end())));
        inputs.values.emplace(tensor.name, std::move(values));
    }
    return inputs;
}

std::unique_ptr<Plan> compile(const std::string& workload, const CompileOptions& options) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build(workload), options, cpu_backend(options));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

// Loads `inputs`, executes, and returns the largest relative error of any saved output against
// the reference.
double run_and_compare(Plan& plan, const Inputs& inputs) {
    for (const auto& [name, values] : inputs.values) {
        EXPECT_TRUE(plan.load(name, values).ok()) << name;
    }
    absl::Status executed = plan.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(plan.graph(), inputs.host, kernels::cpu::run_block);
    EXPECT_TRUE(reference.ok()) << reference.status();
    double worst = 0.0;
    for (const auto& [name, expected] : *reference) {
        absl::StatusOr<std::vector<float>> actual = plan.offload(name);
        EXPECT_TRUE(actual.ok()) << actual.status();
        if (!actual.ok()) {
            return 1e9;
        }
        const ir::HostTensor got(expected.box(),
                                 std::vector<double>(actual->begin(), actual->end()));
        worst = std::max(worst, ir::max_relative_error(got, expected));
    }
    return worst;
}

using testing::PlanCase;

class PlanMatrix : public ::testing::TestWithParam<PlanCase> {};

TEST_P(PlanMatrix, MatchesTheReferenceAndMovesWhatTheProgramsSay) {
    const PlanCase& param = GetParam();
    std::cout << "seed " << kSeed << "\n";
    CompileOptions options;
    options.devices = param.devices;
    options.planner = param.planner;
    options.schedule = param.schedule;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    std::unique_ptr<Plan> plan = compile(param.workload, options);
    ASSERT_NE(plan, nullptr);
    const Inputs inputs = random_inputs(plan->graph(), kSeed);
    EXPECT_LE(run_and_compare(*plan, inputs), 1e-5);

    const std::vector<std::vector<int64_t>> programs = plan->physical_plan().program_bytes();
    EXPECT_EQ(plan->bytes_moved(), programs);
    EXPECT_EQ(plan->exec_graph().copy_bytes(), programs);
    if (param.devices == 1) {
        EXPECT_EQ(programs, std::vector<std::vector<int64_t>>{{0}});
    }
}

INSTANTIATE_TEST_SUITE_P(
    Workloads, PlanMatrix,
    ::testing::ValuesIn(testing::plan_matrix(
        {"ffn:tokens=48,d_model=16,d_ff=40",
         "llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32",
         "chain:A,scale=256,dtype=f32", "chain:B,scale=256,dtype=f32",
         "chain:C,scale=256,dtype=f32", "chain:D,scale=512,dtype=f32",
         "chain:E,scale=1024,dtype=f32"},
        {1, 2, 3, 4, 8})),
    testing::plan_case_name);

TEST(Plan, HalfPrecisionStorageStaysWithinItsTolerance) {
    for (const char* dtype : {"f16", "bf16"}) {
        for (const std::string& workload :
             {absl::StrCat("ffn:tokens=48,d_model=16,d_ff=40,dtype=", dtype),
              absl::StrCat("llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,"
                           "d_ff=48,dtype=",
                           dtype),
              absl::StrCat("chain:B,scale=256,dtype=", dtype)}) {
            CompileOptions options;
            options.devices = 4;
            options.synthesis_iterations = 20;
            std::unique_ptr<Plan> plan = compile(workload, options);
            ASSERT_NE(plan, nullptr);
            const ir::DType type = plan->graph().tensor(plan->graph().saved()[0]).type.dtype;
            const double error = run_and_compare(*plan, random_inputs(plan->graph(), kSeed));
            EXPECT_LE(error, output_tolerance(type)) << workload;
            // Not vacuous: half precision does round.
            EXPECT_GT(error, 1e-6) << workload;
        }
    }
}

TEST(Plan, RunsManyTimesWithoutReallocating) {
    CompileOptions options;
    options.devices = 3;
    options.synthesis_iterations = 20;
    std::unique_ptr<Plan> plan = compile("ffn:tokens=48,d_model=16,d_ff=40", options);
    ASSERT_NE(plan, nullptr);
    const std::vector<int64_t> peak = plan->peak_bytes();
    for (uint64_t round = 0; round < 4; ++round) {
        EXPECT_LE(run_and_compare(*plan, random_inputs(plan->graph(), kSeed + round)), 1e-5);
    }
    EXPECT_EQ(plan->executions(), 4);
    EXPECT_EQ(plan->peak_bytes(), peak);
    // Bytes accumulate per execute.
    const std::vector<std::vector<int64_t>> once = plan->physical_plan().program_bytes();
    const std::vector<std::vector<int64_t>> moved = plan->bytes_moved();
    for (size_t s = 0; s < once.size(); ++s) {
        for (size_t d = 0; d < once.size(); ++d) {
            EXPECT_EQ(moved[s][d], 4 * once[s][d]);
        }
    }
}

TEST(Plan, ConcurrentExecutesOfOnePlanAreSafe) {
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 20;
    std::unique_ptr<Plan> plan = compile("chain:B,scale=256,dtype=f32", options);
    ASSERT_NE(plan, nullptr);
    const Inputs inputs = random_inputs(plan->graph(), kSeed);
    const double expected = run_and_compare(*plan, inputs);
    ASSERT_LE(expected, 1e-5);
    const std::string output = plan->graph().tensor(plan->graph().saved()[0]).name;
    const std::vector<float> first = *plan->offload(output);
    std::vector<std::thread> threads;
    std::vector<int> mismatches(4, 0);
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&, t] {
            for (int r = 0; r < 5; ++r) {
                if (!plan->execute().ok() || *plan->offload(output) != first) {
                    ++mismatches[t];
                }
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

// The predicted time of a plan's ExecGraph on the topology it was compiled for.
double simulated_seconds(const Plan& plan) {
    absl::StatusOr<physical::PlanSimulation> simulation = physical::simulate_plan(
        plan.exec_graph(), plan.options().topology ? *plan.options().topology
                                                   : default_topology(plan.options().devices));
    EXPECT_TRUE(simulation.ok()) << simulation.status();
    return simulation.ok() ? simulation->predicted_s : 0.0;
}

TEST(Plan, TheDefaultObjectiveIsTime) {
    EXPECT_EQ(CompileOptions{}.objective, logical::Objective::time);
    CompileOptions options;
    options.devices = 2;
    std::unique_ptr<Plan> plan = compile("ffn:tokens=8,d_model=4,d_ff=8", options);
    ASSERT_NE(plan, nullptr);
    ASSERT_TRUE(plan->logical_plan().objective.has_value());
    EXPECT_EQ(plan->logical_plan().objective->objective, logical::Objective::time);
    EXPECT_THAT(plan->record(), HasSubstr(" objective time predicted "));
}

TEST(Plan, SearchObjectiveRunsAndIsNoSlowerThanTheBytesObjective) {
    const absl::StatusOr<std::string> llama = workloads::small_name("llama-block:seqs=8x1024");
    ASSERT_TRUE(llama.ok()) << llama.status();
    int faster = 0; // workloads where the search objective found a faster plan
    for (const std::string& workload : {*llama, std::string("ffn:tokens=48,d_model=16,d_ff=40")}) {
        SCOPED_TRACE(workload);
        CompileOptions options;
        options.devices = 4;
        options.schedule = exprog::SynthesisMode::naive;
        options.seed = kSeed;
        options.synthesis_iterations = 20;
        options.objective = logical::Objective::bytes;
        std::unique_ptr<Plan> by_cost = compile(workload, options);
        ASSERT_NE(by_cost, nullptr);
        options.objective = logical::Objective::search;
        std::unique_ptr<Plan> by_time = compile(workload, options);
        ASSERT_NE(by_time, nullptr);
        EXPECT_EQ(by_time->options().objective, logical::Objective::search);

        const ir::DType type = by_time->graph().tensor(by_time->graph().saved()[0]).type.dtype;
        const Inputs inputs = random_inputs(by_time->graph(), kSeed);
        EXPECT_LE(run_and_compare(*by_time, inputs), output_tolerance(type));
        const std::vector<std::vector<int64_t>> programs = by_time->physical_plan().program_bytes();
        EXPECT_EQ(by_time->bytes_moved(), programs);

        const double time_s = simulated_seconds(*by_time);
        const double cost_s = simulated_seconds(*by_cost);
        std::cout << workload << ": simulated " << time_s * 1e6 << " us (search objective), "
                  << cost_s * 1e6 << " us (bytes objective)\n";
        EXPECT_GT(time_s, 0.0);
        EXPECT_LE(time_s, cost_s);
        faster += time_s < cost_s ? 1 : 0;

        // The record holds the decisions: restored with the same options, it is the same plan.
        absl::StatusOr<std::unique_ptr<Plan>> restored =
            Plan::restore(build(workload), options, by_time->record(), cpu_backend(options));
        ASSERT_TRUE(restored.ok()) << restored.status();
        EXPECT_EQ((*restored)->record(), by_time->record());
        EXPECT_EQ((*restored)->exec_graph().to_string(), by_time->exec_graph().to_string());
    }
    // Not vacuous: on these small workloads the bytes objective's plan is not the fastest (the
    // DP's many small exchanges), so a compile that ignored the objective fails here.
    EXPECT_GT(faster, 0);
}

TEST(Plan, ErrorsNameTheTensor) {
    CompileOptions options;
    options.devices = 2;
    std::unique_ptr<Plan> plan = compile("ffn:tokens=8,d_model=4,d_ff=8", options);
    ASSERT_NE(plan, nullptr);
    EXPECT_THAT(std::string(plan->offload("y").status().message()),
                HasSubstr("offload of 'y' before the plan was executed"));
    EXPECT_THAT(std::string(plan->load("nope", {}).message()),
                HasSubstr("'nope' is not an input of the graph (inputs: x, w1, w2)"));
    EXPECT_THAT(std::string(plan->load("x", std::vector<float>(3)).message()),
                HasSubstr("input 'x' f32[tokens=8, d_model=4] has 32 elements; got 3"));
    ASSERT_TRUE(plan->load("x", std::vector<float>(32, 1.0f)).ok());
    absl::Status missing = plan->execute();
    EXPECT_EQ(missing.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(missing.message()), HasSubstr("input 'w1'"));
    EXPECT_EQ(plan->offload("h").status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(plan->offload("h").status().message()),
                HasSubstr("'h' is not a saved output (saved: y)"));

    CompileOptions bad = options;
    bad.devices = 0;
    EXPECT_THAT(
        std::string(Plan::compile(build("ffn"), bad, cpu_backend(options)).status().message()),
        HasSubstr("devices must be at least 1"));
    bad.devices = 9;
    bad.topology = *exprog::builtin_topology("dgx-v100");
    EXPECT_THAT(
        std::string(
            Plan::compile(build("ffn"), bad, cpu::make_cpu_backend({9, 1})).status().message()),
        HasSubstr("the plan is for 9 devices; topology dgx-v100 has 8"));
}

TEST(Plan, ExplainShowsPlanProgramsBytesAndMemory) {
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 20;
    std::unique_ptr<Plan> plan = compile("ffn:tokens=48,d_model=16,d_ff=40", options);
    ASSERT_NE(plan, nullptr);
    const std::string text = plan->explain();
    EXPECT_THAT(text, HasSubstr("logical plan: planner=dp devices=4"));
    EXPECT_THAT(text, HasSubstr("exchange programs (optimized, topology dgx-a100"));
    EXPECT_THAT(text, HasSubstr("GPUS: 0, 1, 2, 3"));
    EXPECT_THAT(text, HasSubstr("bytes moved per execute, by device pair"));
    EXPECT_THAT(text, HasSubstr("peak memory per device (static plan)"));
}

} // namespace
} // namespace einsummable::runtime
