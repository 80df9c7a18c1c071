// Resident inputs (runtime/resident_weights.h) and instances (CompileOptions::instances) on the
// CPU backend: plans of one model at several shapes read one copy of the weights in place,
// agree with the double-precision reference, see a weight rewritten through any of them, and
// restore from their records; a plan's instances run requests at once.

#include <algorithm>
#include <iostream>
#include <map>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <stop_token>
#include <thread>

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

constexpr uint64_t kSeed = 20261202;

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

// Every input but the activations `x` is a weight.
std::set<std::string> weights_of(const ir::Graph& graph) {
    std::set<std::string> weights;
    for (ir::TensorId id : graph.inputs()) {
        if (graph.tensor(id).name != "x") {
            weights.insert(graph.tensor(id).name);
        }
    }
    return weights;
}

using testing::compare_to_reference;
using testing::random_values;
using testing::Values;

Values random_inputs(const ir::Graph& graph, uint64_t seed) {
    std::mt19937_64 rng(seed);
    Values values;
    for (ir::TensorId id : graph.inputs()) {
        values[graph.tensor(id).name] = random_values(graph.tensor(id).type.elements(), rng);
    }
    return values;
}

// Loads the activations (and, when `with_weights`, the weights) of `inputs`, executes and
// compares.
double run(Plan& plan, const Values& inputs, bool with_weights) {
    Plan::Lease lease = plan.acquire();
    for (const auto& [name, values] : inputs) {
        if (name == "x" || with_weights) {
            EXPECT_TRUE(lease.load(name, values).ok()) << name;
        }
    }
    absl::Status executed = lease.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    return compare_to_reference(plan, lease, inputs);
}

// Options for an FFN whose weights w1 and w2 are resident, on `devices` devices.
CompileOptions ffn_options(int devices) {
    CompileOptions options;
    options.devices = devices;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"w1", "w2"};
    return options;
}

struct Model {
    std::string name; // two shapes of it
    std::string first;
    std::string second;
    int devices;
};

class ResidentPlans : public ::testing::TestWithParam<Model> {};

TEST_P(ResidentPlans, ShareOneCopyOfTheWeightsAndMatchTheReference) {
    const Model& model = GetParam();
    std::cout << "seed " << kSeed << "\n";
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({model.devices, 1});
    CompileOptions options;
    options.devices = model.devices;
    options.seed = kSeed;
    options.synthesis_iterations = 20;

    ir::Graph first_graph = build(model.first);
    options.resident_inputs = weights_of(first_graph);
    absl::StatusOr<std::unique_ptr<Plan>> first =
        Plan::compile(std::move(first_graph), options, backend);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_NE((*first)->resident(), nullptr);
    const physical::ResidentLayout& layout = (*first)->resident()->layout();
    for (const std::string& weight : options.resident_inputs) {
        EXPECT_TRUE((*first)->is_resident(weight)) << weight;
        EXPECT_EQ((*first)->exec_graph().input_blocks.count(weight), 0u) << weight;
        EXPECT_TRUE(layout.tensors.count(weight)) << weight;
    }
    EXPECT_FALSE((*first)->is_resident("x"));

    CompileOptions pinned = options;
    pinned.resident = (*first)->resident();
    absl::StatusOr<std::unique_ptr<Plan>> second =
        Plan::compile(build(model.second), pinned, backend);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ((*second)->resident(), (*first)->resident());
    // The pinned plan reads every weight through an exchange from its resident blocks; where
    // it reads one in another tiling than the layout's, its logical cost includes moving it.
    const ir::Graph& second_graph = (*second)->graph();
    for (const std::string& weight : options.resident_inputs) {
        EXPECT_TRUE((*second)->is_resident(weight)) << weight;
        EXPECT_EQ((*second)->exec_graph().input_blocks.count(weight), 0u) << weight;
        const ir::TensorId id = *second_graph.find_tensor(weight);
        int exchanges = 0;
        for (const physical::OperatorPlacement& op : (*second)->physical_plan().operators) {
            for (const physical::Exchange& exchange : op.exchanges) {
                if (exchange.tensor != id) {
                    continue;
                }
                ++exchanges;
                const logical::OperatorPlan& chosen = (*second)->logical_plan().operators[op.node];
                const bool same_tiling = chosen.choice.input_blocks[exchange.input_idx] ==
                                         layout.tensors.at(weight).tiling();
                if (!same_tiling) {
                    EXPECT_GE(chosen.cost.bytes.repartition,
                              static_cast<double>(second_graph.tensor(id).type.bytes()))
                        << weight;
                }
            }
        }
        EXPECT_GT(exchanges, 0) << weight;
    }

    // The weights take their bytes once: in neither plan's arenas, once in the resident memory.
    int64_t weight_bytes = 0;
    for (const std::string& weight : options.resident_inputs) {
        const ir::Graph& graph = (*first)->graph();
        weight_bytes += graph.tensor(*graph.find_tensor(weight)).type.bytes();
    }
    EXPECT_GE(layout.total_bytes(), weight_bytes);
    for (const Plan* plan : {first->get(), second->get()}) {
        for (const physical::Buffer& buffer : plan->exec_graph().buffers) {
            if (options.resident_inputs.count(buffer.tensor) && buffer.persistent) {
                EXPECT_TRUE(buffer.resident) << buffer.tensor;
            }
        }
    }

    // Weights loaded through the first plan serve the second; both agree with the reference.
    const Values first_inputs = random_inputs((*first)->graph(), kSeed);
    EXPECT_LE(run(**first, first_inputs, /*with_weights=*/true), 1e-5);
    Values second_inputs = random_inputs((*second)->graph(), kSeed + 1);
    for (const std::string& weight : options.resident_inputs) {
        second_inputs[weight] = first_inputs.at(weight);
    }
    EXPECT_LE(run(**second, second_inputs, /*with_weights=*/false), 1e-5);

    // A weight rewritten through the second plan is what the first computes with next.
    Values rewritten = first_inputs;
    std::mt19937_64 rng(kSeed + 2);
    for (const std::string& weight : options.resident_inputs) {
        rewritten[weight] = random_values(static_cast<int64_t>(rewritten[weight].size()), rng);
        ASSERT_TRUE((*second)->load(weight, rewritten[weight]).ok());
    }
    EXPECT_LE(run(**first, rewritten, /*with_weights=*/false), 1e-5);
    EXPECT_GT(run(**first, first_inputs, /*with_weights=*/false), 1e-3)
        << "the first plan still computes with the old weights";

    // The pinned plan restores from its record against the same resident weights.
    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(model.second), pinned, (*second)->record(), backend);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->exec_graph().to_string(), (*second)->exec_graph().to_string());
    for (const std::string& weight : options.resident_inputs) {
        second_inputs[weight] = rewritten.at(weight);
    }
    EXPECT_LE(run(**restored, second_inputs, /*with_weights=*/false), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    Models, ResidentPlans,
    ::testing::Values(
        Model{"ffn", "ffn:tokens=8,d_model=16,d_ff=40", "ffn:tokens=96,d_model=16,d_ff=40", 4},
        Model{"ffn_p3", "ffn:tokens=48,d_model=16,d_ff=40", "ffn:tokens=6,d_model=16,d_ff=40", 3},
        Model{"llama",
              "llama-block:seqs=2x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32",
              "llama-block:seqs=3x16,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32",
              4}),
    [](const ::testing::TestParamInfo<Model>& info) { return info.param.name; });

TEST(ResidentPlans, APlanForAnotherDeviceCountKeepsItsOwnCopies) {
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({4, 1});
    CompileOptions options = ffn_options(4);
    absl::StatusOr<std::unique_ptr<Plan>> four =
        Plan::compile(build("ffn:tokens=16,d_model=16,d_ff=40"), options, backend);
    ASSERT_TRUE(four.ok()) << four.status();
    CompileOptions two = options;
    two.devices = 2;
    two.resident = (*four)->resident();
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=16,d_model=16,d_ff=40"), two, backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->resident(), nullptr);
    EXPECT_FALSE((*plan)->is_resident("w1"));
    EXPECT_EQ((*plan)->exec_graph().input_blocks.count("w1"), 1u);
    EXPECT_LE(run(**plan, random_inputs((*plan)->graph(), kSeed), /*with_weights=*/true), 1e-5);
}

TEST(ResidentPlans, ARunWaitsForItsWeights) {
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({2, 1});
    CompileOptions options = ffn_options(2);
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=16,d_model=16,d_ff=40"), options, backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Values inputs = random_inputs((*plan)->graph(), kSeed);
    ASSERT_TRUE((*plan)->load("x", inputs.at("x")).ok());
    ASSERT_TRUE((*plan)->load("w1", inputs.at("w1")).ok());
    absl::Status status = (*plan)->execute();
    EXPECT_TRUE(absl::IsFailedPrecondition(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr("'w2'"));
    // A wrong size names the resident tensor.
    status = (*plan)->load_bytes("w2", std::vector<std::byte>(3));
    EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr("'w2'"));
}

TEST(ResidentPlans, TheBackendRefusesAGraphWithResidentBuffersAndNoResidentMemory) {
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({2, 1});
    CompileOptions options = ffn_options(2);
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=16,d_model=16,d_ff=40"), options, backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<std::unique_ptr<Executable>> executable =
        backend->prepare((*plan)->exec_graph());
    EXPECT_TRUE(absl::IsInvalidArgument(executable.status())) << executable.status();
    EXPECT_THAT(executable.status().message(), HasSubstr("resident"));
    // Too small a resident memory is refused too, naming the device.
    absl::StatusOr<std::shared_ptr<ResidentMemory>> small = backend->allocate_resident({64, 64});
    ASSERT_TRUE(small.ok());
    executable = backend->prepare((*plan)->exec_graph(), *small);
    EXPECT_TRUE(absl::IsInvalidArgument(executable.status())) << executable.status();
    EXPECT_THAT(executable.status().message(), HasSubstr("device"));
}

TEST(ResidentPlans, TheDefiningCompileMadeAgainReadsTheGivenWeights) {
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({4, 1});
    CompileOptions options = ffn_options(4);
    const std::string shape = "ffn:tokens=24,d_model=16,d_ff=40";
    absl::StatusOr<std::unique_ptr<Plan>> first = Plan::compile(build(shape), options, backend);
    ASSERT_TRUE(first.ok()) << first.status();
    // After a restart the layout comes back from its record; the defining shape is then made
    // (or restored) again against it and reads it in place.
    absl::StatusOr<physical::ResidentLayout> layout = physical::parse_resident_layout_record(
        physical::resident_layout_record((*first)->resident()->layout()));
    ASSERT_TRUE(layout.ok()) << layout.status();
    absl::StatusOr<std::shared_ptr<ResidentWeights>> weights =
        ResidentWeights::allocate(*layout, *backend);
    ASSERT_TRUE(weights.ok());
    CompileOptions again = options;
    again.resident = *weights;
    again.resident_defines = true;
    for (bool restore : {false, true}) {
        absl::StatusOr<std::unique_ptr<Plan>> plan =
            restore ? Plan::restore(build(shape), again, (*first)->record(), backend)
                    : Plan::compile(build(shape), again, backend);
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_EQ((*plan)->resident(), *weights);
        EXPECT_EQ((*plan)->exec_graph().to_string(), (*first)->exec_graph().to_string());
        EXPECT_LE(run(**plan, random_inputs((*plan)->graph(), kSeed), /*with_weights=*/true), 1e-5);
    }
    // Another shape's plan cannot pose as the definer of this layout.
    absl::StatusOr<std::unique_ptr<Plan>> other =
        Plan::compile(build("ffn:tokens=4,d_model=16,d_ff=40"), again, backend);
    if (!other.ok()) {
        EXPECT_TRUE(absl::IsFailedPrecondition(other.status())) << other.status();
    } else {
        EXPECT_EQ((*other)->exec_graph().to_string().find("resident arena") != std::string::npos,
                  true);
    }
}

TEST(ResidentLayoutRecord, RoundTripsAndNamesTheBadLine) {
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({3, 1});
    CompileOptions options = ffn_options(3);
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=12,d_model=16,d_ff=40"), options, backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const physical::ResidentLayout& layout = (*plan)->resident()->layout();
    const std::string record = physical::resident_layout_record(layout);
    absl::StatusOr<physical::ResidentLayout> parsed =
        physical::parse_resident_layout_record(record);
    ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << record;
    EXPECT_EQ(*parsed, layout);
    EXPECT_EQ(parsed->fingerprint(), layout.fingerprint());

    auto refused = [](const std::string& text, absl::string_view what) {
        absl::StatusOr<physical::ResidentLayout> bad = physical::parse_resident_layout_record(text);
        EXPECT_TRUE(absl::IsInvalidArgument(bad.status())) << text;
        EXPECT_THAT(bad.status().message(), HasSubstr(what)) << text;
    };
    refused("not a layout\n", "line 1");
    refused(record.substr(0, record.size() - 4), "truncated");
    const size_t block = record.find("block ");
    std::string outside = record;
    outside.replace(block, 7, "block 7");
    refused(outside,
            absl::StrCat("line ", std::count(record.begin(), record.begin() + block, '\n') + 1));
}

TEST(PinnedInputs, AnotherTilingPaysTheRepartitionTheSameTilingNothing) {
    const ir::Graph graph = build("ffn:tokens=16,d_model=16,d_ff=40");
    const ir::TensorId w1 = *graph.find_tensor("w1");
    absl::StatusOr<logical::GraphCandidates> free = logical::enumerate_graph(graph, 4);
    ASSERT_TRUE(free.ok());
    // Pin w1 to the blocks the first candidate of its consumer reads.
    ir::NodeId consumer = -1;
    int slot = -1;
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        for (size_t i = 0; i < graph.node(node).inputs.size(); ++i) {
            if (graph.node(node).inputs[i] == w1) {
                consumer = node;
                slot = static_cast<int>(i);
            }
        }
    }
    ASSERT_GE(consumer, 0);
    const ir::Tiling tiling = (*free)[consumer][0].input_blocks[slot];
    logical::GraphCandidates pinned = *free;
    logical::add_pinned_repartition(graph, {{w1, tiling}}, pinned);
    int same = 0;
    int other = 0;
    for (size_t c = 0; c < pinned[consumer].size(); ++c) {
        const double extra = pinned[consumer][c].local.bytes.repartition -
                             (*free)[consumer][c].local.bytes.repartition;
        if ((*free)[consumer][c].input_blocks[slot] == tiling) {
            EXPECT_EQ(extra, 0.0);
            ++same;
        } else {
            EXPECT_EQ(extra, static_cast<double>(graph.tensor(w1).type.bytes()));
            ++other;
        }
    }
    EXPECT_GT(same, 0);
    EXPECT_GT(other, 0);
}

TEST(Instances, SeveralRequestsRunAtOnceAndEachAnswerIsRight) {
    std::cout << "seed " << kSeed << "\n";
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({2, 1});
    CompileOptions options = ffn_options(2);
    options.instances = 3;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=32,d_model=16,d_ff=40"), options, backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_EQ((*plan)->instances(), 3);
    // Three instances' arenas, the weights once.
    const std::vector<int64_t> one = (*plan)->peak_bytes();
    const std::vector<int64_t> all = (*plan)->allocated_bytes();
    for (size_t d = 0; d < one.size(); ++d) {
        EXPECT_GE(all[d], 3 * one[d]);
    }
    const Values weights = random_inputs((*plan)->graph(), kSeed);
    ASSERT_TRUE((*plan)->load("w1", weights.at("w1")).ok());
    ASSERT_TRUE((*plan)->load("w2", weights.at("w2")).ok());
    {
        // Three leases at once: three distinct instances.
        Plan::Lease a = (*plan)->acquire();
        Plan::Lease b = (*plan)->acquire();
        Plan::Lease c = (*plan)->acquire();
        EXPECT_EQ(std::set<int>({a.instance(), b.instance(), c.instance()}).size(), 3u);
    }
    std::vector<std::thread> threads;
    std::vector<double> errors(6, 1e9);
    for (int t = 0; t < 6; ++t) {
        threads.emplace_back([&, t] {
            Values inputs = weights;
            std::mt19937_64 rng(kSeed + 10 + t);
            inputs["x"] = random_values(static_cast<int64_t>(weights.at("x").size()), rng);
            for (int round = 0; round < 5; ++round) {
                errors[t] = std::max(round == 0 ? 0.0 : errors[t],
                                     run(**plan, inputs, /*with_weights=*/false));
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (int t = 0; t < 6; ++t) {
        EXPECT_LE(errors[t], 1e-5) << "thread " << t;
    }
    EXPECT_EQ((*plan)->executions(), 30);
}

// Waits (yielding) until `plan` has `count` callers waiting for an instance: the test's own
// sequencing, so that the waiters' arrival order is known; no time bound.
void wait_for_waiters(const Plan& plan, int count) {
    while (plan.waiting() < count) {
        std::this_thread::yield();
    }
}

absl::StatusOr<std::unique_ptr<Plan>> ffn_plan(int instances) {
    CompileOptions options = ffn_options(2);
    options.instances = instances;
    return Plan::compile(build("ffn:tokens=8,d_model=16,d_ff=24"), options,
                         cpu::make_cpu_backend({2, 1}));
}

TEST(Instances, WaitersAreServedInArrivalOrderAndEachIsWokenOnce) {
    absl::StatusOr<std::unique_ptr<Plan>> plan = ffn_plan(1);
    ASSERT_TRUE(plan.ok()) << plan.status();
    constexpr int kWaiters = 12;
    std::mutex order_mutex;
    std::vector<int> order;
    std::vector<std::thread> threads;
    {
        Plan::Lease held = (*plan)->acquire();
        for (int t = 0; t < kWaiters; ++t) {
            threads.emplace_back([&, t] {
                Plan::Lease lease = (*plan)->acquire();
                std::lock_guard<std::mutex> lock(order_mutex);
                order.push_back(t);
            });
            wait_for_waiters(**plan, t + 1); // waiter t is queued before t + 1 starts
        }
        EXPECT_EQ((*plan)->waiter_wakeups(), 0);
    } // releases the instance: each waiter in turn hands it to the next
    for (std::thread& thread : threads) {
        thread.join();
    }
    std::vector<int> arrival(kWaiters);
    std::iota(arrival.begin(), arrival.end(), 0);
    EXPECT_EQ(order, arrival);
    // One wake-up per waiter, when the instance was handed to it. A condition variable shared
    // by the waiters, notified on every release, wakes every remaining waiter each time (twice
    // as many wake-ups here, in a build that did), and whichever runs first takes the instance.
    EXPECT_EQ((*plan)->waiter_wakeups(), kWaiters);
    EXPECT_EQ((*plan)->waiting(), 0);
}

TEST(Instances, AFreedInstanceGoesToTheFirstWaiterThatCanTakeIt) {
    absl::StatusOr<std::unique_ptr<Plan>> plan = ffn_plan(2);
    ASSERT_TRUE(plan.ok()) << plan.status();
    const Values inputs = random_inputs((*plan)->graph(), kSeed);
    std::optional<Plan::Lease> first((*plan)->acquire());
    std::optional<Plan::Lease> second((*plan)->acquire());
    ASSERT_EQ(first->instance(), 0);
    ASSERT_EQ(second->instance(), 1);
    // The plan's own calls run on instance 0; this one queues first, then a lease for any.
    std::thread on_zero([&] { EXPECT_TRUE((*plan)->load("x", inputs.at("x")).ok()); });
    wait_for_waiters(**plan, 1);
    int any_instance = -1;
    std::thread on_any([&] { any_instance = (*plan)->acquire().instance(); });
    wait_for_waiters(**plan, 2);
    second.reset(); // instance 1: not for the first waiter, so the second takes it
    on_any.join();
    EXPECT_EQ(any_instance, 1);
    EXPECT_EQ((*plan)->waiting(), 1);
    first.reset(); // instance 0: the first waiter's
    on_zero.join();
    EXPECT_EQ((*plan)->waiting(), 0);
    // Both are free again.
    Plan::Lease a = (*plan)->acquire();
    Plan::Lease b = (*plan)->acquire();
    EXPECT_NE(a.instance(), b.instance());
}

TEST(Instances, AStoppedWaiterLeavesTheQueue) {
    absl::StatusOr<std::unique_ptr<Plan>> plan = ffn_plan(1);
    ASSERT_TRUE(plan.ok()) << plan.status();
    std::optional<Plan::Lease> held((*plan)->acquire());
    EXPECT_FALSE((*plan)->try_acquire().has_value());
    std::stop_source stop;
    bool got = true;
    std::thread waiter([&] { got = (*plan)->acquire(stop.get_token()).has_value(); });
    wait_for_waiters(**plan, 1);
    stop.request_stop(); // wakes the waiter, which leaves while the instance is still held
    waiter.join();
    EXPECT_FALSE(got);
    EXPECT_EQ((*plan)->waiting(), 0);
    EXPECT_EQ((*plan)->waiter_wakeups(), 1);
    // The release finds no waiter: the instance is free, not handed to the one that left.
    held.reset();
    std::optional<Plan::Lease> again = (*plan)->try_acquire();
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->instance(), 0);
    // A stop requested before the call does not keep it from a free instance.
    again.reset();
    EXPECT_TRUE((*plan)->acquire(stop.get_token()).has_value());
}

} // namespace
} // namespace einsummable::runtime
