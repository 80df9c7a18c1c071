// Chunked, ordered exchange programs against their closed forms on the simulator:
// a pipelined relay chain, ring all-gather and ring all-reduce in k chunks on a switch and on
// dgx-v100's double-link ring (both ways), written as programs with labels and ORDER chains
// and simulated through simulate_program. The programs are built here by hand, independently
// of the synthesiser; order_sends (pipelining.h) must order the same programs as well as the
// hand-written chains do. pipelined_simulation_test.cc checks the same shapes as raw simulator
// task DAGs.

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/pipelining.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/exprog/semantics.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

constexpr double kGB = 1e9;

#define EXPECT_TIME(actual, expected) EXPECT_NEAR((actual), (expected), 1e-9 * (expected))

Topology builtin(const std::string& name) {
    return *builtin_topology(name);
}

double simulated(const Program& program, const Topology& topology) {
    absl::Status valid = check_with_membership(program, {});
    EXPECT_TRUE(valid.ok()) << valid << "\n" << print_program(program);
    absl::StatusOr<ProgramSimulation> run = simulate_program(program, {}, topology);
    EXPECT_TRUE(run.ok()) << run.status();
    return run.ok() ? run->result.makespan_s : -1.0;
}

// The program with its ORDER dropped and order_sends' instead.
Program reordered(Program program, const Topology& topology) {
    program.orders.clear();
    for (Action& action : program.actions) {
        action.label.clear();
    }
    return order_sends(program, {}, topology);
}

// Builds a program's actions with one ORDER chain per sending port (GPU, or GPU and direction
// for rings run both ways), in the order the sends are added.
class Builder {
public:
    explicit Builder(Program preamble) : program_(std::move(preamble)) {}

    void send(const Aggregate& aggregate, Chunk chunk, int from, int to, const std::string& port) {
        const std::string label = absl::StrCat("s", program_.actions.size());
        program_.actions.push_back(
            Action{aggregate, Site::of_gpu(from), {{Site::of_gpu(to)}}, {}, chunk, label});
        std::vector<std::string>& chain = chains_[port];
        if (!chain.empty()) {
            program_.orders.push_back(OrderDecl{chain.back(), label, {}, {}});
        }
        chain.push_back(label);
    }
    void local(const Aggregate& aggregate, Chunk chunk, int gpu) {
        program_.actions.push_back(Action{aggregate, Site::of_gpu(gpu), {}, {}, chunk, ""});
    }
    const Program& program() const { return program_; }

private:
    Program program_;
    std::map<std::string, std::vector<std::string>> chains_;
};

Program preamble(int gpus) {
    Program program;
    for (int g = 0; g < gpus; ++g) {
        program.gpus.push_back(g);
    }
    return program;
}

// The relay chain of tests/golden/exprog/pipelined_relay.exprog, on `hops + 1` GPUs: A goes
// from GPU 0 through every GPU to the last, in k chunks whose first hops are ordered; each
// relay forwards a chunk as it arrives. A wavefront: (hops + k - 1) chunk times, falling
// towards one hop's time as k grows, where the whole atom takes `hops` times that.
TEST(PipelinedPrograms, ARelayChainPipelines) {
    const Topology topology = builtin("dgx-a100");
    const int hops = 5;
    double previous = 0.0;
    for (int k : {1, 2, 4, 16, 64}) {
        SCOPED_TRACE(k);
        std::string text = "GPUS: 0, 1, 2, 3, 4, 5\nIN: A @ 0 (size: 1 GB)\nOUT: A @ 5\n";
        std::string order = "ORDER: c0";
        for (int j = 0; j < k; ++j) {
            absl::StrAppend(&text, "c", j, ": A[", j, "/", k, "] @ 0 -> 1 -> 2 -> 3 -> 4 -> 5\n");
            if (j > 0) {
                absl::StrAppend(&order, " < c", j);
            }
        }
        if (k > 1) {
            absl::StrAppend(&text, order, "\n");
        }
        absl::StatusOr<Program> program = parse_program(text);
        ASSERT_TRUE(program.ok()) << program.status();
        const double chunk_time = topology.latency_s() + kGB / k / topology.link_bandwidth();
        const double t = simulated(*program, topology);
        EXPECT_TIME(t, (hops + k - 1) * chunk_time);
        // order_sends orders the first hops the same way and also splits nothing else.
        EXPECT_TIME(simulated(reordered(split_relays(*program), topology), topology), t);
        if (k > 1) {
            EXPECT_LT(t, previous);
        }
        previous = t;
        // Unordered, every chunk leaves at once: store-and-forward, whatever k is.
        Program unordered = *program;
        unordered.orders.clear();
        EXPECT_TIME(simulated(unordered, topology),
                    hops * (topology.latency_s() + kGB / topology.link_bandwidth()));
    }
    EXPECT_LT(previous, 1.11 * (topology.latency_s() + kGB / topology.link_bandwidth()));
}

// All-gather along directed `rings` (one share of every GPU's block each): GPU g's block X<g>
// (`block` bytes) travels around each ring in k chunks of its share; in step s the GPU s places
// ahead of X<g>'s owner forwards it. Each ring's port (a GPU's send on that ring) sends in
// (step, chunk) order.
Program ring_all_gather(int gpus, const std::vector<std::vector<int>>& rings, int k, double block) {
    Program program = preamble(gpus);
    for (int g = 0; g < gpus; ++g) {
        program.ins.push_back(InDecl{absl::StrCat("X", g), g, block, {}});
        OutDecl out{{absl::StrCat("X", g)}, {}, {}};
        for (int d = 0; d < gpus; ++d) {
            out.sites.push_back(Site::of_gpu(d));
        }
        program.outs.push_back(std::move(out));
    }
    Builder builder(program);
    const int shares = static_cast<int>(rings.size()) * k;
    for (int step = 0; step + 1 < gpus; ++step) {
        for (size_t r = 0; r < rings.size(); ++r) {
            const std::vector<int>& ring = rings[r];
            for (int at = 0; at < gpus; ++at) {
                const int from = ring[(at + step) % gpus];
                const int to = ring[(at + step + 1) % gpus];
                for (int j = 0; j < k; ++j) {
                    builder.send({absl::StrCat("X", ring[at])},
                                 Chunk{static_cast<int>(r) * k + j, shares}, from, to,
                                 absl::StrCat(from, "/", r));
                }
            }
        }
    }
    return builder.program();
}

// All-reduce along directed rings: GPU g holds X<g>_<c> for every chunk c (gpus chunks of
// `bytes`/gpus); the sum of chunk c is reduced along each ring into the GPU at position c
// (starting at the next one, every GPU adding its own part) and then sent on around the ring
// to everyone. Each GPU's port on a ring sends its reduce steps, then its broadcast steps, each
// step in k chunks.
Program ring_all_reduce(int gpus, const std::vector<std::vector<int>>& rings, int k, double bytes) {
    Program program = preamble(gpus);
    auto atom = [](int g, int c) { return absl::StrCat("X", g, "_", c); };
    for (int g = 0; g < gpus; ++g) {
        for (int c = 0; c < gpus; ++c) {
            program.ins.push_back(InDecl{atom(g, c), g, bytes / gpus, {}});
        }
    }
    for (int c = 0; c < gpus; ++c) {
        OutDecl out;
        for (int g = 0; g < gpus; ++g) {
            out.aggregate.insert(atom(g, c));
            out.sites.push_back(Site::of_gpu(g));
        }
        program.outs.push_back(std::move(out));
    }
    Builder builder(program);
    const int shares = static_cast<int>(rings.size()) * k;
    for (int phase = 0; phase < 2; ++phase) {
        for (int step = 0; step + 1 < gpus; ++step) {
            for (size_t r = 0; r < rings.size(); ++r) {
                const std::vector<int>& ring = rings[r];
                for (int root_at = 0; root_at < gpus; ++root_at) {
                    const int c = ring[root_at];
                    // Reduce: position root_at + 1 + step sends the sum of the parts from
                    // root_at + 1 to it. Broadcast: position root_at + step sends the whole.
                    const int from_at = phase == 0 ? root_at + 1 + step : root_at + step;
                    const int from = ring[from_at % gpus];
                    const int to = ring[(from_at + 1) % gpus];
                    Aggregate sum;
                    const int parts = phase == 0 ? step + 1 : gpus;
                    for (int i = 0; i < parts; ++i) {
                        sum.insert(atom(ring[(root_at + 1 + i) % gpus], c));
                    }
                    for (int j = 0; j < k; ++j) {
                        builder.send(sum, Chunk{static_cast<int>(r) * k + j, shares}, from, to,
                                     absl::StrCat(from, "/", r));
                    }
                }
            }
        }
    }
    return builder.program();
}

std::vector<int> identity_ring(int gpus) {
    std::vector<int> ring;
    for (int g = 0; g < gpus; ++g) {
        ring.push_back(g);
    }
    return ring;
}

// dgx-v100's ring of double links (docs/topologies/dgx-v100.topo), one way and the other.
const std::vector<int> kV100Forward = {0, 3, 2, 1, 5, 6, 7, 4};
const std::vector<int> kV100Backward = {0, 4, 7, 6, 5, 1, 2, 3};

// Every port sends (p - 1)·k chunks back to back (a forward always arrived before its turn):
// (p - 1)·k chunk times, whatever k; chunks only add latencies here.
TEST(PipelinedPrograms, RingAllGatherOnASwitch) {
    const Topology topology = builtin("dgx-a100");
    const int p = 8;
    for (int k : {1, 2, 4}) {
        SCOPED_TRACE(k);
        const Program program = ring_all_gather(p, {identity_ring(p)}, k, kGB / p);
        const double chunk_time = topology.latency_s() + kGB / p / k / topology.link_bandwidth();
        EXPECT_TIME(simulated(program, topology), (p - 1) * k * chunk_time);
        EXPECT_TIME(simulated(reordered(program, topology), topology), (p - 1) * k * chunk_time);
    }
}

// Both directions of the double-link ring at once: every GPU sends and receives on two 50 GB/s
// links, half of each block each way.
TEST(PipelinedPrograms, RingAllGatherOnDgxV100sDoubleRingBothWays) {
    const Topology topology = builtin("dgx-v100");
    const int p = 8;
    for (int k : {1, 2, 4}) {
        SCOPED_TRACE(k);
        const Program program = ring_all_gather(p, {kV100Forward, kV100Backward}, k, kGB / p);
        const double chunk_time = topology.latency_s() + kGB / p / (2 * k) / 50e9;
        EXPECT_TIME(simulated(program, topology), (p - 1) * k * chunk_time);
        EXPECT_TIME(simulated(reordered(program, topology), topology), (p - 1) * k * chunk_time);
    }
}

// Ring all-reduce: 2(p - 1)·k chunk times once a chunk's addition (two parts read, one written
// at HBM speed; both directions' additions may share a GPU's HBM) fits in the (k - 1) chunk
// times before that chunk's next send; with one chunk every reduce step waits for it.
TEST(PipelinedPrograms, RingAllReduceOnASwitch) {
    const Topology topology = builtin("dgx-a100");
    const int p = 8;
    for (int k : {1, 2, 4, 8}) {
        SCOPED_TRACE(k);
        const Program program = ring_all_reduce(p, {identity_ring(p)}, k, kGB);
        const double piece = kGB / p / k;
        const double chunk_time = topology.latency_s() + piece / topology.link_bandwidth();
        const double addition = 3 * piece / topology.hbm_bandwidth();
        const double t = simulated(program, topology);
        if (k == 1) {
            EXPECT_TIME(t, 2 * (p - 1) * chunk_time + (p - 1) * addition);
        } else {
            ASSERT_LT(addition, (k - 1) * chunk_time);
            EXPECT_TIME(t, 2 * (p - 1) * k * chunk_time);
        }
        EXPECT_TIME(simulated(reordered(program, topology), topology), t);
    }
}

TEST(PipelinedPrograms, RingAllReduceOnDgxV100sDoubleRingBothWays) {
    const Topology topology = builtin("dgx-v100");
    const int p = 8;
    for (int k : {2, 4}) {
        SCOPED_TRACE(k);
        const Program program = ring_all_reduce(p, {kV100Forward, kV100Backward}, k, kGB);
        const double piece = kGB / p / (2 * k);
        const double chunk_time = topology.latency_s() + piece / 50e9;
        // Both directions' additions at once: each at half the HBM.
        ASSERT_LT(3 * piece / (topology.hbm_bandwidth() / 2), (k - 1) * chunk_time);
        EXPECT_TIME(simulated(program, topology), 2 * (p - 1) * k * chunk_time);
        EXPECT_TIME(simulated(reordered(program, topology), topology),
                    2 * (p - 1) * k * chunk_time);
    }
}

// Lowering-facing facts of a chunked, ordered program: every chunk moves 1/k of the bytes,
// and ORDER becomes dependencies on the departures it names.
TEST(PipelinedPrograms, StepsCarryChunksBytesAndOrder) {
    const Program program = ring_all_gather(4, {identity_ring(4)}, 2, 1e6);
    const std::vector<ProgramStep> steps = program_steps(program, {});
    ASSERT_EQ(steps.size(), 3u * 4 * 2);
    double moved = 0.0;
    for (const ProgramStep& step : steps) {
        EXPECT_EQ(step.kind, ProgramStep::Kind::send);
        EXPECT_EQ(step.chunk.count, 2);
        // The owner reads its chunk out of the whole block; a relay forwards what arrived.
        const bool owner = step.aggregate == Aggregate{absl::StrCat("X", step.gpu)};
        EXPECT_EQ(step.source_chunk, owner ? Chunk{} : step.chunk);
        moved += chunk_bytes(program, step.aggregate, step.chunk);
    }
    EXPECT_DOUBLE_EQ(moved, 3 * 4 * 1e6);
    // GPU 0's second send (X0[1/2]) waits for its first (X0[0/2]) to leave.
    int first = -1;
    for (size_t i = 0; i < steps.size(); ++i) {
        if (steps[i].gpu == 0 && steps[i].aggregate == Aggregate{"X0"}) {
            if (steps[i].chunk.index == 0) {
                first = static_cast<int>(i);
            } else {
                EXPECT_EQ(steps[i].order_after, std::vector<int>{first});
            }
        }
    }
    EXPECT_GE(first, 0);
}

// On a cluster a multicast inside the node and over the NIC becomes two actions, and the ORDER
// chains keep the NIC's sends apart from the switch's: a NIC send waits only for the NIC sends
// before it. Sends whose data must still cross to another node go first on their port.
TEST(PipelinedPrograms, ClusterSendsAreOrderedPerPortAndCrossingDataFirst) {
    const Topology topology = builtin("dgx-h100-2nodes");
    Program program;
    program.gpus = {0, 1, 8, 9};
    // C, first in the text, stays in node 0 (wanted at 1 only); A and B are also wanted in node
    // 1. On 0's switch port A's and B's sends go first all the same.
    program.ins.push_back(InDecl{"C", 0, 1e8, {}});
    program.outs.push_back(OutDecl{{"C"}, {Site::of_gpu(1)}, {}});
    program.actions.push_back(Action{{"C"}, Site::of_gpu(0), {{Site::of_gpu(1)}}, {}, {}, {}});
    for (const char* atom : {"A", "B"}) {
        program.ins.push_back(InDecl{atom, 0, 1e8, {}});
        program.outs.push_back(
            OutDecl{{atom}, {Site::of_gpu(1), Site::of_gpu(8), Site::of_gpu(9)}, {}});
        program.actions.push_back(
            Action{{atom}, Site::of_gpu(0), {{Site::of_gpu(1), Site::of_gpu(8)}}, {}, {}, {}});
        program.actions.push_back(Action{{atom}, Site::of_gpu(8), {{Site::of_gpu(9)}}, {}, {}, {}});
    }
    ASSERT_TRUE(check_with_membership(program, {}).ok());

    const Program ordered = order_sends(program, {}, topology);
    ASSERT_TRUE(check_with_membership(ordered, {}).ok()) << print_program(ordered);
    // The two multicasts of 0 are split: 0 -> 1 and 0 -> 8 apiece.
    int inside = 0;
    int across = 0;
    std::map<std::string, const Action*> by_label;
    for (const Action& action : ordered.actions) {
        by_label[action.label] = &action;
        if (action.source == Site::of_gpu(0)) {
            ASSERT_EQ(action.hops.size(), 1u);
            ASSERT_EQ(action.hops[0].size(), 1u) << action.to_string();
            (action.hops[0][0] == Site::of_gpu(8) ? across : inside) += 1;
        }
    }
    EXPECT_EQ(inside, 3); // A, B and C to 1
    EXPECT_EQ(across, 2); // A and B to 8
    std::vector<std::string> first_inside;
    for (const OrderDecl& order : ordered.orders) {
        const Action* before = by_label.at(order.before);
        const Action* after = by_label.at(order.after);
        EXPECT_EQ(before->source, after->source);
        // No chain mixes the node's port with the NIC's.
        EXPECT_EQ(topology.node_of(before->hops[0][0].gpu), topology.node_of(after->hops[0][0].gpu))
            << before->to_string() << " < " << after->to_string();
        if (before->source == Site::of_gpu(0) && before->hops[0][0] == Site::of_gpu(1)) {
            // C, which never leaves node 0, goes after A and B, which must go on to node 1.
            EXPECT_NE(*before->aggregate.begin(), "C") << before->to_string();
        }
    }
    EXPECT_LT(simulated(ordered, topology), simulated(program, topology) * 1.0001);
}

} // namespace
} // namespace einsummable::exprog
