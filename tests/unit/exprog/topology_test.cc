#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/topology.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

std::vector<std::string> route_names(const Topology& topology, int src, int dst) {
    std::vector<std::string> names;
    for (int r : topology.route(src, dst)) {
        names.push_back(topology.resources()[r].name);
    }
    return names;
}

double capacity(const Topology& topology, const std::string& name) {
    const int r = topology.find_resource(name);
    EXPECT_GE(r, 0) << name;
    return r < 0 ? 0.0 : topology.resources()[r].capacity;
}

TEST(Topology, BuiltinsAreTheFilesUnderDocs) {
    EXPECT_THAT(builtin_topology_names(),
                ElementsAre("dgx-a100", "dgx-h100", "dgx-v100", "dgx-a100-2nodes",
                            "dgx-a100-4nodes", "dgx-h100-2nodes", "dgx-h100-4nodes"));
    for (const std::string& name : builtin_topology_names()) {
        const std::string path =
            absl::StrCat(EINSUMMABLE_SOURCE_DIR, "/docs/topologies/", name, ".topo");
        std::ifstream file(path);
        ASSERT_TRUE(file) << path;
        std::stringstream contents;
        contents << file.rdbuf();
        absl::StatusOr<absl::string_view> text = builtin_topology_text(name);
        ASSERT_TRUE(text.ok()) << text.status();
        EXPECT_EQ(std::string(*text), contents.str()) << path << " and the string embedded in "
                                                      << "compiler/exprog/topology.cc differ";
        absl::StatusOr<Topology> topology = builtin_topology(name);
        ASSERT_TRUE(topology.ok()) << topology.status();
        EXPECT_EQ(topology->name(), name);
    }
}

TEST(Topology, UnknownBuiltinListsTheKnownOnes) {
    absl::StatusOr<Topology> topology = builtin_topology("dgx-b200");
    ASSERT_FALSE(topology.ok());
    EXPECT_EQ(topology.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(topology.status().message(), HasSubstr("'dgx-b200'"));
    EXPECT_THAT(topology.status().message(),
                HasSubstr("dgx-a100, dgx-h100, dgx-v100, dgx-a100-2nodes"));
}

TEST(Topology, DgxA100IsASwitch) {
    const Topology topology = *builtin_topology("dgx-a100");
    EXPECT_EQ(topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(topology.num_gpus(), 8);
    EXPECT_DOUBLE_EQ(topology.link_bandwidth(), 300e9);
    EXPECT_DOUBLE_EQ(topology.hbm_bandwidth(), 1555e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(), 2e-6);
    EXPECT_EQ(topology.resources().size(), 8u * 3u);
    EXPECT_THAT(route_names(topology, 2, 5), ElementsAre("egress(2)", "ingress(5)"));
    EXPECT_THAT(route_names(topology, 5, 2), ElementsAre("egress(5)", "ingress(2)"));
    EXPECT_TRUE(topology.route(3, 3).empty());
    EXPECT_TRUE(topology.route(0, 8).empty());
    EXPECT_TRUE(topology.route(-1, 0).empty());
    EXPECT_DOUBLE_EQ(capacity(topology, "egress(2)"), 300e9);
    EXPECT_DOUBLE_EQ(capacity(topology, "ingress(5)"), 300e9);
    EXPECT_EQ(topology.resources()[topology.hbm(4)].name, "hbm(4)");
    EXPECT_DOUBLE_EQ(topology.resources()[topology.hbm(4)].capacity, 1555e9);
}

TEST(Topology, DgxH100) {
    const Topology topology = *builtin_topology("dgx-h100");
    EXPECT_EQ(topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(topology.num_gpus(), 8);
    EXPECT_DOUBLE_EQ(topology.link_bandwidth(), 450e9);
    EXPECT_DOUBLE_EQ(topology.hbm_bandwidth(), 3350e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(), 2e-6);
}

// Two DGX H100 nodes (docs/topologies.md "Clusters"): a switch inside each node, a NIC per GPU
// between them, each with its own latency.
TEST(Topology, ClusterOfTwoDgxH100) {
    const Topology topology = *builtin_topology("dgx-h100-2nodes");
    EXPECT_EQ(topology.kind(), TopologyKind::cluster);
    EXPECT_EQ(topology.num_gpus(), 16);
    EXPECT_EQ(topology.nodes(), 2);
    EXPECT_EQ(topology.gpus_per_node(), 8);
    EXPECT_EQ(topology.node_of(7), 0);
    EXPECT_EQ(topology.node_of(8), 1);
    EXPECT_DOUBLE_EQ(topology.link_bandwidth(), 450e9);
    EXPECT_DOUBLE_EQ(topology.nic_bandwidth(), 50e9);
    EXPECT_THAT(route_names(topology, 1, 6), ElementsAre("egress(1)", "ingress(6)"));
    EXPECT_THAT(route_names(topology, 9, 14), ElementsAre("egress(9)", "ingress(14)"));
    EXPECT_THAT(route_names(topology, 1, 14), ElementsAre("nic-out(1)", "nic-in(14)"));
    EXPECT_THAT(route_names(topology, 14, 1), ElementsAre("nic-out(14)", "nic-in(1)"));
    EXPECT_DOUBLE_EQ(capacity(topology, "nic-in(14)"), 50e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(1, 6), 2e-6);
    EXPECT_DOUBLE_EQ(topology.latency_s(1, 14), 5e-6);
    EXPECT_DOUBLE_EQ(topology.nic_latency_s(), 5e-6);
    const Topology four = *builtin_topology("dgx-a100-4nodes");
    EXPECT_EQ(four.num_gpus(), 32);
    EXPECT_EQ(four.node_of(31), 3);
    EXPECT_DOUBLE_EQ(four.nic_bandwidth(), 25e9);
    // A single node is a switch: one node, no NIC.
    const Topology one = *builtin_topology("dgx-h100");
    EXPECT_EQ(one.nodes(), 1);
    EXPECT_EQ(one.nic_bandwidth(), 0.0);
    EXPECT_DOUBLE_EQ(one.latency_s(0, 7), 2e-6);
}

TEST(Topology, ClusterKeysAreChecked) {
    const std::string head = "name: x\ngpus: 12\nkind: cluster\nlink_bandwidth: 300 GB/s\n"
                             "hbm_bandwidth: 1555 GB/s\nlatency: 2 us\n";
    const std::string nic = "nic_bandwidth: 25 GB/s\nnic_latency: 5 us\n";
    absl::StatusOr<Topology> three = parse_topology(head + "nodes: 3\n" + nic);
    ASSERT_TRUE(three.ok()) << three.status();
    EXPECT_EQ(three->gpus_per_node(), 4);
    const std::vector<std::pair<std::string, std::string>> cases = {
        {head + "nodes: 5\n" + nic, "line 7: gpus (12) must be a multiple of nodes (5)"},
        {head + "nodes: 0\n" + nic, "line 7: nodes must be at least 1, got 0"},
        {head + "nodes: 3\nnic_latency: 5 us\n",
         "missing required key 'nic_bandwidth' (kind: cluster)"},
        {head + nic, "missing required key 'nodes' (kind: cluster)"},
        {head + "nodes: 3\n" + nic + "link: 0 1 25 GB/s\n",
         "link: lines apply only to kind: links (kind is cluster)"},
        {"name: x\ngpus: 8\nkind: switch\nlink_bandwidth: 300 GB/s\nhbm_bandwidth: 1555 GB/s\n"
         "latency: 2 us\nnodes: 2\n",
         "line 7: nodes applies only to kind: cluster (kind is switch)"},
    };
    for (const auto& [text, message] : cases) {
        absl::StatusOr<Topology> topology = parse_topology(text);
        ASSERT_FALSE(topology.ok()) << text;
        EXPECT_THAT(topology.status().message(), HasSubstr(message)) << text;
    }
    EXPECT_THAT(
        Topology::make_cluster("x", 2, 4, 300e9, 0.0, 1555e9, 2e-6, 5e-6).status().message(),
        HasSubstr("nic_bandwidth must be positive"));
}

// docs/workloads.md "Machines": the hybrid cube-mesh of the DGX-1.
TEST(Topology, DgxV100IsTheHybridCubeMesh) {
    const Topology topology = *builtin_topology("dgx-v100");
    EXPECT_EQ(topology.kind(), TopologyKind::links);
    EXPECT_EQ(topology.num_gpus(), 8);
    EXPECT_DOUBLE_EQ(topology.hbm_bandwidth(), 900e9);
    EXPECT_DOUBLE_EQ(topology.bridge_bandwidth(), 15.75e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(), 0.3e-6);
    const std::set<std::pair<int, int>> doubles = {{0, 3}, {0, 4}, {1, 2}, {1, 5},
                                                   {2, 3}, {4, 7}, {5, 6}, {6, 7}};
    const std::set<std::pair<int, int>> singles = {{0, 1}, {0, 2}, {1, 3}, {2, 6},
                                                   {3, 7}, {4, 5}, {4, 6}, {5, 7}};
    EXPECT_EQ(topology.links().size(), 16u);
    std::vector<int> links_per_gpu(8, 0);
    for (const Link& link : topology.links()) {
        const std::pair<int, int> pair{link.a, link.b};
        const bool is_double = doubles.contains(pair);
        EXPECT_TRUE(is_double || singles.contains(pair)) << link.a << "-" << link.b;
        EXPECT_DOUBLE_EQ(link.bandwidth, is_double ? 50e9 : 25e9);
        links_per_gpu[link.a] += is_double ? 2 : 1;
        links_per_gpu[link.b] += is_double ? 2 : 1;
    }
    EXPECT_THAT(links_per_gpu, ::testing::Each(6)); // six NVLinks per V100
    int unlinked = 0;
    for (int a = 0; a < 8; ++a) {
        for (int b = 0; b < 8; ++b) {
            if (a == b) {
                continue;
            }
            const std::pair<int, int> pair = std::minmax(a, b);
            if (doubles.contains(pair) || singles.contains(pair)) {
                const std::string link = absl::StrCat("link(", a, "->", b, ")");
                EXPECT_THAT(route_names(topology, a, b), ElementsAre(link));
                EXPECT_DOUBLE_EQ(capacity(topology, link), doubles.contains(pair) ? 50e9 : 25e9);
            } else {
                EXPECT_THAT(route_names(topology, a, b), ElementsAre("pcie-bridge")) << a << b;
                ++unlinked;
            }
        }
    }
    EXPECT_EQ(unlinked, 2 * 12);
    EXPECT_DOUBLE_EQ(capacity(topology, "pcie-bridge"), 15.75e9);
    // 8 hbm + 32 directed links + the bridge.
    EXPECT_EQ(topology.resources().size(), 8u + 32u + 1u);
}

TEST(Topology, TextRoundTrips) {
    for (const std::string& name : builtin_topology_names()) {
        const Topology topology = *builtin_topology(name);
        const std::string text = topology.to_text();
        absl::StatusOr<Topology> again = parse_topology(text);
        ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
        EXPECT_EQ(again->to_text(), text);
        EXPECT_EQ(again->resources().size(), topology.resources().size());
        for (size_t r = 0; r < topology.resources().size(); ++r) {
            EXPECT_EQ(again->resources()[r].name, topology.resources()[r].name);
            EXPECT_DOUBLE_EQ(again->resources()[r].capacity, topology.resources()[r].capacity);
        }
        EXPECT_DOUBLE_EQ(again->latency_s(), topology.latency_s());
    }
}

TEST(Topology, UnitsAndSpelling) {
    absl::StatusOr<Topology> topology = parse_topology(R"(
        name: small box      # a name may have spaces
        gpus:2
        kind : switch
        link_bandwidth: 1500MB/s
        hbm_bandwidth: 1.5e3 GB/s
        latency: 750 ns
    )");
    ASSERT_TRUE(topology.ok()) << topology.status();
    EXPECT_EQ(topology->name(), "small box");
    EXPECT_EQ(topology->num_gpus(), 2);
    EXPECT_DOUBLE_EQ(topology->link_bandwidth(), 1.5e9);
    EXPECT_DOUBLE_EQ(topology->hbm_bandwidth(), 1.5e12);
    EXPECT_DOUBLE_EQ(topology->latency_s(), 750e-9);
    for (const auto& [latency, seconds] : std::vector<std::pair<std::string, double>>{
             {"3 ms", 3e-3}, {"2 s", 2.0}, {"4 us", 4e-6}, {"4 µs", 4e-6}, {"0 us", 0.0}}) {
        absl::StatusOr<Topology> parsed = parse_topology(absl::StrCat(
            "name: t\ngpus: 1\nkind: switch\nlink_bandwidth: 1 TB/s\nhbm_bandwidth: 1 GB/s\n"
            "latency: ",
            latency, "\n"));
        ASSERT_TRUE(parsed.ok()) << parsed.status();
        EXPECT_DOUBLE_EQ(parsed->latency_s(), seconds) << latency;
    }
}

TEST(Topology, FullyLinkedMachineNeedsNoBridge) {
    absl::StatusOr<Topology> topology = parse_topology(
        "name: triangle\ngpus: 3\nkind: links\nhbm_bandwidth: 100 GB/s\nlatency: 1 us\n"
        "link: 0 1 10 GB/s\nlink: 2 1 20 GB/s\nlink: 0 2 30 GB/s\n");
    ASSERT_TRUE(topology.ok()) << topology.status();
    EXPECT_EQ(topology->find_resource("pcie-bridge"), -1);
    EXPECT_THAT(route_names(*topology, 1, 2), ElementsAre("link(1->2)"));
    EXPECT_DOUBLE_EQ(capacity(*topology, "link(1->2)"), 20e9);
    EXPECT_DOUBLE_EQ(capacity(*topology, "link(2->1)"), 20e9);
    EXPECT_EQ(topology->links().front().a, 0);
    EXPECT_EQ(topology->links().back().b, 2);
}

// The example of docs/topologies.md.
TEST(Topology, DocumentedLinksExample) {
    absl::StatusOr<Topology> topology = parse_topology(R"(
name: my-box
gpus: 4
kind: links
hbm_bandwidth: 900 GB/s
latency: 1 us
bridge_bandwidth: 16 GB/s    # 0-2 and 1-3 have no link
link: 0 1 50 GB/s
link: 1 2 25 GB/s
link: 2 3 50 GB/s
link: 3 0 25 GB/s
)");
    ASSERT_TRUE(topology.ok()) << topology.status();
    EXPECT_THAT(route_names(*topology, 2, 0), ElementsAre("pcie-bridge"));
    EXPECT_THAT(route_names(*topology, 0, 3), ElementsAre("link(0->3)"));
    EXPECT_DOUBLE_EQ(capacity(*topology, "link(0->3)"), 25e9);
}

struct BadText {
    std::string text;
    std::string message;
};

TEST(Topology, ErrorsNameTheProblemAndTheLine) {
    const std::string a100 = "name: x\ngpus: 8\nkind: switch\nlink_bandwidth: 300 GB/s\n"
                             "hbm_bandwidth: 1555 GB/s\n";
    const std::string v100 =
        "name: x\ngpus: 4\nkind: links\nhbm_bandwidth: 900 GB/s\nlatency: 1 us\n"
        "bridge_bandwidth: 15.75 GB/s\n";
    const std::vector<BadText> cases = {
        {a100 + "latency: 2 us\ncolour: blue\n", "line 7: unknown key 'colour'"},
        {a100 + "latency: fast\n", "line 6: latency: bad number in 'fast'"},
        {a100 + "latency: 2 hours\n", "line 6: latency: bad unit 'hours'"},
        {a100 + "latency: 2\n", "line 6: latency: missing unit in '2'"},
        {a100 + "latency: -2 us\n", "line 6: latency must not be negative"},
        {"name: x\ngpus: eight\n", "line 2: gpus: bad number 'eight'"},
        {"name: x\ngpus: 8.5\n", "line 2: gpus: bad number '8.5'"},
        {"name: x\ngpus: 0\n", "line 2: gpus must be at least 1, got 0"},
        {"name: x\ngpus: -3\n", "line 2: gpus must be at least 1, got -3"},
        {"# a comment\n\nname: x\nlink_bandwidth: 300 Gb/s\n",
         "line 4: link_bandwidth: bad unit 'Gb/s'"},
        {"name: x\nhbm_bandwidth: 0 GB/s\n", "line 2: hbm_bandwidth must be positive"},
        {"name: x\nname: y\n", "line 2: duplicate key 'name' (first given on line 1)"},
        {"name: x\ngpus\n", "line 2: expected 'key: value', got 'gpus'"},
        {"name:\n", "line 1: name: missing value"},
        {"name: x\nkind: torus\n", "line 2: unknown kind 'torus'"},
        {a100, "missing required key 'latency'"},
        {"gpus: 8\n", "missing required key 'name'"},
        {"name: x\ngpus: 8\nkind: switch\nhbm_bandwidth: 1 GB/s\nlatency: 1 us\n",
         "missing required key 'link_bandwidth'"},
        {a100 + "latency: 2 us\nlink: 0 1 25 GB/s\n",
         "line 7: link: lines apply only to kind: links"},
        {a100 + "latency: 2 us\nbridge_bandwidth: 1 GB/s\n",
         "line 7: bridge_bandwidth applies only to kind: links"},
        {v100 + "link_bandwidth: 25 GB/s\n", "line 7: link_bandwidth applies only to kind: switch"},
        {v100 + "link: 0 4 25 GB/s\n", "line 7: link 0-4: GPU 4 out of range (gpus: 4"},
        {v100 + "link: -1 2 25 GB/s\n", "line 7: link -1-2: GPU -1 out of range"},
        {v100 + "link: 0 1 25 GB/s\nlink: 1 0 50 GB/s\n",
         "line 8: duplicate link 1-0 (first given on line 7)"},
        {v100 + "link: 2 2 25 GB/s\n", "line 7: link from GPU 2 to itself"},
        {v100 + "link: 0 1\n", "line 7: link: expected 'link: A B <bandwidth>'"},
        {v100 + "link: 0 one 25 GB/s\n", "line 7: link: bad number 'one'"},
        {v100 + "link: 0 1 25 Gbit/s\n", "line 7: link: bad unit 'Gbit/s'"},
        {v100 + "link: 0 1 0 GB/s\n", "line 7: link: bandwidth must be positive"},
        {"name: x\ngpus: 3\nkind: links\nhbm_bandwidth: 1 GB/s\nlatency: 1 us\nlink: 0 1 1 GB/s\n",
         "missing required key 'bridge_bandwidth' (pairs without a link: 0-2, 1-2)"},
        {"name: x\ngpus: 100000\n", "line 2: gpus must be at most 1024"},
        {a100 + "latency: 2 us\npeak_f16: 312 TB/s\n", "line 7: peak_f16: bad unit 'TB/s'"},
        {a100 + "latency: 2 us\npeak_bf16: 0 TFLOP/s\n", "line 7: peak_bf16 must be positive"},
        {a100 + "latency: 2 us\nmemory: 40 GB/s\n", "line 7: memory: bad unit 'GB/s'"},
        {a100 + "latency: 2 us\ncompute_efficiency: 1.5\n",
         "line 7: compute_efficiency: expected a number in (0, 1], got '1.5'"},
        {a100 + "latency: 2 us\nmemory_efficiency: high\n",
         "line 7: memory_efficiency: expected a number in (0, 1]"},
        {a100 + "latency: 2 us\nlaunch_overhead: -1 us\n",
         "line 7: launch_overhead must not be negative"},
    };
    for (const BadText& bad : cases) {
        absl::StatusOr<Topology> topology = parse_topology(bad.text);
        ASSERT_FALSE(topology.ok()) << bad.text;
        EXPECT_EQ(topology.status().code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(topology.status().message(), HasSubstr(bad.message)) << bad.text;
    }
}

TEST(Topology, DevicesOfTheBuiltins) {
    // Datasheet peaks (dense, no sparsity) and capacities: docs/topologies.md "Devices".
    const DeviceModel a100 = builtin_topology("dgx-a100")->device();
    EXPECT_DOUBLE_EQ(a100.peak_f16, 312e12);
    EXPECT_DOUBLE_EQ(a100.peak_bf16, 312e12);
    EXPECT_DOUBLE_EQ(a100.peak_f32, 19.5e12);
    EXPECT_DOUBLE_EQ(a100.memory_bytes, 40e9);
    const DeviceModel h100 = builtin_topology("dgx-h100")->device();
    EXPECT_DOUBLE_EQ(h100.peak_f16, 989e12);
    EXPECT_DOUBLE_EQ(h100.memory_bytes, 80e9);
    const DeviceModel v100 = builtin_topology("dgx-v100")->device();
    EXPECT_DOUBLE_EQ(v100.peak_f16, 125e12);
    EXPECT_EQ(v100.peak_bf16, 0.0); // V100 has no bf16 tensor cores
    EXPECT_DOUBLE_EQ(v100.memory_bytes, 32e9);
    for (const DeviceModel& device : {a100, h100, v100}) {
        EXPECT_DOUBLE_EQ(device.compute_efficiency, 0.75);
        EXPECT_DOUBLE_EQ(device.memory_efficiency, 0.85);
        EXPECT_DOUBLE_EQ(device.launch_overhead_s, 3e-6);
        // No published figure for the memory-bound classes: they keep the shared one.
        for (KernelClass kernel_class : {KernelClass::elementwise, KernelClass::norm}) {
            EXPECT_EQ(device.efficiency(kernel_class), ClassEfficiency{});
        }
    }
    // Published fractions of peak (docs/topologies.md "Kernel classes").
    EXPECT_DOUBLE_EQ(a100.compute_efficiency_of(KernelClass::gemm), 0.859);
    EXPECT_DOUBLE_EQ(a100.compute_efficiency_of(KernelClass::attention), 0.73);
    EXPECT_DOUBLE_EQ(h100.compute_efficiency_of(KernelClass::gemm), 0.801);
    EXPECT_DOUBLE_EQ(h100.compute_efficiency_of(KernelClass::attention), 0.748);
    for (const DeviceModel& device : {a100, h100}) {
        EXPECT_DOUBLE_EQ(device.compute_efficiency_of(KernelClass::elementwise), 0.75);
        EXPECT_DOUBLE_EQ(device.memory_efficiency_of(KernelClass::gemm), 0.85);
    }
    // V100: a GEMM figure only; attention keeps the shared fraction (no V100 figure found).
    EXPECT_DOUBLE_EQ(v100.compute_efficiency_of(KernelClass::gemm), 0.90);
    for (KernelClass kernel_class : support::kKernelClasses) {
        if (kernel_class != KernelClass::gemm) {
            EXPECT_EQ(v100.efficiency(kernel_class), ClassEfficiency{});
        }
    }
}

constexpr absl::string_view kCpuHead =
    "name: cpu\ngpus: 2\nkind: switch\nlink_bandwidth: 10 GB/s\nhbm_bandwidth: 20 GB/s\n"
    "latency: 1 us\npeak_f32: 150 GFLOP/s\n";

TEST(Topology, SharedEfficienciesApplyToEveryClass) {
    // A file from before the per-class keys: one pair of fractions for every kernel.
    absl::StatusOr<Topology> topology = parse_topology(
        absl::StrCat(kCpuHead, "compute_efficiency: 0.5\nmemory_efficiency: 0.25\n"));
    ASSERT_TRUE(topology.ok()) << topology.status();
    for (KernelClass kernel_class : support::kKernelClasses) {
        EXPECT_DOUBLE_EQ(topology->device().compute_efficiency_of(kernel_class), 0.5);
        EXPECT_DOUBLE_EQ(topology->device().memory_efficiency_of(kernel_class), 0.25);
    }
    // And to_text writes no per-class key for it.
    EXPECT_THAT(topology->to_text(), Not(HasSubstr("gemm_")));
}

TEST(Topology, PerClassKeysOverrideTheSharedOnes) {
    absl::StatusOr<Topology> topology = parse_topology(absl::StrCat(
        kCpuHead, "compute_efficiency: 0.5\nmemory_efficiency: 0.25\ngemm_compute_efficiency: 0.9\n"
                  "attention_compute_efficiency: 0.6\nattention_memory_efficiency: 0.7\n"
                  "elementwise_memory_efficiency: 1\nnorm_memory_efficiency: 0.4\n"
                  "other_compute_efficiency: 0.125\n"));
    ASSERT_TRUE(topology.ok()) << topology.status();
    const DeviceModel& device = topology->device();
    EXPECT_DOUBLE_EQ(device.compute_efficiency_of(KernelClass::gemm), 0.9);
    EXPECT_DOUBLE_EQ(device.memory_efficiency_of(KernelClass::gemm), 0.25); // shared
    EXPECT_DOUBLE_EQ(device.compute_efficiency_of(KernelClass::attention), 0.6);
    EXPECT_DOUBLE_EQ(device.memory_efficiency_of(KernelClass::attention), 0.7);
    EXPECT_DOUBLE_EQ(device.compute_efficiency_of(KernelClass::elementwise), 0.5);
    EXPECT_DOUBLE_EQ(device.memory_efficiency_of(KernelClass::elementwise), 1.0);
    EXPECT_DOUBLE_EQ(device.memory_efficiency_of(KernelClass::norm), 0.4);
    EXPECT_DOUBLE_EQ(device.compute_efficiency_of(KernelClass::other), 0.125);
    EXPECT_DOUBLE_EQ(device.compute_efficiency, 0.5);
}

TEST(Topology, DeviceModelRoundTripsWithAndWithoutClassKeys) {
    for (const std::string& extra :
         {std::string(""), std::string("compute_efficiency: 0.625\n"),
          std::string("gemm_compute_efficiency: 0.859\nnorm_memory_efficiency: 0.3\n"
                      "other_memory_efficiency: 0.0625\nmemory_efficiency: 0.5\n")}) {
        absl::StatusOr<Topology> topology = parse_topology(absl::StrCat(kCpuHead, extra));
        ASSERT_TRUE(topology.ok()) << topology.status() << extra;
        absl::StatusOr<Topology> again = parse_topology(topology->to_text());
        ASSERT_TRUE(again.ok()) << again.status() << topology->to_text();
        EXPECT_EQ(again->device(), topology->device()) << topology->to_text();
        EXPECT_EQ(again->to_text(), topology->to_text());
    }
    for (const std::string& name : builtin_topology_names()) {
        const Topology builtin = *builtin_topology(name);
        absl::StatusOr<Topology> again = parse_topology(builtin.to_text());
        ASSERT_TRUE(again.ok()) << again.status();
        EXPECT_EQ(again->device(), builtin.device()) << name;
    }
}

TEST(Topology, PerClassKeysAreChecked) {
    absl::StatusOr<Topology> topology =
        parse_topology(absl::StrCat(kCpuHead, "gemm_compute_efficiency: 1.5\n"));
    ASSERT_FALSE(topology.ok());
    EXPECT_THAT(topology.status().message(),
                HasSubstr("line 8: gemm_compute_efficiency: expected a number in (0, 1], got "
                          "'1.5'"));
    topology = parse_topology(
        absl::StrCat(kCpuHead, "norm_memory_efficiency: 0.5\nnorm_memory_efficiency: 0.5\n"));
    ASSERT_FALSE(topology.ok());
    EXPECT_THAT(topology.status().message(), HasSubstr("duplicate key 'norm_memory_efficiency'"));
    topology = parse_topology(absl::StrCat(kCpuHead, "matmul_compute_efficiency: 0.5\n"));
    ASSERT_FALSE(topology.ok());
    EXPECT_THAT(topology.status().message(), HasSubstr("unknown key 'matmul_compute_efficiency'"));
}

TEST(Topology, KernelSecondsTakesTheClassesOwnEfficiencies) {
    DeviceModel device;
    device.compute_efficiency = 0.5;
    device.memory_efficiency = 0.5;
    device.launch_overhead_s = 1e-6;
    device.efficiency(KernelClass::gemm).compute = 0.8;
    device.efficiency(KernelClass::elementwise).memory = 1.0;
    const double hbm = 100e9, peak = 10e12;
    // Compute-bound: 8e9 FLOPs, 1 MB.
    EXPECT_DOUBLE_EQ(kernel_seconds(device, KernelClass::gemm, hbm, peak, 8e9, 1e6),
                     8e9 / (10e12 * 0.8) + 1e-6);
    EXPECT_DOUBLE_EQ(kernel_seconds(device, KernelClass::elementwise, hbm, peak, 8e9, 1e6),
                     8e9 / (10e12 * 0.5) + 1e-6);
    // Memory-bound: 1e6 FLOPs, 1 GB.
    EXPECT_DOUBLE_EQ(kernel_seconds(device, KernelClass::elementwise, hbm, peak, 1e6, 1e9),
                     1e9 / 100e9 + 1e-6);
    EXPECT_DOUBLE_EQ(kernel_seconds(device, KernelClass::gemm, hbm, peak, 1e6, 1e9),
                     1e9 / (100e9 * 0.5) + 1e-6);
    EXPECT_DOUBLE_EQ(kernel_seconds(device, KernelClass::norm, hbm, peak, 0.0, 1e9),
                     1e9 / (100e9 * 0.5) + 1e-6);
}

TEST(Topology, DeviceKeysParseWithTheirUnitsAndDefaults) {
    absl::StatusOr<Topology> topology = parse_topology(
        "name: cpu\ngpus: 2\nkind: switch\nlink_bandwidth: 10 GB/s\nhbm_bandwidth: 20 GB/s\n"
        "latency: 1 us\npeak_f32: 150 GFLOP/s\nmemory: 2 GiB\ncompute_efficiency: 1\n"
        "launch_overhead: 500 ns\n");
    ASSERT_TRUE(topology.ok()) << topology.status();
    const DeviceModel& device = topology->device();
    EXPECT_DOUBLE_EQ(device.peak_f32, 150e9);
    EXPECT_EQ(device.peak_f16, 0.0);
    EXPECT_DOUBLE_EQ(device.memory_bytes, 2.0 * 1024 * 1024 * 1024);
    EXPECT_DOUBLE_EQ(device.compute_efficiency, 1.0);
    EXPECT_DOUBLE_EQ(device.memory_efficiency, 0.85); // the default
    EXPECT_DOUBLE_EQ(device.launch_overhead_s, 500e-9);
    absl::StatusOr<Topology> again = parse_topology(topology->to_text());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_DOUBLE_EQ(again->device().memory_bytes, device.memory_bytes);
    EXPECT_DOUBLE_EQ(again->device().peak_f32, device.peak_f32);
    EXPECT_DOUBLE_EQ(again->device().launch_overhead_s, device.launch_overhead_s);
}

TEST(Topology, HostLinkOfTheBuiltinsAndItsDefault) {
    // PCIe to the host, device to host, per GPU (docs/topologies.md "Host link").
    EXPECT_DOUBLE_EQ(builtin_topology("dgx-v100")->host_bandwidth(), 12e9);
    EXPECT_DOUBLE_EQ(builtin_topology("dgx-a100")->host_bandwidth(), 25e9);
    EXPECT_DOUBLE_EQ(builtin_topology("dgx-h100")->host_bandwidth(), 50e9);
    const std::string base =
        "name: box\ngpus: 2\nkind: switch\nlink_bandwidth: 10 GB/s\nhbm_bandwidth: 20 GB/s\n"
        "latency: 1 us\n";
    // A file without the key (every file before it existed) takes the default, and prints
    // none.
    absl::StatusOr<Topology> plain = parse_topology(base);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_DOUBLE_EQ(plain->host_bandwidth(), kDefaultHostBandwidth);
    EXPECT_THAT(plain->to_text(), Not(HasSubstr("host_bandwidth")));
    absl::StatusOr<Topology> given = parse_topology(base + "host_bandwidth: 32 GB/s\n");
    ASSERT_TRUE(given.ok()) << given.status();
    EXPECT_DOUBLE_EQ(given->host_bandwidth(), 32e9);
    absl::StatusOr<Topology> again = parse_topology(given->to_text());
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_DOUBLE_EQ(again->host_bandwidth(), 32e9);
    // Resizing keeps it.
    absl::StatusOr<Topology> resized = resized_switch(*given, 16);
    ASSERT_TRUE(resized.ok()) << resized.status();
    EXPECT_DOUBLE_EQ(resized->host_bandwidth(), 32e9);
    EXPECT_THAT(parse_topology(base + "host_bandwidth: 0 GB/s\n").status().message(),
                HasSubstr("line 7: host_bandwidth must be positive"));
    EXPECT_FALSE(plain->with_host_bandwidth(-1.0).ok());
}

TEST(Topology, WithDeviceValidates) {
    const Topology topology = *builtin_topology("dgx-a100");
    DeviceModel device;
    device.compute_efficiency = 0.0;
    EXPECT_THAT(topology.with_device(device).status().message(),
                HasSubstr("compute_efficiency must be in (0, 1]"));
    device = DeviceModel{};
    device.peak_f16 = -1;
    EXPECT_THAT(topology.with_device(device).status().message(),
                HasSubstr("peak_f16 must be finite and not negative"));
    device = DeviceModel{};
    device.efficiency(KernelClass::attention).memory = 1.5;
    EXPECT_THAT(topology.with_device(device).status().message(),
                HasSubstr("attention_memory_efficiency must be in (0, 1], got 1.5"));
    device = DeviceModel{};
    device.launch_overhead_s = -1;
    EXPECT_THAT(topology.with_device(device).status().message(), HasSubstr("launch_overhead"));
    device = DeviceModel{};
    device.peak_f32 = 1e12;
    absl::StatusOr<Topology> with = topology.with_device(device);
    ASSERT_TRUE(with.ok());
    EXPECT_EQ(with->device(), device);
    EXPECT_EQ(with->resources().size(), topology.resources().size());
}

TEST(Topology, ConstructorsValidate) {
    EXPECT_FALSE(Topology::make_switch("x", 0, 1e9, 1e9, 0).ok());
    EXPECT_FALSE(Topology::make_switch("x", 2, 0, 1e9, 0).ok());
    EXPECT_FALSE(Topology::make_switch("x", 2, 1e9, -1, 0).ok());
    EXPECT_FALSE(Topology::make_switch("x", 2, 1e9, 1e9, -1e-6).ok());
    EXPECT_TRUE(Topology::make_switch("x", 1, 1e9, 1e9, 0).ok());
    EXPECT_FALSE(Topology::make_links("x", 2, {{0, 2, 1e9}}, 1e9, 1e9, 0).ok());
    EXPECT_FALSE(Topology::make_links("x", 2, {{0, 1, 1e9}, {1, 0, 1e9}}, 0, 1e9, 0).ok());
    EXPECT_FALSE(Topology::make_links("x", 3, {{0, 1, 1e9}}, 0, 1e9, 0).ok()); // needs a bridge
    EXPECT_TRUE(Topology::make_links("x", 2, {{1, 0, 1e9}}, 0, 1e9, 0).ok());
}

} // namespace
} // namespace einsummable::exprog
