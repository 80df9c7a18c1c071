#include <algorithm>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/simulator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kGB = 1e9;

// Times agree to rounding: the simulator sums a handful of doubles per event.
#define EXPECT_TIME(actual, expected) EXPECT_NEAR((actual), (expected), 1e-12 * (expected) + 1e-18)

Topology a100() {
    return *builtin_topology("dgx-a100");
}

Topology v100() {
    return *builtin_topology("dgx-v100");
}

SimulationResult run(const Topology& topology, const std::vector<SimTask>& tasks) {
    absl::StatusOr<SimulationResult> result = simulate(topology, tasks);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : SimulationResult{};
}

TEST(Simulator, NoTasks) {
    const SimulationResult result = run(a100(), {});
    EXPECT_EQ(result.makespan_s, 0.0);
    EXPECT_TRUE(result.trace.empty());
}

TEST(Simulator, OneTransferTakesLatencyPlusBytesOverBandwidth) {
    const Topology topology = a100();
    const SimulationResult result = run(topology, {transfer_task(0, 1, kGB, {}, "A")});
    ASSERT_EQ(result.trace.size(), 1u);
    const TaskTrace& trace = result.trace[0];
    EXPECT_EQ(trace.task, 0);
    EXPECT_EQ(trace.start, 0.0);
    EXPECT_TIME(trace.end, 2e-6 + kGB / 300e9);
    EXPECT_EQ(trace.bytes, kGB);
    EXPECT_THAT(trace.resources, ElementsAre("egress(0)", "ingress(1)"));
    EXPECT_EQ(result.makespan_s, trace.end);
}

TEST(Simulator, TwoFlowsIntoOneGpuShareItsIngress) {
    const Topology topology = a100();
    const double bytes = 0.5 * kGB, bandwidth = 300e9, latency = 2e-6;
    const SimulationResult result =
        run(topology, {transfer_task(0, 2, bytes), transfer_task(1, 2, bytes)});
    for (const TaskTrace& trace : result.trace) {
        EXPECT_TIME(trace.end, latency + 2 * bytes / bandwidth);
    }
    // Out of one GPU into two: the same by symmetry (egress).
    const SimulationResult out =
        run(topology, {transfer_task(2, 0, bytes), transfer_task(2, 1, bytes)});
    for (const TaskTrace& trace : out.trace) {
        EXPECT_TIME(trace.end, latency + 2 * bytes / bandwidth);
    }
    // Disjoint endpoints do not contend.
    const SimulationResult apart =
        run(topology, {transfer_task(0, 1, bytes), transfer_task(2, 3, bytes)});
    for (const TaskTrace& trace : apart.trace) {
        EXPECT_TIME(trace.end, latency + bytes / bandwidth);
    }
}

// Between two DGX H100 nodes a transfer takes the NIC latency and flows at the NIC's rate;
// transfers out of different GPUs of a node use different NICs (rails) and do not contend, two
// into one GPU share its NIC, and one inside a node runs beside them on the switch.
TEST(Simulator, TransfersBetweenNodesFlowOverTheirGpusNics) {
    const Topology topology = *builtin_topology("dgx-h100-2nodes");
    const double bytes = 0.5 * kGB, nic = 50e9, nic_latency = 5e-6;
    const SimulationResult rails =
        run(topology,
            {transfer_task(0, 8, bytes), transfer_task(1, 9, bytes), transfer_task(2, 3, bytes)});
    EXPECT_TIME(rails.trace[0].end, nic_latency + bytes / nic);
    EXPECT_TIME(rails.trace[1].end, nic_latency + bytes / nic);
    EXPECT_TIME(rails.trace[2].end, 2e-6 + bytes / 450e9);
    EXPECT_THAT(rails.trace[0].resources, ElementsAre("nic-out(0)", "nic-in(8)"));
    const SimulationResult shared =
        run(topology, {transfer_task(0, 8, bytes), transfer_task(1, 8, bytes)});
    for (const TaskTrace& trace : shared.trace) {
        EXPECT_TIME(trace.end, nic_latency + 2 * bytes / nic);
    }
}

TEST(Simulator, MulticastToKDividesTheSourceEgressByK) {
    for (const char* name : {"dgx-a100", "dgx-h100"}) {
        const Topology topology = *builtin_topology(name);
        const double bytes = kGB;
        for (int k = 1; k <= 7; ++k) {
            std::vector<SimTask> tasks;
            for (int dst = 1; dst <= k; ++dst) {
                tasks.push_back(transfer_task(0, dst, bytes));
            }
            const SimulationResult result = run(topology, tasks);
            for (const TaskTrace& trace : result.trace) {
                EXPECT_TIME(trace.end, topology.latency_s() + k * bytes / topology.link_bandwidth())
                    << name << " k=" << k;
            }
        }
    }
}

TEST(Simulator, MaxMinFairnessSpeedsUpTheBigFlowWhenTheSmallOneEnds) {
    const double b = kGB, B = 300e9, L = 2e-6;
    // Both into GPU 2: B/2 each until the small one ends at L + 2b/B; then the big one has b
    // left at full B.
    const SimulationResult result =
        run(a100(), {transfer_task(0, 2, b, {}, "small"), transfer_task(1, 2, 2 * b, {}, "big")});
    EXPECT_TIME(result.trace[0].end, L + 2 * b / B);
    EXPECT_TIME(result.trace[1].end, L + 3 * b / B);
    EXPECT_TIME(result.makespan_s, L + 3 * b / B);
}

TEST(Simulator, MaxMinFairnessGivesUnusedShareToTheUnconstrainedFlow) {
    const double b = kGB, B = 300e9, L = 2e-6;
    // f0: 0->1 and f1: 0->2 share egress(0); f1, f2: 3->2 and f3: 4->2 share ingress(2). The
    // ingress is the bottleneck (B/3 each), so f0 gets the rest of egress(0): 2B/3, not B/2.
    const SimulationResult result = run(a100(), {transfer_task(0, 1, b), transfer_task(0, 2, b),
                                                 transfer_task(3, 2, b), transfer_task(4, 2, b)});
    EXPECT_TIME(result.trace[0].end, L + 1.5 * b / B);
    for (int task : {1, 2, 3}) {
        EXPECT_TIME(result.trace[task].end, L + 3 * b / B);
    }
}

TEST(Simulator, UnlinkedDgx1PairsShareTheBridge) {
    const Topology topology = v100();
    const double b = kGB, bridge = 15.75e9, L = 0.3e-6;
    const SimulationResult one = run(topology, {transfer_task(0, 7, b)});
    EXPECT_THAT(one.trace[0].resources, ElementsAre("pcie-bridge"));
    EXPECT_TIME(one.trace[0].end, L + b / bridge);
    // Two unlinked pairs, and the two directions of one pair: each gets half the bridge.
    for (const auto& [first, second] : std::vector<std::pair<SimTask, SimTask>>{
             {transfer_task(0, 5, b), transfer_task(1, 4, b)},
             {transfer_task(0, 7, b), transfer_task(7, 0, b)}}) {
        const SimulationResult two = run(topology, {first, second});
        for (const TaskTrace& trace : two.trace) {
            EXPECT_TIME(trace.end, L + 2 * b / bridge);
        }
    }
    // Linked pairs: their own link, per direction.
    const SimulationResult linked =
        run(topology, {transfer_task(0, 3, b), transfer_task(3, 0, b), transfer_task(0, 1, b)});
    EXPECT_TIME(linked.trace[0].end, L + b / 50e9);
    EXPECT_TIME(linked.trace[1].end, L + b / 50e9);
    EXPECT_TIME(linked.trace[2].end, L + b / 25e9);
}

TEST(Simulator, RelayThroughANvlinkNeighbourBeatsTheBridge) {
    const Topology topology = v100();
    const double b = kGB, L = 0.3e-6;
    // 0 and 7 have no link; 4 has two links to each (docs/workloads.md "Machines").
    const SimulationResult bridge = run(topology, {transfer_task(0, 7, b)});
    const SimulationResult relay =
        run(topology, {transfer_task(0, 4, b, {}, "0->4"), transfer_task(4, 7, b, {0}, "4->7")});
    EXPECT_TIME(relay.trace[1].start, relay.trace[0].end);
    EXPECT_TIME(relay.makespan_s, 2 * (L + b / 50e9));
    EXPECT_TIME(bridge.makespan_s, L + b / 15.75e9);
    EXPECT_LT(relay.makespan_s, bridge.makespan_s);
    // Through a double and then a single link (0 -> 3 -> 7) it still wins.
    const SimulationResult slow =
        run(topology, {transfer_task(0, 3, b), transfer_task(3, 7, b, {0})});
    EXPECT_TIME(slow.makespan_s, 2 * L + b / 50e9 + b / 25e9);
    EXPECT_LT(slow.makespan_s, bridge.makespan_s);
}

TEST(Simulator, AggregatesRunAtHbmBandwidth) {
    const Topology topology = a100();
    const double b = kGB, hbm = 1555e9;
    const SimulationResult one = run(topology, {aggregate_task(3, b, {}, "sum")});
    EXPECT_EQ(one.trace[0].start, 0.0);
    EXPECT_TIME(one.trace[0].end, b / hbm); // no latency for local work
    EXPECT_THAT(one.trace[0].resources, ElementsAre("hbm(3)"));
    // Two on one GPU share its HBM; one on another GPU and a transfer do not interfere.
    const SimulationResult many = run(topology, {aggregate_task(3, b), aggregate_task(3, b),
                                                 aggregate_task(4, b), transfer_task(3, 4, b)});
    EXPECT_TIME(many.trace[0].end, 2 * b / hbm);
    EXPECT_TIME(many.trace[1].end, 2 * b / hbm);
    EXPECT_TIME(many.trace[2].end, b / hbm);
    EXPECT_TIME(many.trace[3].end, 2e-6 + b / 300e9);
}

TEST(Simulator, OffloadsFlowOverTheirGpusHostLink) {
    const Topology topology = a100();
    const double b = kGB, host = topology.host_bandwidth();
    const SimulationResult one = run(topology, {offload_task(3, b, {}, "y")});
    EXPECT_EQ(one.trace[0].start, 0.0);
    EXPECT_TIME(one.trace[0].end, 2e-6 + b / host);
    EXPECT_THAT(one.trace[0].resources, ElementsAre("host(3)"));
    // Two from one GPU share its link; one from another GPU and a transfer do not interfere.
    const SimulationResult many = run(topology, {offload_task(3, b), offload_task(3, b),
                                                 offload_task(4, b), transfer_task(3, 4, b)});
    EXPECT_TIME(many.trace[0].end, 2e-6 + 2 * b / host);
    EXPECT_TIME(many.trace[1].end, 2e-6 + 2 * b / host);
    EXPECT_TIME(many.trace[2].end, 2e-6 + b / host);
    EXPECT_TIME(many.trace[3].end, 2e-6 + b / 300e9);
}

TEST(Simulator, DependenciesDelayStarts) {
    const Topology topology = a100();
    const double b = kGB, B = 300e9, L = 2e-6, hbm = 1555e9;
    // Reduce two GPUs' parts at GPU 0, then send the result on to GPU 1.
    const std::vector<SimTask> tasks = {
        transfer_task(2, 0, b, {}, "2->0"),         transfer_task(3, 0, 2 * b, {}, "3->0"),
        aggregate_task(0, 3 * b, {0, 1, 0}, "sum"), // a repeated dependency counts once
        transfer_task(0, 1, b, {2}, "0->1"),        aggregate_task(5, b, {}, "independent"),
    };
    const SimulationResult result = run(topology, tasks);
    const double arrivals = L + 3 * b / B; // both into ingress(0): as in the max-min test
    EXPECT_TIME(result.trace[1].end, arrivals);
    EXPECT_TIME(result.trace[2].start, arrivals);
    EXPECT_TIME(result.trace[2].end, arrivals + 3 * b / hbm);
    EXPECT_TIME(result.trace[3].start, result.trace[2].end);
    EXPECT_TIME(result.trace[3].end, result.trace[2].end + L + b / B);
    EXPECT_TIME(result.trace[4].end, b / hbm);
    EXPECT_EQ(result.makespan_s, result.trace[3].end);
}

TEST(Simulator, ZeroByteTasks) {
    const Topology topology = a100();
    const SimulationResult result = run(
        topology, {transfer_task(0, 1, 0.0), aggregate_task(1, 0.0, {0}), aggregate_task(1, 0.0),
                   aggregate_task(2, 0.0, {2}), transfer_task(1, 2, 0.0, {1, 3})});
    EXPECT_EQ(result.trace[0].end, 2e-6); // latency only
    EXPECT_EQ(result.trace[1].start, 2e-6);
    EXPECT_EQ(result.trace[1].end, 2e-6); // immediately
    EXPECT_EQ(result.trace[2].end, 0.0);
    EXPECT_EQ(result.trace[3].end, 0.0);
    EXPECT_EQ(result.trace[4].end, 4e-6);
    // Without latency, a zero-byte transfer takes no time at all.
    const Topology instant = *Topology::make_switch("instant", 2, 1e9, 1e9, 0.0);
    const SimulationResult none =
        run(instant, {transfer_task(0, 1, 0.0), transfer_task(1, 0, 0.0, {0})});
    EXPECT_EQ(none.makespan_s, 0.0);
}

// docs/workloads.md "Lower bounds": all-gather on a non-blocking switch takes (p−1)/p · N/B.
TEST(Simulator, DirectAllGatherOnDgxA100MeetsTheLowerBound) {
    const Topology topology = a100();
    const int p = 8;
    const double N = kGB, B = topology.link_bandwidth();
    std::vector<SimTask> tasks;
    for (int src = 0; src < p; ++src) {
        for (int dst = 0; dst < p; ++dst) {
            if (src != dst) {
                tasks.push_back(transfer_task(src, dst, N / p));
            }
        }
    }
    const SimulationResult result = run(topology, tasks);
    const double bound = topology.latency_s() + (p - 1.0) / p * N / B;
    EXPECT_TIME(result.makespan_s, bound);
    for (const TaskTrace& trace : result.trace) {
        EXPECT_TIME(trace.end, bound);
    }
}

struct BadTasks {
    std::vector<SimTask> tasks;
    std::string message;
};

TEST(Simulator, ErrorsNameTheTask) {
    const std::vector<BadTasks> cases = {
        {{transfer_task(0, 8, 1.0, {}, "far")},
         "task 0 ('far'): destination GPU 8 out of range (dgx-a100 has 8 GPUs)"},
        {{transfer_task(0, 1, 1.0), transfer_task(-1, 1, 1.0)},
         "task 1: source GPU -1 out of range"},
        {{aggregate_task(9, 1.0, {}, "sum")}, "task 0 ('sum'): GPU 9 out of range"},
        {{transfer_task(3, 3, 1.0, {}, "loop")}, "task 0 ('loop'): transfer from GPU 3 to itself"},
        {{transfer_task(0, 1, -1.0, {}, "neg")},
         "task 0 ('neg'): bytes must be finite and not negative"},
        {{aggregate_task(0, std::numeric_limits<double>::infinity())},
         "task 0: bytes must be finite"},
        {{transfer_task(0, 1, 1.0), transfer_task(1, 2, 1.0, {2}, "x")},
         "task 1 ('x'): dependency 2 out of range (2 tasks)"},
        {{transfer_task(0, 1, 1.0, {-1})}, "task 0: dependency -1 out of range"},
        {{transfer_task(0, 1, 1.0, {0}, "self")},
         "dependency cycle: task 0 ('self') waits for task 0 ('self')"},
        {{transfer_task(0, 1, 1.0), transfer_task(1, 2, 1.0, {0, 3}, "a"),
          transfer_task(2, 3, 1.0, {1}, "b"), transfer_task(3, 4, 1.0, {2}, "c"),
          transfer_task(4, 5, 1.0, {1})},
         "dependency cycle: task 1 ('a') waits for task 3 ('c') waits for task 2 ('b') waits for "
         "task 1 ('a')"},
    };
    const Topology topology = a100();
    for (const BadTasks& bad : cases) {
        absl::StatusOr<SimulationResult> result = simulate(topology, bad.tasks);
        ASSERT_FALSE(result.ok()) << bad.message;
        EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(result.status().message(), HasSubstr(bad.message));
    }
}

// Random DAGs on the built-in machines: dependencies are respected, no task is faster than its
// route allows, and no resource moves more than its capacity (the makespan is at least each
// resource's load over its capacity).
TEST(Simulator, RandomDagsRespectCapacitiesAndDependencies) {
    std::mt19937 rng(20240611);
    for (const std::string& name : builtin_topology_names()) {
        const Topology topology = *builtin_topology(name);
        for (int round = 0; round < 30; ++round) {
            const int n = std::uniform_int_distribution<int>(1, 60)(rng);
            std::vector<SimTask> tasks;
            std::uniform_int_distribution<int> gpu(0, topology.num_gpus() - 1);
            for (int index = 0; index < n; ++index) {
                const double bytes = std::uniform_int_distribution<int>(0, 4)(rng) == 0
                                         ? 0.0
                                         : std::uniform_real_distribution<double>(1e3, 1e9)(rng);
                std::vector<int> deps;
                for (int dep = 0; dep < index; ++dep) {
                    if (std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
                        deps.push_back(dep);
                    }
                }
                const int src = gpu(rng);
                if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
                    tasks.push_back(aggregate_task(src, bytes, deps));
                } else {
                    int dst = gpu(rng);
                    while (dst == src) {
                        dst = gpu(rng);
                    }
                    tasks.push_back(transfer_task(src, dst, bytes, deps));
                }
            }
            const SimulationResult result = run(topology, tasks);
            ASSERT_EQ(result.trace.size(), tasks.size());
            std::vector<double> load(topology.resources().size(), 0.0);
            for (int index = 0; index < n; ++index) {
                const SimTask& task = tasks[index];
                const TaskTrace& trace = result.trace[index];
                double start = 0.0;
                for (int dep : task.deps) {
                    start = std::max(start, result.trace[dep].end);
                }
                EXPECT_EQ(trace.start, start);
                const std::vector<int> path = task.kind == SimTask::Kind::transfer
                                                  ? topology.route(task.src_gpu, task.dst_gpu)
                                                  : std::vector<int>{topology.hbm(task.src_gpu)};
                double slowest = std::numeric_limits<double>::infinity();
                for (int r : path) {
                    slowest = std::min(slowest, topology.resources()[r].capacity);
                    load[r] += task.bytes;
                }
                const double latency =
                    task.kind == SimTask::Kind::transfer ? topology.latency_s() : 0.0;
                EXPECT_GE(trace.end, (start + latency + task.bytes / slowest) * (1 - 1e-12));
                EXPECT_LE(trace.end, result.makespan_s);
            }
            for (size_t r = 0; r < load.size(); ++r) {
                EXPECT_GE(result.makespan_s,
                          load[r] / topology.resources()[r].capacity * (1 - 1e-12))
                    << topology.resources()[r].name;
            }
        }
    }
}

// Compute tasks (the whole-plan simulator's kernels): a fixed duration, one at a time per GPU.

TEST(SimulatorCompute, OneTaskTakesItsDuration) {
    const SimulationResult result = run(a100(), {compute_task(3, 5e-3, {}, "k")});
    ASSERT_EQ(result.trace.size(), 1u);
    EXPECT_EQ(result.trace[0].ready, 0.0);
    EXPECT_EQ(result.trace[0].start, 0.0);
    EXPECT_TIME(result.trace[0].end, 5e-3);
    EXPECT_TRUE(result.trace[0].resources.empty());
}

TEST(SimulatorCompute, OneGpuRunsOneAtATimeSmallestIndexFirst) {
    // Both ready at 0 on GPU 0: task 0 runs first, task 1 after it; GPU 1's runs beside them.
    const SimulationResult result =
        run(a100(), {compute_task(0, 2e-3), compute_task(0, 3e-3), compute_task(1, 4e-3)});
    EXPECT_TIME(result.trace[0].end, 2e-3);
    EXPECT_EQ(result.trace[1].ready, 0.0);
    EXPECT_TIME(result.trace[1].start, 2e-3);
    EXPECT_TIME(result.trace[1].end, 5e-3);
    EXPECT_EQ(result.trace[2].start, 0.0);
    EXPECT_TIME(result.trace[2].end, 4e-3);
    EXPECT_TIME(result.makespan_s, 5e-3);
}

TEST(SimulatorCompute, ALaterIndexReadyFirstRunsFirst) {
    // Task 1 is ready at 0; task 0 waits for task 2 on another GPU. The GPU is not held back.
    const SimulationResult result =
        run(a100(), {compute_task(0, 1e-3, {2}), compute_task(0, 3e-3), compute_task(1, 1e-3)});
    EXPECT_EQ(result.trace[1].start, 0.0);
    EXPECT_TIME(result.trace[0].ready, 1e-3);
    EXPECT_TIME(result.trace[0].start, 3e-3); // after task 1
    EXPECT_TIME(result.trace[0].end, 4e-3);
}

TEST(SimulatorCompute, TransfersOverlapComputeAndFeedIt) {
    const Topology topology = a100();
    const double bytes = 0.3 * kGB, hop = 2e-6 + bytes / 300e9; // 1 ms + latency
    // GPU 0 computes for 2 ms while a transfer 1 -> 0 runs; a task needing both follows.
    const SimulationResult result =
        run(topology, {compute_task(0, 2e-3), transfer_task(1, 0, bytes),
                       compute_task(0, 1e-3, {0, 1}), compute_task(1, 1e-3, {1})});
    EXPECT_EQ(result.trace[1].start, 0.0);
    EXPECT_TIME(result.trace[1].end, hop);
    EXPECT_TIME(result.trace[2].start, 2e-3);
    EXPECT_TIME(result.trace[2].end, 3e-3);
    EXPECT_TIME(result.trace[3].start, hop);
    EXPECT_TIME(result.makespan_s, 3e-3);
}

TEST(SimulatorCompute, ZeroDurationFinishesAtOnceAndChains) {
    const SimulationResult result =
        run(a100(), {compute_task(0, 0.0), compute_task(0, 0.0, {0}), compute_task(0, 1e-3, {1})});
    EXPECT_EQ(result.trace[1].end, 0.0);
    EXPECT_TIME(result.makespan_s, 1e-3);
}

TEST(SimulatorCompute, BadDurationIsRefusedNamingTheTask) {
    for (double duration : {-1.0, std::numeric_limits<double>::infinity()}) {
        absl::StatusOr<SimulationResult> result =
            simulate(a100(), {compute_task(0, duration, {}, "mm#0")});
        ASSERT_FALSE(result.ok());
        EXPECT_THAT(result.status().message(), HasSubstr("task 0 ('mm#0'): duration must be"));
    }
    absl::StatusOr<SimulationResult> out_of_range = simulate(a100(), {compute_task(8, 1.0)});
    ASSERT_FALSE(out_of_range.ok());
    EXPECT_THAT(out_of_range.status().message(), HasSubstr("GPU 8 out of range"));
}

} // namespace
} // namespace einsummable::exprog
