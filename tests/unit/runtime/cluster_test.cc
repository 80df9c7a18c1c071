// Plans over several ranks inside one process (docs/cluster.md): the split of an ExecGraph by
// rank (compiler/physical/rank_split.h), its parts on the wire (exec_graph_wire.h), and the
// cluster backend driving CPU backends of 4 virtual devices each through the loopback transport
// and the in-process rank channel. The same plan on 2 x 4 devices gives bitwise the results of
// one process with 8 devices, for every planner and schedule, and moves the same bytes between
// the same device pairs. tests/mpi/ runs the same over MPI processes.

#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/rank_split.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/exec_graph_wire.h"
#include "runtime/cluster/local_rank_channel.h"
#include "runtime/cluster/rank_worker.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/loopback_transport.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/cluster_cases.h"

namespace einsummable::runtime {
namespace {

using physical::NodeKind;
using ::testing::HasSubstr;

constexpr char kVersion[] = "test-version";

// `ranks` CPU backends of `per_rank` devices joined by a loopback network, served to rank 0's
// cluster backend through the in-process channel.
struct LocalCluster {
    std::shared_ptr<LoopbackNetwork> network;
    std::shared_ptr<cluster::LocalRankChannel> channel;
    std::shared_ptr<Backend> backend;
};

// The cluster backend's start (its Hello to every rank) may fail: a rank of another version
// or device count.
absl::StatusOr<LocalCluster>
start_cluster(int ranks, int per_rank, const std::string& worker_version = kVersion,
              int worker_devices = -1,
              std::chrono::milliseconds rank_timeout = std::chrono::seconds(30),
              int max_tag = std::numeric_limits<int>::max()) {
    LocalCluster cluster;
    cluster.network = std::make_shared<LoopbackNetwork>(ranks);
    std::vector<std::shared_ptr<cluster::RankWorker>> workers(ranks);
    for (int r = 1; r < ranks; ++r) {
        cpu::CpuBackendOptions options;
        options.devices = worker_devices > 0 ? worker_devices : per_rank;
        options.transport = cluster.network->transport(r);
        workers[r] = std::make_shared<cluster::RankWorker>(
            r, std::shared_ptr<Backend>(cpu::make_cpu_backend(options)), worker_version);
    }
    cpu::CpuBackendOptions options;
    options.devices = per_rank;
    options.transport = cluster.network->transport(0);
    cluster::ClusterOptions cluster_options;
    cluster_options.version = kVersion;
    cluster_options.rank_timeout = rank_timeout;
    cluster_options.max_tag = max_tag;
    cluster.channel =
        std::make_shared<cluster::LocalRankChannel>(std::move(workers), cluster.network);
    EINSUMMABLE_ASSIGN_OR_RETURN(
        cluster.backend,
        cluster::make_cluster_backend(std::shared_ptr<Backend>(cpu::make_cpu_backend(options)),
                                      cluster.channel, cluster_options));
    return cluster;
}

// start_cluster, which must succeed (a failure is the test's; the backend is then null).
LocalCluster local_cluster(int ranks, int per_rank,
                           std::chrono::milliseconds rank_timeout = std::chrono::seconds(30)) {
    absl::StatusOr<LocalCluster> cluster =
        start_cluster(ranks, per_rank, kVersion, -1, rank_timeout);
    if (!cluster.ok()) {
        ADD_FAILURE() << cluster.status();
        return {};
    }
    return *std::move(cluster);
}

using testing::build;
using testing::expect_messages_pair_up;
using testing::kClusterSeed;
using testing::PlanCase;
using testing::random_inputs;
using testing::run;

class ClusterMatrix : public ::testing::TestWithParam<PlanCase> {};

TEST_P(ClusterMatrix, TwoRanksOfFourGiveBitwiseTheResultsOfOneProcessOfEight) {
    LocalCluster cluster = local_cluster(2, GetParam().devices / 2);
    testing::expect_cluster_matches_one_process(GetParam(), cluster.backend);
}

// Four ranks of two: dependencies between ranks that no copy carries (tokens), and copies whose
// source rank must first hear of a third rank's node.
TEST_P(ClusterMatrix, FourRanksOfTwoGiveBitwiseTheResultsOfOneProcessOfEight) {
    LocalCluster cluster = local_cluster(4, GetParam().devices / 4);
    testing::expect_cluster_matches_one_process(GetParam(), cluster.backend, 4);
}

INSTANTIATE_TEST_SUITE_P(Workloads, ClusterMatrix, ::testing::ValuesIn(testing::cluster_matrix()),
                         testing::plan_case_name);

// A persistent buffer of tensor x appended to `graph`.
physical::BufferId add_buffer(physical::ExecGraph& graph, int device, int64_t offset, ir::Box box) {
    physical::Buffer b;
    b.device = device;
    b.box = std::move(box);
    b.tensor = "x";
    b.offset = offset;
    b.persistent = true;
    graph.buffers.push_back(b);
    return static_cast<physical::BufferId>(graph.buffers.size() - 1);
}

// A node of `kind` on `device` appended to `graph`.
void add_node(physical::ExecGraph& graph, NodeKind kind, int device, physical::BufferId input,
              physical::BufferId output, std::vector<int> deps = {}) {
    physical::ExecNode node;
    node.kind = kind;
    node.device = device;
    node.inputs = {input};
    node.outputs = {output};
    node.deps = std::move(deps);
    graph.nodes.push_back(std::move(node));
}

// A copy from rank A to rank B whose source is itself a copy from B (a forwarded block) must
// wait, on A, for the block to arrive: the split orders the send after the recv.
TEST(RankSplit, ForwardedBlocksAreSentOnlyAfterTheyArrive) {
    physical::ExecGraph graph;
    graph.devices = 2;
    graph.arena_bytes = {64, 64};
    const auto b0 = add_buffer(graph, 1, 0, ir::Box({{0, 4}}));  // on rank 1
    const auto b1 = add_buffer(graph, 0, 0, ir::Box({{0, 4}}));  // on rank 0
    const auto b2 = add_buffer(graph, 1, 16, ir::Box({{0, 4}})); // back on rank 1
    graph.input_blocks["x"] = {b0};
    graph.outputs["x"] = {b2};
    add_node(graph, NodeKind::copy, 0, b0, b1);
    add_node(graph, NodeKind::copy, 1, b1, b2, {0});
    ASSERT_TRUE(physical::check_exec_graph(graph, 2).ok());

    absl::StatusOr<physical::RankSplit> split = physical::split_by_rank(graph, 1);
    ASSERT_TRUE(split.ok()) << split.status();
    const physical::ExecGraph& rank0 = split->parts[0];
    // Rank 0: recv of x (tag 0), then the send back (tag 1) after it.
    ASSERT_EQ(rank0.nodes.size(), 2u);
    EXPECT_EQ(rank0.nodes[0].kind, NodeKind::recv);
    EXPECT_EQ(rank0.nodes[1].kind, NodeKind::send);
    EXPECT_THAT(rank0.nodes[1].deps, ::testing::ElementsAre(0));
    EXPECT_EQ(split->crossing_bytes[1][0], 16);
    EXPECT_EQ(split->crossing_bytes[0][1], 16);
    expect_messages_pair_up(*split);
}

// A copy from rank 0 to rank 1 that must wait for a node of rank 2: a token from rank 2 brings
// it to rank 0 before the send, and is tagged before the copy's messages, so processing every
// rank's messages in tag order (what NCCL's ordered matching needs) follows the dependencies.
TEST(RankSplit, ACopyWaitingForAThirdRankIsTaggedAfterItsToken) {
    physical::ExecGraph graph;
    graph.devices = 3;
    graph.arena_bytes = {64, 64, 64};
    const auto source = add_buffer(graph, 0, 0, ir::Box({{0, 4}}));
    const auto target = add_buffer(graph, 1, 0, ir::Box({{0, 4}}));
    const auto whole = add_buffer(graph, 2, 0, ir::Box({{0, 4}}));
    const auto part = add_buffer(graph, 2, 16, ir::Box({{0, 2}}));
    add_node(graph, NodeKind::slice, 2, whole, part);
    add_node(graph, NodeKind::copy, 1, source, target, {0});
    ASSERT_TRUE(physical::check_exec_graph(graph, 3).ok()) << physical::check_exec_graph(graph, 3);

    absl::StatusOr<physical::RankSplit> split = physical::split_by_rank(graph, 1);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_EQ(split->messages, 2);
    const physical::ExecGraph& rank0 = split->parts[0];
    ASSERT_EQ(rank0.nodes.size(), 2u);
    EXPECT_EQ(rank0.nodes[0].kind, NodeKind::recv); // the token from rank 2
    EXPECT_EQ(rank0.nodes[0].peer, 2);
    EXPECT_EQ(rank0.nodes[1].kind, NodeKind::send); // the copy's data, after it
    EXPECT_THAT(rank0.nodes[1].deps, ::testing::ElementsAre(0));
    EXPECT_LT(rank0.nodes[0].tag, rank0.nodes[1].tag);
    expect_messages_pair_up(*split);
}

TEST(RankSplit, RefusesBadArguments) {
    physical::ExecGraph graph;
    EXPECT_THAT(physical::split_by_rank(graph, 0).status().message(),
                HasSubstr("devices per rank must be at least 1"));
}

TEST(ExecGraphWire, RoundTripsEveryPartOfALlamaBlock) {
    CompileOptions options;
    options.devices = 4;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::compile(
        build("llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32"),
        options, cpu::make_cpu_backend({4, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<physical::RankSplit> split = physical::split_by_rank((*plan)->exec_graph(), 2);
    ASSERT_TRUE(split.ok()) << split.status();
    for (const physical::ExecGraph& part : split->parts) {
        const v1::ExecGraphDef def = cluster::to_wire(part);
        v1::ExecGraphDef parsed;
        ASSERT_TRUE(parsed.ParseFromString(def.SerializeAsString()));
        absl::StatusOr<std::unique_ptr<cluster::ReceivedGraph>> received =
            cluster::from_wire(parsed);
        ASSERT_TRUE(received.ok()) << received.status();
        EXPECT_EQ((*received)->graph.to_string(), part.to_string());
        for (size_t n = 0; n < part.nodes.size(); ++n) {
            if (part.nodes[n].op != nullptr) {
                EXPECT_EQ((*received)->graph.nodes[n].op->attributes().to_string(),
                          part.nodes[n].op->attributes().to_string());
                EXPECT_EQ((*received)->graph.nodes[n].op->input_types(),
                          part.nodes[n].op->input_types());
            }
        }
    }
}

TEST(ExecGraphWire, RefusesACorruptGraphNamingWhatIsWrong) {
    CompileOptions options;
    options.devices = 2;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> plan = Plan::compile(
        build("ffn:tokens=48,d_model=16,d_ff=40"), options, cpu::make_cpu_backend({2, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    v1::ExecGraphDef def = cluster::to_wire((*plan)->exec_graph());
    v1::ExecGraphDef bad_op = def;
    bad_op.mutable_nodes(0)->set_op(99);
    EXPECT_THAT(cluster::from_wire(bad_op).status().message(), HasSubstr("operator 99"));
    v1::ExecGraphDef bad_buffer = def;
    bad_buffer.mutable_buffers(0)->set_offset(1 << 30);
    EXPECT_THAT(cluster::from_wire(bad_buffer).status().message(), HasSubstr("buffer b0"));
    v1::ExecGraphDef bad_kind = def;
    bad_kind.mutable_nodes(1)->set_kind(static_cast<v1::ExecNodeKind>(42));
    EXPECT_THAT(cluster::from_wire(bad_kind).status().message(), HasSubstr("unknown kind 42"));
    v1::ExecGraphDef bad_attr = def;
    bad_attr.mutable_operators(0)->mutable_attributes()->clear();
    EXPECT_FALSE(cluster::from_wire(bad_attr).ok());
}

TEST(ClusterBackend, RefusesARankOfAnotherVersionOrDeviceCount) {
    const absl::Status version = start_cluster(2, 4, "other-version").status();
    EXPECT_EQ(version.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(version.message(), HasSubstr("rank 1 runs einsummabled other-version"));
    const absl::Status devices = start_cluster(2, 4, kVersion, 2).status();
    EXPECT_EQ(devices.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(devices.message(), HasSubstr("rank 1 has 2 devices; rank 0 expects 4 per rank"));
}

// A random plan over the 2 × 4 cluster's 8 devices, quick to synthesise.
CompileOptions random_plan_options() {
    CompileOptions options;
    options.devices = 8;
    options.planner = logical::Planner::random;
    options.seed = kClusterSeed;
    options.synthesis_iterations = 20;
    return options;
}

// Plans prepared at once hold message tags of their own, so their runs overlap over the cluster
// (no turns on the CPU backend): two plans run from two threads, again and again, each giving
// bitwise the single process's outputs. Without a range of tags per plan their messages would
// meet each other's.
TEST(ClusterBackend, PlansRunAtOnceOverTheClusterWithoutMeetingEachOthersMessages) {
    LocalCluster cluster = local_cluster(2, 4);
    ASSERT_NE(cluster.backend, nullptr);
    CompileOptions options = random_plan_options();
    const std::vector<std::string> workloads = {"ffn:tokens=48,d_model=16,d_ff=40",
                                                "chain:C,scale=256,dtype=f32"};
    std::vector<std::unique_ptr<Plan>> plans;
    std::vector<std::map<std::string, std::vector<std::byte>>> expected;
    std::vector<std::map<std::string, std::vector<float>>> inputs;
    for (const std::string& workload : workloads) {
        absl::StatusOr<std::unique_ptr<Plan>> single =
            Plan::compile(build(workload), options, cpu::make_cpu_backend({8, 1}));
        ASSERT_TRUE(single.ok()) << single.status();
        inputs.push_back(random_inputs((*single)->graph(), kClusterSeed));
        expected.push_back(run(**single, inputs.back()));
        absl::StatusOr<std::unique_ptr<Plan>> split =
            Plan::compile(build(workload), options, cluster.backend);
        ASSERT_TRUE(split.ok()) << split.status();
        plans.push_back(*std::move(split));
    }
    std::vector<std::thread> threads;
    std::vector<std::map<std::string, std::vector<std::byte>>> got(plans.size());
    for (size_t p = 0; p < plans.size(); ++p) {
        threads.emplace_back([&, p] {
            for (int round = 0; round < 10; ++round) {
                got[p] = run(*plans[p], inputs[p]);
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    for (size_t p = 0; p < plans.size(); ++p) {
        EXPECT_TRUE(got[p] == expected[p]) << workloads[p];
    }
}

// The tags are a finite range (MPI's MPI_TAG_UB): a plan that finds no range long enough is
// refused, saying so, and a released plan's range is taken again.
TEST(ClusterBackend, APlanFindingNoRangeOfTagsIsRefusedAndReleasedRangesAreReused) {
    CompileOptions options = random_plan_options();
    const std::string workload = "ffn:tokens=48,d_model=16,d_ff=40";
    absl::StatusOr<std::unique_ptr<Plan>> single =
        Plan::compile(build(workload), options, cpu::make_cpu_backend({8, 1}));
    ASSERT_TRUE(single.ok()) << single.status();
    absl::StatusOr<physical::RankSplit> split = physical::split_by_rank((*single)->exec_graph(), 4);
    ASSERT_TRUE(split.ok()) << split.status();
    const int messages = split->messages;
    ASSERT_GT(messages, 0);
    // Room for one plan's messages: tags 1 .. messages.
    absl::StatusOr<LocalCluster> cluster =
        start_cluster(2, 4, kVersion, -1, std::chrono::seconds(30), messages);
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    absl::StatusOr<std::unique_ptr<Plan>> first =
        Plan::compile(build(workload), options, cluster->backend);
    ASSERT_TRUE(first.ok()) << first.status();
    absl::StatusOr<std::unique_ptr<Plan>> second =
        Plan::compile(build(workload), options, cluster->backend);
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted) << second.status();
    EXPECT_THAT(second.status().message(),
                HasSubstr(absl::StrCat("needs ", messages, " message tags")));
    first->reset();
    absl::StatusOr<std::unique_ptr<Plan>> again =
        Plan::compile(build(workload), options, cluster->backend);
    ASSERT_TRUE(again.ok()) << again.status();
    const auto inputs = random_inputs((*single)->graph(), kClusterSeed);
    EXPECT_EQ(run(**again, inputs), run(**single, inputs));
}

// A rank whose backend could not be made (no GPU, say) still serves: rank 0's start stops at its
// Hello with the rank's reason, and its heartbeat and shutdown are answered.
TEST(ClusterBackend, ARankWithoutABackendStopsTheStartSayingWhy) {
    auto network = std::make_shared<LoopbackNetwork>(2);
    auto failed = std::make_shared<cluster::RankWorker>(
        1, absl::FailedPreconditionError("--backend=cuda: no GPU is visible"), kVersion);
    auto channel = std::make_shared<cluster::LocalRankChannel>(
        std::vector<std::shared_ptr<cluster::RankWorker>>{nullptr, failed}, network);
    cpu::CpuBackendOptions options;
    options.devices = 4;
    options.transport = network->transport(0);
    cluster::ClusterOptions cluster_options;
    cluster_options.version = kVersion;
    const absl::Status started =
        cluster::make_cluster_backend(std::shared_ptr<Backend>(cpu::make_cpu_backend(options)),
                                      channel, cluster_options)
            .status();
    EXPECT_EQ(started.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(started.message(), HasSubstr("rank 1 has no backend: --backend=cuda: no GPU"));
    for (bool shutdown : {false, true}) {
        v1::RankRequest request;
        request.set_id(7);
        if (shutdown) {
            request.mutable_shutdown();
        } else {
            request.mutable_ping();
        }
        EXPECT_EQ(failed->handle(request).code(), 0) << (shutdown ? "shutdown" : "ping");
    }
}

// Resident weights spread over the ranks: written through the cluster's resident memory, read
// in place by the parts on every rank.
TEST(ClusterBackend, ResidentWeightsLiveOnTheRanksOfTheirDevices) {
    const std::string workload = "ffn:tokens=48,d_model=16,d_ff=40";
    CompileOptions options;
    options.devices = 8;
    options.synthesis_iterations = 20;
    const ir::Graph graph = build(workload);
    for (ir::TensorId id : graph.inputs()) {
        if (graph.tensor(id).name != "x") {
            options.resident_inputs.insert(graph.tensor(id).name);
        }
    }
    ASSERT_FALSE(options.resident_inputs.empty());
    absl::StatusOr<std::unique_ptr<Plan>> single =
        Plan::compile(build(workload), options, cpu::make_cpu_backend({8, 1}));
    ASSERT_TRUE(single.ok()) << single.status();
    LocalCluster cluster = local_cluster(2, 4);
    ASSERT_NE(cluster.backend, nullptr);
    absl::StatusOr<std::unique_ptr<Plan>> split =
        Plan::compile(build(workload), options, cluster.backend);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_NE((*split)->resident(), nullptr);
    const auto inputs = random_inputs(graph, kClusterSeed);
    EXPECT_EQ(run(**split, inputs), run(**single, inputs));
}

// A rank that stops answering (here: its requests are kept unanswered, as a hung process's
// are) breaks the cluster within the rank timeout: the run in flight fails with Unavailable
// instead of waiting for the rank's messages, the backend's unrecoverable error names the rank
// and what it was handling, and later calls fail at once.
TEST(ClusterBackend, AHungRankFailsTheRunInFlightAndBreaksTheCluster) {
    LocalCluster cluster = local_cluster(2, 4, std::chrono::milliseconds(300));
    ASSERT_NE(cluster.backend, nullptr);
    CompileOptions options = random_plan_options();
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build("ffn:tokens=48,d_model=16,d_ff=40"), options, cluster.backend);
    ASSERT_TRUE(plan.ok()) << plan.status();
    for (const auto& [name, values] : random_inputs((*plan)->graph(), kClusterSeed)) {
        ASSERT_TRUE((*plan)->load(name, values).ok());
    }
    ASSERT_TRUE((*plan)->execute().ok());
    EXPECT_TRUE(cluster.backend->unrecoverable_error().ok());

    cluster.channel->pause(1);
    const auto start = std::chrono::steady_clock::now();
    const absl::Status run = (*plan)->execute();
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_EQ(run.code(), absl::StatusCode::kUnavailable) << run;
    EXPECT_THAT(run.message(), HasSubstr("rank 1 did not answer a heartbeat"));
    // Well before anything else would have ended it (the timeout is 0.3 s; wide margin for a
    // busy machine).
    EXPECT_LT(seconds, 20.0);
    const absl::Status broken = cluster.backend->unrecoverable_error();
    EXPECT_EQ(broken.code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(broken.message(), HasSubstr("it was handling 'run a plan'"));
    EXPECT_EQ((*plan)->execute().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(Plan::compile(build("ffn:tokens=48,d_model=16,d_ff=40"), options, cluster.backend)
                  .status()
                  .code(),
              absl::StatusCode::kUnavailable);
}

} // namespace
} // namespace einsummable::runtime
