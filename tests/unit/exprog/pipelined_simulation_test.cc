// Pipelining's closed forms, at the level of the simulator's task DAG: an atom cut into
// k chunks is k tasks of 1/k of the bytes, and "this send starts only after that one's data has
// left its source" is a dependency on that send. These are the DAGs chunked, ordered exchange
// programs will lower to; they pin down, before the language has chunks and order, that the
// fluid-flow simulator already gives pipelining its textbook times — and that without order
// (every enabled transfer at once, sharing links fairly, as today's programs run) chunking buys
// nothing.

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/simulator.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

constexpr double kGB = 1e9;
// dgx-a100 (docs/topologies/dgx-a100.topo): one switch, 300 GB/s per GPU port each way, 2 us
// per transfer, HBM at 1555 GB/s.
constexpr double kPort = 300e9;
constexpr double kLatency = 2e-6;
constexpr double kHbm = 1555e9;

#define EXPECT_TIME(actual, expected) EXPECT_NEAR((actual), (expected), 1e-9 * (expected))

Topology a100() {
    return *builtin_topology("dgx-a100");
}

double makespan(const std::vector<SimTask>& tasks) {
    absl::StatusOr<SimulationResult> result = simulate(a100(), tasks);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->makespan_s : -1.0;
}

// N bytes relayed 0 -> 1 -> ... -> hops, cut into k chunks. A chunk's hop waits for the same
// chunk's previous hop; with `ordered`, also for the previous chunk's send on the same hop
// (each GPU sends its chunks one after another).
std::vector<SimTask> relay_chain(int hops, int k, double bytes, bool ordered) {
    std::vector<SimTask> tasks;
    auto index = [k](int hop, int chunk) { return hop * k + chunk; };
    for (int hop = 0; hop < hops; ++hop) {
        for (int chunk = 0; chunk < k; ++chunk) {
            std::vector<int> deps;
            if (hop > 0) {
                deps.push_back(index(hop - 1, chunk));
            }
            if (ordered && chunk > 0) {
                deps.push_back(index(hop, chunk - 1));
            }
            tasks.push_back(transfer_task(hop, hop + 1, bytes / k, deps));
        }
    }
    return tasks;
}

// An ordered pipeline is a wavefront: (hops + k - 1) chunk times, each latency plus a chunk's
// bytes at port speed. As k grows the time falls towards one hop's time plus (hops - 1) chunk
// times, the whole transfer's N / B once latency is small against it.
TEST(PipelinedSimulation, AnOrderedRelayChainTakesHopsPlusChunksMinusOneChunkTimes) {
    const int hops = 5;
    const double bytes = kGB;
    double previous = 0.0;
    for (int k : {1, 2, 4, 16, 64}) {
        SCOPED_TRACE(k);
        const double chunk_time = kLatency + bytes / k / kPort;
        const double t = makespan(relay_chain(hops, k, bytes, /*ordered=*/true));
        EXPECT_TIME(t, (hops + k - 1) * chunk_time);
        if (k > 1) {
            EXPECT_LT(t, previous);
        }
        previous = t;
    }
    // 64 chunks: within 11% of a single hop (N / B = 3.33 ms; the rest is 68 latencies and
    // four chunk times) where store-and-forward takes 5x.
    EXPECT_LT(previous, 1.11 * (kLatency + bytes / kPort));
}

// Without order every chunk's first hop starts at once and they share GPU 0's port: all arrive
// together after N / B, then all move on together. Store-and-forward, whatever k is.
TEST(PipelinedSimulation, UnorderedChunksDoNotPipeline) {
    const int hops = 5;
    const double bytes = kGB;
    for (int k : {1, 4, 16}) {
        SCOPED_TRACE(k);
        EXPECT_TIME(makespan(relay_chain(hops, k, bytes, /*ordered=*/false)),
                    hops * (kLatency + bytes / kPort));
    }
}

// Ring reduce-scatter over p GPUs of a switch: each GPU's N / p shard is a partial sum at every
// GPU; at step s GPU g sends to g + 1 the partial it formed in step s - 1 (its own part at
// s = 0), and g + 1 adds its own part (an aggregate at HBM speed: two parts read, one written).
// Cut into k chunks with each GPU's sends ordered, the port stays busy and the additions hide
// behind the next chunk's transfer: (p - 1) k chunk transfers plus one chunk's addition, where
// whole atoms pay an addition after every step.
std::vector<SimTask> ring_reduce_scatter(int p, int k, double bytes, bool ordered) {
    const double chunk = bytes / p / k;
    std::vector<SimTask> tasks;
    // Task indices: the transfer of (step, chunk) from g, then the addition at g + 1.
    auto send = [&](int step, int c, int g) { return 2 * ((step * k + c) * p + g); };
    for (int step = 0; step < p - 1; ++step) {
        for (int c = 0; c < k; ++c) {
            for (int g = 0; g < p; ++g) {
                std::vector<int> deps;
                if (step > 0) {
                    deps.push_back(send(step - 1, c, (g + p - 1) % p) + 1); // the partial at g
                }
                if (ordered) {
                    if (c > 0) {
                        deps.push_back(send(step, c - 1, g));
                    } else if (step > 0) {
                        deps.push_back(send(step - 1, k - 1, g));
                    }
                }
                tasks.push_back(transfer_task(g, (g + 1) % p, chunk, deps));
                tasks.push_back(aggregate_task((g + 1) % p, 3 * chunk, {send(step, c, g)}));
            }
        }
    }
    return tasks;
}

TEST(PipelinedSimulation, AnOrderedChunkedRingReduceScatterHidesItsAdditions) {
    const int p = 8;
    const double bytes = kGB;
    for (int k : {1, 2, 4, 8}) {
        SCOPED_TRACE(k);
        const double chunk = bytes / p / k;
        const double transfer = kLatency + chunk / kPort;
        const double addition = 3 * chunk / kHbm;
        const double t = makespan(ring_reduce_scatter(p, k, bytes, /*ordered=*/true));
        if (k == 1) {
            EXPECT_TIME(t, (p - 1) * (transfer + addition));
        } else {
            // Each addition ends before the port is free again.
            ASSERT_LT(addition, (k - 1) * transfer);
            EXPECT_TIME(t, (p - 1) * k * transfer + addition);
        }
    }
    // The bound is (p - 1) / p · N / B: whole atoms take 1.58x of it, 8 chunks 1.049x (56
    // latencies of 2 us are the rest).
    const double bound = (p - 1) * bytes / p / kPort;
    EXPECT_GT(makespan(ring_reduce_scatter(p, 1, bytes, true)), 1.55 * bound);
    EXPECT_LT(makespan(ring_reduce_scatter(p, 8, bytes, true)), 1.05 * bound);
}

// Ring all-gather along `ring` (GPUs in ring order): each GPU's N / p shard travels p - 1 hops
// onward, cut into k chunks; at step s GPU ring[g] forwards the chunks it received at step
// s - 1 (its own shard at s = 0), each GPU's sends ordered when `ordered`. `share` of every
// shard goes this way round (the rest, for a ring used both ways, the other way).
std::vector<SimTask> ring_all_gather(const std::vector<int>& ring, int k, double bytes,
                                     double share, bool ordered, std::vector<SimTask> tasks = {}) {
    const int p = static_cast<int>(ring.size());
    const int base = static_cast<int>(tasks.size());
    auto send = [&](int step, int c, int g) { return base + (step * k + c) * p + g; };
    for (int step = 0; step < p - 1; ++step) {
        for (int c = 0; c < k; ++c) {
            for (int g = 0; g < p; ++g) {
                std::vector<int> deps;
                if (step > 0) {
                    deps.push_back(send(step - 1, c, (g + p - 1) % p)); // it arrived at g
                }
                if (ordered && (c > 0 || step > 0)) {
                    deps.push_back(c > 0 ? send(step, c - 1, g) : send(step - 1, k - 1, g));
                }
                tasks.push_back(
                    transfer_task(ring[g], ring[(g + 1) % p], share * bytes / p / k, deps));
            }
        }
    }
    return tasks;
}

// dgx-v100's double NVLinks (50 GB/s per direction) close a ring through all eight GPUs,
// 0-3-2-1-5-6-7-4; its links are directed resources, so the ring used both ways, half of every
// shard each way, moves at twice one direction's rate. A ring's ordered sends keep every link
// busy from the start: (p - 1) k chunk times, whatever k (chunks only add latencies: the ring
// is already bandwidth-optimal whole, unlike the relay chain above).
TEST(PipelinedSimulation, RingAllGatherOnDgxV100sDoubleLinkRing) {
    const Topology v100 = *builtin_topology("dgx-v100");
    const std::vector<int> ring = {0, 3, 2, 1, 5, 6, 7, 4};
    const std::vector<int> reversed = {0, 4, 7, 6, 5, 1, 2, 3};
    const int p = 8;
    const double bytes = kGB, link = 50e9, latency = 0.3e-6;
    for (int k : {1, 4}) {
        SCOPED_TRACE(k);
        absl::StatusOr<SimulationResult> one_way =
            simulate(v100, ring_all_gather(ring, k, bytes, 1.0, /*ordered=*/true));
        ASSERT_TRUE(one_way.ok()) << one_way.status();
        EXPECT_TIME(one_way->makespan_s, (p - 1) * k * (latency + bytes / p / k / link));
        absl::StatusOr<SimulationResult> both_ways =
            simulate(v100, ring_all_gather(reversed, k, bytes, 0.5, true,
                                           ring_all_gather(ring, k, bytes, 0.5, /*ordered=*/true)));
        ASSERT_TRUE(both_ways.ok()) << both_ways.status();
        EXPECT_TIME(both_ways->makespan_s, (p - 1) * k * (latency + 0.5 * bytes / p / k / link));
        for (const TaskTrace& trace : both_ways->trace) {
            ASSERT_EQ(trace.resources.size(), 1u); // one directed double link, never the bridge
            EXPECT_NE(trace.resources[0], "pcie-bridge");
        }
    }
}

} // namespace
} // namespace einsummable::exprog
