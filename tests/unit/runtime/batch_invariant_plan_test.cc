// Batch-invariant plans (CompileOptions::batch_invariant) on the CPU backend: they aggregate
// nothing and match the double-precision reference, a plan planned again to fit in memory stays
// batch-invariant, and a record restores only into the options it was made with. (That a
// request's rows batched equal its rows alone, bit for bit, needs row-invariant kernels too: see
// the disabled test below.)

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/workloads/by_name.h"
#include "compiler/workloads/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/gemm.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/reference_check.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;
using testing::Values;

constexpr uint64_t kSeed = 20261207;
constexpr int kDevices = 4;

// A small LLaMA block in f32 over packed sequences of these lengths.
ir::Graph llama(std::vector<int64_t> sequence_lengths) {
    workloads::LlamaConfig config = testing::tiny_llama();
    config.sequence_lengths = std::move(sequence_lengths);
    absl::StatusOr<ir::Graph> graph = workloads::llama_block(config);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

CompileOptions options_for(bool batch_invariant) {
    CompileOptions options;
    options.devices = kDevices;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    options.batch_invariant = batch_invariant;
    return options;
}

std::unique_ptr<Plan> compiled(ir::Graph graph, const CompileOptions& options) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(std::move(graph), options, cpu::make_cpu_backend({kDevices, 1}));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

int aggregating(const Plan& plan) {
    return static_cast<int>(std::count_if(
        plan.logical_plan().operators.begin(), plan.logical_plan().operators.end(),
        [](const logical::OperatorPlan& op) { return logical::aggregates(op.choice); }));
}

// Every input of `graph` uniform in [-1, 1]; the weights from `weights` where it has them.
Values random_inputs(const ir::Graph& graph, std::mt19937_64& rng, const Values& weights = {}) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    Values values;
    for (ir::TensorId id : graph.inputs()) {
        const std::string& name = graph.tensor(id).name;
        if (weights.count(name)) {
            values[name] = weights.at(name);
            continue;
        }
        std::vector<float>& v = values[name];
        v.resize(graph.tensor(id).type.elements());
        for (float& x : v) {
            x = uniform(rng);
        }
    }
    return values;
}

// Loads, executes and offloads `y`; the largest relative error against the reference through
// `error` when given.
std::vector<float> run(Plan& plan, const Values& inputs, double* error = nullptr) {
    Plan::Lease lease = plan.acquire();
    for (const auto& [name, values] : inputs) {
        EXPECT_TRUE(lease.load(name, values).ok()) << name;
    }
    absl::Status executed = lease.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    if (error != nullptr) {
        *error = testing::compare_to_reference(plan, lease, inputs);
    }
    absl::StatusOr<std::vector<float>> y = lease.offload("y");
    EXPECT_TRUE(y.ok()) << y.status();
    return y.ok() ? *std::move(y) : std::vector<float>{};
}

TEST(BatchInvariantPlan, MatchesTheReferenceAndSaysSo) {
    std::cout << "seed " << kSeed << "\n";
    std::unique_ptr<Plan> plan = compiled(llama({5, 7}), options_for(true));
    ASSERT_NE(plan, nullptr);
    EXPECT_EQ(aggregating(*plan), 0);
    EXPECT_TRUE(plan->logical_plan().options.batch_invariant);
    std::mt19937_64 rng(kSeed);
    double error = 1e9;
    run(*plan, random_inputs(plan->graph(), rng), &error);
    EXPECT_LE(error, 1e-5);
    EXPECT_THAT(plan->explain(), HasSubstr("batch-invariant: no operator aggregates"));

    std::unique_ptr<Plan> free_plan = compiled(llama({5, 7}), options_for(false));
    ASSERT_NE(free_plan, nullptr);
    EXPECT_THAT(free_plan->explain(), ::testing::Not(HasSubstr("batch-invariant")));
    // The other plans' contractions and attention take the library gemm (so the count that
    // ARequestGetsTheSameBitsBatchedAsAlone holds at zero counts something).
    const int64_t calls = kernels::cpu::gemm_library_calls();
    run(*free_plan, random_inputs(free_plan->graph(), rng), &error);
    EXPECT_LE(error, 1e-5);
    EXPECT_GT(kernels::cpu::gemm_library_calls(), calls);
}

// The plans are batch-invariant (tests/unit/logical/batch_invariant_test.cc runs their specs with
// the reference kernels and gets equal bits); this needs the kernels' half too. A gemm library
// may give a row other bits when its block has another number of rows or the row another place
// in it (OpenBLAS 0.3.21's SSE3 kernels did, for attention's query tiles), so batch-invariant
// plans never call it: their contractions and attention run in gemm_invariant's fixed order.
// ctest runs this again with oneDNN capped to other kernels (tests/unit/runtime/CMakeLists.txt).
TEST(BatchInvariantPlan, ARequestGetsTheSameBitsBatchedAsAlone) {
    // Requests of 5, 7 and 12 tokens (one sequence each), run alone and as one batch, each
    // plan batch-invariant for its own token count.
    const std::vector<int64_t> lengths = {5, 7, 12};
    std::cout << "seed " << kSeed << "\n";
    std::unique_ptr<Plan> batch = compiled(llama(lengths), options_for(true));
    ASSERT_NE(batch, nullptr);
    std::mt19937_64 rng(kSeed);
    Values batch_inputs = random_inputs(batch->graph(), rng);
    Values weights = batch_inputs;
    weights.erase("x");
    const int64_t library_calls = kernels::cpu::gemm_library_calls();
    const std::vector<float> batched = run(*batch, batch_inputs);
    const int64_t d_model = 32;
    int64_t row = 0;
    for (int64_t length : lengths) {
        SCOPED_TRACE(absl::StrCat("request of ", length, " tokens at row ", row));
        std::unique_ptr<Plan> alone = compiled(llama({length}), options_for(true));
        ASSERT_NE(alone, nullptr);
        Values inputs = weights;
        const auto first = batch_inputs.at("x").begin() + row * d_model;
        inputs["x"].assign(first, first + length * d_model);
        const std::vector<float> own = run(*alone, inputs);
        ASSERT_EQ(own.size(), static_cast<size_t>(length * d_model));
        EXPECT_EQ(
            std::memcmp(own.data(), batched.data() + row * d_model, own.size() * sizeof(float)), 0)
            << "batched:\n"
            << batch->explain() << "\nalone:\n"
            << alone->explain();
        row += length;
    }
    EXPECT_EQ(kernels::cpu::gemm_library_calls(), library_calls)
        << "a batch-invariant plan called the gemm library, whose bits may depend on the block";
}

TEST(BatchInvariantPlan, PlanningAgainToFitKeepsItBatchInvariant) {
    // At p = 4 the search objective runs this FFN data parallel, every device holding both
    // weights. Planned again with them unreplicated, the unconstrained plan splits w2 by its
    // rows, which sums (Megatron's row parallelism); the batch-invariant one may not. (With the
    // bytes objective the batch-invariant plan shards the weights already, and its sharded
    // alternatives hold more activations than they save in weights.) A wide d_ff: with
    // d_ff = 128 the re-planned plan no longer sums, since the saved output is delivered from
    // its devices instead of gathered onto device 0, where the partial sums were reduced for
    // free along the way.
    const std::string shape = "ffn:tokens=16,d_model=64,d_ff=1024";
    auto options = [](bool batch_invariant, int64_t capacity) {
        CompileOptions options = options_for(batch_invariant);
        options.weights = {"w1", "w2"};
        options.device_memory_bytes = capacity;
        options.objective = logical::Objective::search;
        return options;
    };
    for (bool batch_invariant : {false, true}) {
        SCOPED_TRACE(batch_invariant ? "batch-invariant" : "unconstrained");
        std::unique_ptr<Plan> free_plan =
            compiled(*workloads::by_name(shape), options(batch_invariant, 0));
        ASSERT_NE(free_plan, nullptr);
        int64_t need = 0;
        for (const DeviceNeed& device : free_plan->memory_need()) {
            need = std::max(need, device.total());
        }
        std::unique_ptr<Plan> plan =
            compiled(*workloads::by_name(shape), options(batch_invariant, need - 1));
        ASSERT_NE(plan, nullptr);
        EXPECT_TRUE(plan->weights_unreplicated());
        if (batch_invariant) {
            EXPECT_EQ(aggregating(*plan), 0);
            EXPECT_THAT(plan->explain(), HasSubstr("batch-invariant"));
        } else {
            EXPECT_GT(aggregating(*plan), 0) << "the test would prove nothing";
        }
        std::mt19937_64 rng(kSeed);
        double error = 1e9;
        run(*plan, random_inputs(plan->graph(), rng), &error);
        EXPECT_LE(error, 1e-5);
    }
}

TEST(BatchInvariantPlan, ARecordRestoresOnlyWithTheOptionsItWasMadeWith) {
    // 4 tokens through a 4096 x 8 projection: unconstrained, the bytes objective splits the
    // contraction and sums (the time objective finds it too small to pay).
    const std::string shape = "matmul:4x4096x8";
    std::unique_ptr<Plan> invariant = compiled(*workloads::by_name(shape), options_for(true));
    CompileOptions free_options = options_for(false);
    free_options.objective = logical::Objective::bytes;
    std::unique_ptr<Plan> free_plan = compiled(*workloads::by_name(shape), free_options);
    ASSERT_NE(invariant, nullptr);
    ASSERT_NE(free_plan, nullptr);
    ASSERT_GT(aggregating(*free_plan), 0) << "the test would prove nothing";
    EXPECT_EQ(aggregating(*invariant), 0);

    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(*workloads::by_name(shape), options_for(true), invariant->record(),
                      cpu::make_cpu_backend({kDevices, 1}));
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->explain(), invariant->explain());
    EXPECT_TRUE((*restored)->logical_plan().options.batch_invariant);

    absl::StatusOr<std::unique_ptr<Plan>> stale =
        Plan::restore(*workloads::by_name(shape), options_for(true), free_plan->record(),
                      cpu::make_cpu_backend({kDevices, 1}));
    ASSERT_FALSE(stale.ok());
    EXPECT_EQ(stale.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(stale.status().message(),
                HasSubstr("operator 'c': the plan record aggregates its output"));
}

} // namespace
} // namespace einsummable::runtime
