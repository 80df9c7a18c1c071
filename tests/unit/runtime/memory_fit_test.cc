// Plans that fit in device memory (CompileOptions::device_memory_bytes, docs/runtime.md "Device
// memory") on the CPU backend: a plan that replicates its weights beyond the capacity is planned
// again with them sharded and still matches the double-precision reference; one that cannot fit
// is refused naming the device and both byte counts; a plan that fits is the plan made without a
// capacity; instances are sized to the memory left beside the weights.

#include <algorithm>
#include <iostream>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/reference_check.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 20261203;

// At p = 2 the planner runs this FFN data parallel: every device holds all of w1 and w2
// (32 KiB of its 72 KiB), while a plan that shards them needs 64 KiB per device. (At p = 4 the
// data-parallel plan needs no more than any sharded one since the saved output stays
// distributed instead of being gathered onto device 0.)
constexpr int kDevices = 2;
const char* const kShape = "ffn:tokens=64,d_model=128,d_ff=32";

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

CompileOptions options_for(int64_t capacity) {
    CompileOptions options;
    options.devices = kDevices;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"w1", "w2"};
    options.device_memory_bytes = capacity;
    return options;
}

std::unique_ptr<Plan> compiled(const std::string& shape, const CompileOptions& options,
                               const std::shared_ptr<Backend>& backend) {
    absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::compile(build(shape), options, backend);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

const DeviceNeed& largest_need(const Plan& plan) {
    return *std::max_element(
        plan.memory_need().begin(), plan.memory_need().end(),
        [](const DeviceNeed& a, const DeviceNeed& b) { return a.total() < b.total(); });
}

// The pipeline's wording for one device's need (compiler/pipeline/memory_fit.cc, need_text).
std::string need_text(const DeviceNeed& need, int64_t capacity) {
    return absl::StrCat("device ", need.device, " needs ", need.total(), " B (weights ",
                        need.weights, " B + activations ", need.activations, " B) and has ",
                        capacity, " B");
}

using testing::Values;

Values random_inputs(const ir::Graph& graph, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    Values values;
    for (ir::TensorId id : graph.inputs()) {
        std::vector<float>& v = values[graph.tensor(id).name];
        v.resize(graph.tensor(id).type.elements());
        for (float& x : v) {
            x = uniform(rng);
        }
    }
    return values;
}

// Loads `inputs`, executes, and returns the largest relative error of the saved outputs
// against the reference.
double run_and_compare(Plan& plan, const Values& inputs) {
    Plan::Lease lease = plan.acquire();
    for (const auto& [name, values] : inputs) {
        EXPECT_TRUE(lease.load(name, values).ok()) << name;
    }
    absl::Status executed = lease.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    return testing::compare_to_reference(plan, lease, inputs);
}

// Copies of `weight` the layout holds: its blocks' volumes over the tensor's.
double copies_of(const physical::ResidentLayout& layout, const std::string& weight) {
    const physical::ResidentTensor& tensor = layout.tensors.at(weight);
    int64_t volume = 0;
    for (const physical::ResidentBlock& block : tensor.blocks) {
        volume += block.box.volume();
    }
    return static_cast<double>(volume) / static_cast<double>(tensor.type.elements());
}

class MemoryFit : public ::testing::Test {
protected:
    void SetUp() override {
        std::cout << "seed " << kSeed << "\n";
        backend_ = cpu::make_cpu_backend({kDevices, 1});
        free_ = compiled(kShape, options_for(0), backend_);
        ASSERT_NE(free_, nullptr);
        ASSERT_NE(free_->resident(), nullptr);
    }

    std::shared_ptr<Backend> backend_;
    std::unique_ptr<Plan> free_; // planned without a capacity
};

TEST_F(MemoryFit, TheUnconstrainedPlanReplicatesTheWeights) {
    // The premise of the tests below: without a capacity, every device holds every weight.
    for (const std::string weight : {"w1", "w2"}) {
        EXPECT_EQ(copies_of(free_->resident()->layout(), weight), kDevices) << weight;
    }
    const int64_t weight_bytes = 2 * 128 * 32 * 4;
    for (const DeviceNeed& need : free_->memory_need()) {
        EXPECT_EQ(need.weights, weight_bytes) << "device " << need.device;
        EXPECT_EQ(need.resident, weight_bytes) << "device " << need.device;
        EXPECT_EQ(need.activations, free_->peak_bytes()[need.device]) << "device " << need.device;
    }
    EXPECT_FALSE(free_->weights_unreplicated());
}

TEST_F(MemoryFit, AReplicatingPlanIsForcedToShardAndMatchesTheReference) {
    const int64_t capacity = largest_need(*free_).total() - 1;
    std::unique_ptr<Plan> plan = compiled(kShape, options_for(capacity), backend_);
    ASSERT_NE(plan, nullptr);
    EXPECT_TRUE(plan->weights_unreplicated());
    for (const DeviceNeed& need : plan->memory_need()) {
        EXPECT_LE(need.total(), capacity) << "device " << need.device;
    }
    // Each weight is held once over the devices, a quarter on each.
    const physical::ResidentLayout& layout = plan->resident()->layout();
    for (const std::string weight : {"w1", "w2"}) {
        EXPECT_EQ(copies_of(layout, weight), 1.0) << weight;
    }
    for (int device = 0; device < kDevices; ++device) {
        EXPECT_EQ(layout.arena_bytes[device], 2 * 128 * 32 * 4 / kDevices) << device;
    }
    EXPECT_LE(run_and_compare(*plan, random_inputs(plan->graph(), kSeed)), 1e-5);
    EXPECT_THAT(plan->explain(), HasSubstr("planned again with its weights unreplicated"));
    EXPECT_THAT(plan->explain(), HasSubstr(absl::StrCat("device memory: ", capacity, " B")));
}

TEST_F(MemoryFit, APlanThatFitsIsThePlanWithoutACapacity) {
    for (int64_t capacity : {largest_need(*free_).total(), int64_t{1} << 40}) {
        std::unique_ptr<Plan> plan = compiled(kShape, options_for(capacity), backend_);
        ASSERT_NE(plan, nullptr);
        EXPECT_FALSE(plan->weights_unreplicated()) << capacity;
        EXPECT_EQ(plan->record(), free_->record()) << capacity;
        EXPECT_EQ(plan->exec_graph().to_string(), free_->exec_graph().to_string()) << capacity;
    }
    // A larger model, its weights not resident: the same.
    const std::string llama =
        "llama-block:seqs=2x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32";
    CompileOptions options = options_for(0);
    options.resident_inputs.clear();
    std::unique_ptr<Plan> unlimited = compiled(llama, options, backend_);
    ASSERT_NE(unlimited, nullptr);
    options.device_memory_bytes = largest_need(*unlimited).total();
    std::unique_ptr<Plan> limited = compiled(llama, options, backend_);
    ASSERT_NE(limited, nullptr);
    EXPECT_EQ(limited->record(), unlimited->record());
}

TEST_F(MemoryFit, APlanThatCannotFitIsRefusedNamingTheDeviceAndBothByteCounts) {
    std::unique_ptr<Plan> sharded =
        compiled(kShape, options_for(largest_need(*free_).total() - 1), backend_);
    ASSERT_NE(sharded, nullptr);
    const int64_t capacity = largest_need(*sharded).total() - 1;
    absl::StatusOr<std::unique_ptr<Plan>> refused =
        Plan::compile(build(kShape), options_for(capacity), backend_);
    ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    const std::string message(refused.status().message());
    std::cout << message << "\n";
    // What the replicating plan needed, then what the sharded one needs: weights and
    // activations apart, and the bytes the device has.
    EXPECT_THAT(message, HasSubstr(need_text(largest_need(*free_), capacity)));
    EXPECT_THAT(message, HasSubstr(need_text(largest_need(*sharded), capacity)));
    EXPECT_THAT(message, HasSubstr("w1, w2 unreplicated"));
}

TEST_F(MemoryFit, APinnedPlanIsOnlyChecked) {
    // The replicated layout is fixed once defined: a later shape that does not fit with it is
    // refused, one that fits is planned as without a capacity.
    CompileOptions pinned = options_for(0);
    pinned.resident = free_->resident();
    const std::string other = "ffn:tokens=128,d_model=128,d_ff=32";
    std::unique_ptr<Plan> unlimited = compiled(other, pinned, backend_);
    ASSERT_NE(unlimited, nullptr);
    ASSERT_TRUE(unlimited->is_resident("w1"));
    pinned.device_memory_bytes = largest_need(*unlimited).total();
    std::unique_ptr<Plan> fits = compiled(other, pinned, backend_);
    ASSERT_NE(fits, nullptr);
    EXPECT_EQ(fits->record(), unlimited->record());
    pinned.device_memory_bytes = largest_need(*unlimited).total() - 1;
    absl::StatusOr<std::unique_ptr<Plan>> refused = Plan::compile(build(other), pinned, backend_);
    ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(),
                HasSubstr(need_text(largest_need(*unlimited), pinned.device_memory_bytes)));
    EXPECT_THAT(refused.status().message(), HasSubstr("model's layout"));
}

TEST_F(MemoryFit, RestoreChecksTheRecordedPlan) {
    const int64_t capacity = largest_need(*free_).total() - 1;
    absl::StatusOr<std::unique_ptr<Plan>> refused =
        Plan::restore(build(kShape), options_for(capacity), free_->record(), backend_);
    ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr(need_text(largest_need(*free_), capacity)));

    std::unique_ptr<Plan> sharded = compiled(kShape, options_for(capacity), backend_);
    ASSERT_NE(sharded, nullptr);
    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(kShape), options_for(capacity), sharded->record(), backend_);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->exec_graph().to_string(), sharded->exec_graph().to_string());
}

TEST_F(MemoryFit, TheDefiningCompileMadeAgainFindsTheShardedLayout) {
    // After a restart the sharded layout comes back from its record, and the compile that
    // defined it is made again against it: with the capacity it had, or with none.
    const int64_t capacity = largest_need(*free_).total() - 1;
    std::unique_ptr<Plan> sharded = compiled(kShape, options_for(capacity), backend_);
    ASSERT_NE(sharded, nullptr);
    absl::StatusOr<physical::ResidentLayout> layout = physical::parse_resident_layout_record(
        physical::resident_layout_record(sharded->resident()->layout()));
    ASSERT_TRUE(layout.ok()) << layout.status();
    absl::StatusOr<std::shared_ptr<ResidentWeights>> weights =
        ResidentWeights::allocate(*layout, *backend_);
    ASSERT_TRUE(weights.ok()) << weights.status();
    for (int64_t again_capacity : {capacity, int64_t{0}}) {
        CompileOptions again = options_for(again_capacity);
        again.resident = *weights;
        again.resident_defines = true;
        std::unique_ptr<Plan> plan = compiled(kShape, again, backend_);
        ASSERT_NE(plan, nullptr) << again_capacity;
        EXPECT_EQ(plan->resident(), *weights);
        EXPECT_EQ(plan->exec_graph().to_string(), sharded->exec_graph().to_string());
        EXPECT_LE(run_and_compare(*plan, random_inputs(plan->graph(), kSeed + 1)), 1e-5);
    }
}

TEST_F(MemoryFit, TheTimeObjectivesShardTheWeightsToo) {
    for (logical::Objective objective : {logical::Objective::time, logical::Objective::search}) {
        SCOPED_TRACE(logical::objective_name(objective));
        CompileOptions options = options_for(largest_need(*free_).total() - 1);
        options.objective = objective;
        options.synthesis_iterations = 5;
        std::unique_ptr<Plan> plan = compiled(kShape, options, backend_);
        ASSERT_NE(plan, nullptr);
        EXPECT_TRUE(plan->weights_unreplicated());
        for (const DeviceNeed& need : plan->memory_need()) {
            EXPECT_LE(need.total(), options.device_memory_bytes) << "device " << need.device;
        }
        EXPECT_LE(run_and_compare(*plan, random_inputs(plan->graph(), kSeed + 2)), 1e-5);
    }
}

TEST_F(MemoryFit, InstancesAreSizedToTheMemoryBesideTheWeights) {
    // Per device: the resident weights once, then one instance's arenas per instance.
    int64_t two_fit = 0;
    for (const DeviceNeed& need : free_->memory_need()) {
        two_fit = std::max(two_fit, need.resident + 2 * (need.total() - need.resident));
    }
    struct Case {
        int asked;
        int64_t capacity;
        int expected;
    };
    const Case cases[] = {
        {0, 0, kInstancesWithoutCapacity}, // auto without a capacity
        {0, int64_t{1} << 40, kMaxAutoInstances},
        {0, two_fit, 2},
        {0, two_fit - 1, 1},
        {3, 0, 3}, // as asked without a capacity
        {3, int64_t{1} << 40, 3},
        {3, two_fit, 2}, // lowered to what fits
        {1, two_fit, 1},
    };
    for (const Case& c : cases) {
        CompileOptions options = options_for(c.capacity);
        options.instances = c.asked;
        std::unique_ptr<Plan> plan = compiled(kShape, options, backend_);
        ASSERT_NE(plan, nullptr);
        EXPECT_EQ(plan->instances(), c.expected) << c.asked << " at " << c.capacity;
        EXPECT_EQ(plan->record(), free_->record()) << "instances change no decision";
    }
}

// The candidate filter on 4 devices (a logical-level rule, whatever the memory plan).
constexpr int kCandidateDevices = 4;

TEST(KeepUnreplicated, LeavesOnlyCandidatesThatHoldTheWeightOnce) {
    const ir::Graph graph = build(kShape);
    const ir::TensorId w1 = *graph.find_tensor("w1");
    absl::StatusOr<logical::GraphCandidates> all =
        logical::enumerate_graph(graph, kCandidateDevices);
    ASSERT_TRUE(all.ok()) << all.status();
    const ir::NodeId consumer = graph.tensor(*graph.find_tensor("h")).producer;
    // Data parallel (tokens split 4 ways) holds w1 on every device: three copies too many.
    bool found_data_parallel = false;
    for (const logical::Candidate& candidate : (*all)[consumer]) {
        if (candidate.counts == std::vector<int64_t>{kCandidateDevices, 1, 1}) {
            found_data_parallel = true;
            EXPECT_EQ(logical::replicated_bytes(graph, consumer, candidate, {w1}),
                      3.0 * static_cast<double>(graph.tensor(w1).type.bytes()));
        }
    }
    EXPECT_TRUE(found_data_parallel);
    logical::GraphCandidates kept = *all;
    logical::keep_unreplicated(graph, {w1}, kept);
    ASSERT_FALSE(kept[consumer].empty());
    EXPECT_LT(kept[consumer].size(), (*all)[consumer].size());
    for (const logical::Candidate& candidate : kept[consumer]) {
        EXPECT_EQ(logical::replicated_bytes(graph, consumer, candidate, {w1}), 0.0);
    }
    // Operators that do not read w1 keep every candidate.
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        if (node != consumer) {
            EXPECT_EQ(kept[node].size(), (*all)[node].size()) << graph.node(node).name;
        }
    }
}

TEST(KeepUnreplicated, KeepsTheLeastReplicatingWhereNoneHoldsTheWeightOnce) {
    // w1 [d_model=2, d_ff=1] cannot be cut in 4: every candidate on 4 devices reads some block
    // of it twice (tokens/2 x d_model/2 holds it twice over, data parallel four times).
    const ir::Graph graph = build("ffn:tokens=8,d_model=2,d_ff=1");
    const ir::TensorId w1 = *graph.find_tensor("w1");
    absl::StatusOr<logical::GraphCandidates> all =
        logical::enumerate_graph(graph, kCandidateDevices);
    ASSERT_TRUE(all.ok()) << all.status();
    const ir::NodeId consumer = graph.tensor(*graph.find_tensor("h")).producer;
    double least = -1.0;
    for (const logical::Candidate& candidate : (*all)[consumer]) {
        const double bytes = logical::replicated_bytes(graph, consumer, candidate, {w1});
        least = least < 0.0 ? bytes : std::min(least, bytes);
    }
    ASSERT_GT(least, 0.0) << "every candidate replicates w1";
    logical::GraphCandidates kept = *all;
    logical::keep_unreplicated(graph, {w1}, kept);
    ASSERT_FALSE(kept[consumer].empty());
    for (const logical::Candidate& candidate : kept[consumer]) {
        EXPECT_EQ(logical::replicated_bytes(graph, consumer, candidate, {w1}), least);
    }
}

} // namespace
} // namespace einsummable::runtime
