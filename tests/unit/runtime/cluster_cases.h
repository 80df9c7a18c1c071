#pragma once

// What the in-process cluster test (cluster_test.cc) and the MPI one (tests/mpi/) both check:
// a plan over 2 ranks gives bitwise the results of one process with all the devices.

#include <algorithm>
#include <iostream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/rank_split.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/plan_cases.h"

namespace einsummable::runtime::testing {

using physical::NodeKind;

inline constexpr uint64_t kClusterSeed = 20261207;

// The workloads both tests run, at 8 devices.
inline std::vector<PlanCase> cluster_matrix() {
    return plan_matrix(
        {"ffn:tokens=48,d_model=16,d_ff=40",
         "llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32",
         "chain:C,scale=256,dtype=f32"},
        {8});
}

inline ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

inline std::map<std::string, std::vector<float>> random_inputs(const ir::Graph& graph,
                                                               uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::map<std::string, std::vector<float>> inputs;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = uniform(rng);
        }
        inputs.emplace(tensor.name, std::move(values));
    }
    return inputs;
}

// Loads, executes twice, and returns every saved output's bytes.
inline std::map<std::string, std::vector<std::byte>>
run(Plan& plan, const std::map<std::string, std::vector<float>>& inputs) {
    for (const auto& [name, values] : inputs) {
        EXPECT_TRUE(plan.load(name, values).ok()) << name;
    }
    for (int i = 0; i < 2; ++i) {
        absl::Status executed = plan.execute();
        EXPECT_TRUE(executed.ok()) << executed;
    }
    std::map<std::string, std::vector<std::byte>> outputs;
    for (ir::TensorId id : plan.graph().saved()) {
        const std::string& name = plan.graph().tensor(id).name;
        absl::StatusOr<std::vector<std::byte>> bytes = plan.offload_bytes(name);
        EXPECT_TRUE(bytes.ok()) << bytes.status();
        if (bytes.ok()) {
            outputs[name] = *std::move(bytes);
        }
    }
    return outputs;
}

// Every send has exactly one recv on its peer with its tag, they carry the same bytes, and each
// names the other's device as its peer device.
inline void expect_messages_pair_up(const physical::RankSplit& split) {
    // (from, to, tag) -> (bytes, sending device, receiving device)
    std::map<std::tuple<int, int, int>, std::tuple<int64_t, int, int>> sends, recvs;
    std::set<int> tags;
    for (int rank = 0; rank < static_cast<int>(split.parts.size()); ++rank) {
        const physical::ExecGraph& part = split.parts[rank];
        for (const physical::ExecNode& node : part.nodes) {
            if (node.kind == NodeKind::send) {
                const int64_t bytes =
                    node.inputs.empty() ? 0 : part.buffers[node.inputs[0]].bytes();
                EXPECT_TRUE(sends
                                .emplace(std::make_tuple(rank, node.peer, node.tag),
                                         std::make_tuple(bytes, node.device, node.peer_device))
                                .second);
                EXPECT_TRUE(tags.insert(node.tag).second) << "tag " << node.tag << " sent twice";
            } else if (node.kind == NodeKind::recv) {
                const int64_t bytes =
                    node.outputs.empty() ? 0 : part.buffers[node.outputs[0]].bytes();
                EXPECT_TRUE(recvs
                                .emplace(std::make_tuple(node.peer, rank, node.tag),
                                         std::make_tuple(bytes, node.peer_device, node.device))
                                .second);
            }
        }
    }
    EXPECT_EQ(sends, recvs);
    EXPECT_EQ(static_cast<int>(sends.size()), split.messages);

    // Every message's tag is above the tags of all messages it depends on, through local
    // dependencies and through a recv's wait for its send: max_before[rank][node] is the
    // largest tag before the node, computed to a fixpoint over the parts.
    std::map<int, std::pair<int, int>> send_of_tag; // tag -> (rank, node)
    std::vector<std::vector<int>> max_before(split.parts.size());
    for (size_t rank = 0; rank < split.parts.size(); ++rank) {
        max_before[rank].assign(split.parts[rank].nodes.size(), -1);
        for (size_t n = 0; n < split.parts[rank].nodes.size(); ++n) {
            if (split.parts[rank].nodes[n].kind == NodeKind::send) {
                send_of_tag[split.parts[rank].nodes[n].tag] = {static_cast<int>(rank),
                                                               static_cast<int>(n)};
            }
        }
    }
    auto tag_of = [&](size_t rank, int n) {
        const physical::ExecNode& node = split.parts[rank].nodes[n];
        return node.kind == NodeKind::send || node.kind == NodeKind::recv ? node.tag : -1;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (size_t rank = 0; rank < split.parts.size(); ++rank) {
            for (size_t n = 0; n < split.parts[rank].nodes.size(); ++n) {
                const physical::ExecNode& node = split.parts[rank].nodes[n];
                int before = max_before[rank][n];
                for (int dep : node.deps) {
                    before = std::max({before, max_before[rank][dep], tag_of(rank, dep)});
                }
                if (node.kind == NodeKind::recv) {
                    const auto [from, send] = send_of_tag.at(node.tag);
                    before = std::max(before, max_before[from][send]);
                }
                if (before != max_before[rank][n]) {
                    max_before[rank][n] = before;
                    changed = true;
                }
            }
        }
    }
    for (size_t rank = 0; rank < split.parts.size(); ++rank) {
        for (size_t n = 0; n < split.parts[rank].nodes.size(); ++n) {
            const int tag = tag_of(rank, static_cast<int>(n));
            if (tag >= 0) {
                EXPECT_LT(max_before[rank][n], tag)
                    << "rank " << rank << " node " << n << " waits for a later-tagged message";
            }
        }
    }
}

// Compiles `param` for one process of param.devices devices (`single`; null: CPU devices) and
// for `cluster` (`ranks` ranks sharing them), runs both, and expects bitwise the same outputs
// and the same bytes per device pair, with the split's messages carrying what crosses between
// the ranks.
inline void expect_cluster_matches_one_process(const PlanCase& param,
                                               std::shared_ptr<Backend> cluster, int ranks = 2,
                                               std::shared_ptr<Backend> single_backend = nullptr) {
    std::cout << "seed " << kClusterSeed << "\n";
    CompileOptions options;
    options.devices = param.devices;
    options.planner = param.planner;
    options.schedule = param.schedule;
    options.seed = kClusterSeed;
    options.synthesis_iterations = 20;

    if (single_backend == nullptr) {
        single_backend = cpu::make_cpu_backend({param.devices, 1});
    }
    absl::StatusOr<std::unique_ptr<Plan>> single =
        Plan::compile(build(param.workload), options, single_backend);
    ASSERT_TRUE(single.ok()) << single.status();
    ASSERT_NE(cluster, nullptr);
    ASSERT_EQ(cluster->devices(), param.devices);
    absl::StatusOr<std::unique_ptr<Plan>> split =
        Plan::compile(build(param.workload), options, cluster);
    ASSERT_TRUE(split.ok()) << split.status();
    // The same plan: the compile does not depend on how the devices are spread over processes.
    ASSERT_EQ((*split)->exec_graph().to_string(), (*single)->exec_graph().to_string());

    const auto inputs = random_inputs((*single)->graph(), kClusterSeed);
    const auto expected = run(**single, inputs);
    const auto got = run(**split, inputs);
    ASSERT_EQ(got.size(), expected.size());
    for (const auto& [name, bytes] : expected) {
        EXPECT_TRUE(got.at(name) == bytes) << name << " differs from the single process's";
    }
    // Bytes per device pair, over both runs, are what the programs say: within a rank by its
    // copies, between ranks by its messages.
    std::vector<std::vector<int64_t>> programs = (*single)->physical_plan().program_bytes();
    for (auto& row : programs) {
        for (int64_t& bytes : row) {
            bytes *= 2;
        }
    }
    EXPECT_EQ((*split)->bytes_moved(), programs);
    EXPECT_EQ((*split)->bytes_moved(), (*single)->bytes_moved());

    absl::StatusOr<physical::RankSplit> parts =
        physical::split_by_rank((*single)->exec_graph(), param.devices / ranks);
    ASSERT_TRUE(parts.ok()) << parts.status();
    expect_messages_pair_up(*parts);
    // Between ranks, the messages carry what the programs send between those devices.
    const int per_rank = param.devices / ranks;
    int64_t crossing = 0;
    for (int src = 0; src < param.devices; ++src) {
        for (int dst = 0; dst < param.devices; ++dst) {
            const bool crosses = src / per_rank != dst / per_rank;
            EXPECT_EQ(parts->crossing_bytes[src][dst], crosses ? programs[src][dst] / 2 : 0)
                << src << " -> " << dst;
            crossing += parts->crossing_bytes[src][dst];
        }
    }
    // Not vacuous: the random planner's plans spread over both ranks (the others may keep a
    // small workload on fewer devices).
    if (param.planner == logical::Planner::random) {
        EXPECT_GT(crossing, 0);
    }
    for (const physical::ExecGraph& part : parts->parts) {
        EXPECT_TRUE(physical::check_exec_graph(part, part.devices).ok());
    }
}

} // namespace einsummable::runtime::testing
