#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/exprog/topology.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda/device_info.h"
#include "runtime/cuda/device_discovery.h"
#include "runtime/cuda/nvml_loader.h"
#include "tests/unit/gpu_required.h"

// topology_from on recorded answers of the machines of docs/topologies.md and of boxes without
// NVLink or NVML; then query_gpus() on this machine (zero GPUs without a GPU, sane answers with
// one).

namespace einsummable::runtime::cuda {
namespace {

using exprog::Link;
using exprog::Topology;
using exprog::TopologyKind;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string gpu_bus_id(int gpu_idx) {
    return absl::StrFormat("0000:%02x:00.0", 0x18 + 0x10 * gpu_idx);
}

std::string switch_bus_id(int switch_idx) {
    return absl::StrFormat("0000:%02x:00.0", 0xc0 + switch_idx);
}

GpuAnswer gpu(int gpu_idx, std::string name, int64_t memory_bytes, int cc_major, int cc_minor,
              int sms) {
    GpuAnswer answer;
    answer.device_idx = gpu_idx;
    answer.name = std::move(name);
    answer.total_memory_bytes = memory_bytes;
    answer.compute_capability_major = cc_major;
    answer.compute_capability_minor = cc_minor;
    answer.multiprocessor_count = sms;
    answer.pci_bus_id = gpu_bus_id(gpu_idx);
    return answer;
}

// Every pair has peer access unless `no_peer` says otherwise.
GpuAnswers machine(std::vector<GpuAnswer> gpus, bool nvml_available,
                   const std::vector<std::pair<int, int>>& no_peer = {}) {
    GpuAnswers answers;
    const size_t n = gpus.size();
    answers.gpus = std::move(gpus);
    answers.peers.assign(n, std::vector<PeerAnswer>(n));
    for (size_t src = 0; src < n; ++src) {
        for (size_t dst = 0; dst < n; ++dst) {
            if (src != dst) {
                answers.peers[src][dst] = PeerAnswer{true, 0, true, true};
            }
        }
    }
    for (auto [src, dst] : no_peer) {
        answers.peers[src][dst] = PeerAnswer{};
    }
    answers.nvml_available = nvml_available;
    answers.nvml_status =
        nvml_available ? "NVML loaded"
                       : "dlopen(libnvidia-ml.so.1): libnvidia-ml.so.1: cannot open shared object "
                         "file: No such file or directory (no NVIDIA driver's NVML on this "
                         "machine)";
    return answers;
}

// `links` NVLinks per GPU, link l to NVSwitch l % switches.
GpuAnswers nvswitch_machine(const std::string& name, int64_t memory_bytes, int cc_major, int sms,
                            int links, int switches,
                            NvLinkRemote remote_type = NvLinkRemote::nvswitch) {
    std::vector<GpuAnswer> gpus;
    for (int gpu_idx = 0; gpu_idx < 8; ++gpu_idx) {
        GpuAnswer answer = gpu(gpu_idx, name, memory_bytes, cc_major, 0, sms);
        for (int link = 0; link < links; ++link) {
            answer.nvlinks.push_back(
                NvLinkAnswer{link, true, switch_bus_id(link % switches), remote_type});
        }
        gpus.push_back(std::move(answer));
    }
    return machine(std::move(gpus), true);
}

GpuAnswers dgx_h100() {
    return nvswitch_machine("NVIDIA H100 80GB HBM3", 85520809984, 9, 132, 18, 4);
}

GpuAnswers dgx_a100(NvLinkRemote remote_type = NvLinkRemote::nvswitch) {
    return nvswitch_machine("NVIDIA A100-SXM4-40GB", 42505273344, 8, 108, 12, 6, remote_type);
}

// DGX-1 V100 hybrid cube-mesh, the pairs of docs/topologies.md, one NVLink per listed link.
GpuAnswers dgx_v100() {
    const std::vector<std::pair<int, int>> double_links = {{0, 3}, {0, 4}, {1, 2}, {1, 5},
                                                           {2, 3}, {4, 7}, {5, 6}, {6, 7}};
    const std::vector<std::pair<int, int>> single_links = {{0, 1}, {0, 2}, {1, 3}, {2, 6},
                                                           {3, 7}, {4, 5}, {4, 6}, {5, 7}};
    std::vector<GpuAnswer> gpus;
    for (int gpu_idx = 0; gpu_idx < 8; ++gpu_idx) {
        gpus.push_back(gpu(gpu_idx, "Tesla V100-SXM2-32GB", 34089730048, 7, 0, 80));
    }
    auto connect = [&](int a, int b) {
        for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
            GpuAnswer& answer = gpus[from];
            answer.nvlinks.push_back(NvLinkAnswer{static_cast<int>(answer.nvlinks.size()), true,
                                                  gpu_bus_id(to), NvLinkRemote::gpu});
        }
    };
    for (auto [a, b] : double_links) {
        connect(a, b);
        connect(a, b);
    }
    for (auto [a, b] : single_links) {
        connect(a, b);
    }
    return machine(std::move(gpus), true);
}

DiscoveredTopology discover(const GpuAnswers& answers, std::vector<int> device_list) {
    absl::StatusOr<DiscoveredTopology> discovered = topology_from(answers, device_list);
    EXPECT_TRUE(discovered.ok()) << discovered.status();
    if (!discovered.ok()) {
        // A placeholder the assertions that follow will fail on.
        return DiscoveredTopology{*Topology::make_switch("failed", 1, 1, 1, 0), "", {}};
    }
    return *std::move(discovered);
}

void expect_same_as_builtin(const Topology& topology, const std::string& builtin) {
    absl::StatusOr<Topology> known = exprog::builtin_topology(builtin);
    ASSERT_TRUE(known.ok()) << known.status();
    EXPECT_EQ(topology.to_text(), known->to_text());
}

std::vector<std::tuple<int, int, double>> link_tuples(const std::vector<Link>& links) {
    std::vector<std::tuple<int, int, double>> tuples;
    for (const Link& link : links) {
        tuples.emplace_back(link.a, link.b, link.bandwidth);
    }
    return tuples;
}

TEST(TopologyFrom, DgxH100IsTheBuiltinSwitch) {
    const DiscoveredTopology discovered = discover(dgx_h100(), {0, 1, 2, 3, 4, 5, 6, 7});
    const Topology& topology = discovered.topology;
    EXPECT_EQ(topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(topology.num_gpus(), 8);
    EXPECT_DOUBLE_EQ(topology.link_bandwidth(), 450e9);
    EXPECT_DOUBLE_EQ(topology.hbm_bandwidth(), 3350e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(), 2e-6);
    EXPECT_EQ(topology.name(), "dgx-h100");
    expect_same_as_builtin(topology, "dgx-h100");
    EXPECT_THAT(discovered.explanation, HasSubstr("8 x NVIDIA H100 80GB HBM3 (sm_90"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("NVSwitch seen on every GPU's 18 active NVLinks"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("18 links x 25 GB/s (NVLink4, sm_9x) = 450 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("H100 SXM: HBM 3350 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("peer access between every pair"));
    EXPECT_THAT(discovered.explanation, HasSubstr("built-in dgx-h100"));
    ASSERT_EQ(discovered.devices.size(), 8u);
    EXPECT_EQ(discovered.devices[5].device_idx, 5);
    EXPECT_EQ(discovered.devices[5].pci_bus_id, gpu_bus_id(5));
}

TEST(TopologyFrom, DgxA100IsTheBuiltinSwitch) {
    const DiscoveredTopology discovered = discover(dgx_a100(), {0, 1, 2, 3, 4, 5, 6, 7});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(discovered.topology.num_gpus(), 8);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 300e9);
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 1555e9);
    EXPECT_EQ(discovered.topology.name(), "dgx-a100");
    expect_same_as_builtin(discovered.topology, "dgx-a100");
    EXPECT_THAT(discovered.explanation, HasSubstr("every GPU's 12 active NVLinks"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("12 links x 25 GB/s (NVLink3, sm_8x) = 300 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("A100 40 GB: HBM 1555 GB/s"));
    EXPECT_THAT(discovered.explanation, Not(HasSubstr("taken for NVSwitches")));
}

TEST(TopologyFrom, OldDriverWithoutRemoteTypesStillFindsTheSwitch) {
    const DiscoveredTopology discovered =
        discover(dgx_a100(NvLinkRemote::unknown), {0, 1, 2, 3, 4, 5, 6, 7});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 300e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("taken for NVSwitches"));
}

TEST(TopologyFrom, SwitchBandwidthIsTheFewestLinks) {
    GpuAnswers answers = dgx_h100();
    answers.gpus[3].nvlinks[17].active = false;
    answers.gpus[3].nvlinks[16].active = false;
    const DiscoveredTopology discovered = discover(answers, {0, 1, 2, 3, 4, 5, 6, 7});
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 16 * 25e9);
    EXPECT_EQ(discovered.topology.name(), "discovered");
    EXPECT_THAT(discovered.explanation, HasSubstr("the fewest NVSwitch links, 16 on GPU 3"));
}

TEST(TopologyFrom, DgxV100CubeMeshIsTheBuiltinLinks) {
    const DiscoveredTopology discovered = discover(dgx_v100(), {0, 1, 2, 3, 4, 5, 6, 7});
    const Topology& topology = discovered.topology;
    absl::StatusOr<Topology> known = exprog::builtin_topology("dgx-v100");
    ASSERT_TRUE(known.ok()) << known.status();
    EXPECT_EQ(topology.kind(), TopologyKind::links);
    EXPECT_EQ(topology.num_gpus(), 8);
    EXPECT_EQ(link_tuples(topology.links()), link_tuples(known->links()));
    EXPECT_EQ(topology.links().size(), 16u);
    EXPECT_DOUBLE_EQ(topology.bridge_bandwidth(), 15.75e9);
    EXPECT_DOUBLE_EQ(topology.hbm_bandwidth(), 900e9);
    EXPECT_DOUBLE_EQ(topology.latency_s(), 0.3e-6);
    EXPECT_EQ(topology.name(), "dgx-v100");
    expect_same_as_builtin(topology, "dgx-v100");
    EXPECT_THAT(discovered.explanation, HasSubstr("0-3 x2 (50 GB/s)"));
    EXPECT_THAT(discovered.explanation, HasSubstr("0-1 (25 GB/s)"));
    EXPECT_THAT(discovered.explanation, HasSubstr("NVLink2, 25 GB/s per link"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("the 12 unlinked pairs share a PCIe Gen3 x16 bridge of 15.75 GB/s"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("latency 0.3 us per transfer (the DGX-1 measurement"));
}

TEST(TopologyFrom, V100SubsetKeepsOnlyItsLinks) {
    // GPUs 0, 3, 5: 0-3 has two links; 5 has none to either, so two pairs take the bridge.
    const DiscoveredTopology discovered = discover(dgx_v100(), {0, 3, 5});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::links);
    EXPECT_EQ(link_tuples(discovered.topology.links()),
              (std::vector<std::tuple<int, int, double>>{{0, 1, 50e9}}));
    EXPECT_DOUBLE_EQ(discovered.topology.bridge_bandwidth(), 15.75e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("the 2 unlinked pairs"));
}

TEST(TopologyFrom, UnlinkedV100PairIsPcie) {
    const DiscoveredTopology discovered = discover(dgx_v100(), {0, 5});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 15.75e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("no active NVLink between these GPUs"));
}

TEST(TopologyFrom, VirtualDevicesOnOneH200AreASwitchAtHbmBandwidth) {
    GpuAnswers answers = machine({gpu(0, "NVIDIA H200", 150110011392, 9, 0, 132)}, true);
    for (int link = 0; link < 18; ++link) {
        answers.gpus[0].nvlinks.push_back(
            NvLinkAnswer{link, true, switch_bus_id(link % 4), NvLinkRemote::nvswitch});
    }
    const DiscoveredTopology discovered = discover(answers, {0, 0, 0, 0});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(discovered.topology.num_gpus(), 4);
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 4.8e12);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 4.8e12);
    EXPECT_EQ(discovered.topology.name(), "discovered");
    EXPECT_THAT(discovered.explanation, HasSubstr("4 logical devices on 1 GPU (0)"));
    EXPECT_THAT(discovered.explanation, HasSubstr("NVIDIA H200 -> H200: HBM 4800 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("all 4 logical devices share GPU 0"));
    EXPECT_THAT(discovered.explanation, HasSubstr("device-local memcpys"));
    ASSERT_EQ(discovered.devices.size(), 4u);
    EXPECT_EQ(discovered.devices[3].name, "NVIDIA H200");

    // Its device model: the H200's datasheet peaks and the driver's memory.
    EXPECT_DOUBLE_EQ(discovered.topology.device().peak_bf16, 989e12);
    EXPECT_DOUBLE_EQ(discovered.topology.device().peak_f32, 67e12);
    EXPECT_DOUBLE_EQ(discovered.topology.device().memory_bytes, 150110011392.0);

    const DiscoveredTopology single = discover(answers, {0});
    EXPECT_EQ(single.topology.num_gpus(), 1);
    EXPECT_THAT(single.explanation, HasSubstr("one device"));
}

TEST(TopologyFrom, SharedGpusOnASwitchUseTheSwitchBandwidth) {
    const DiscoveredTopology discovered = discover(dgx_h100(), {0, 0, 1, 1});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(discovered.topology.num_gpus(), 4);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 450e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("several logical devices share a GPU"));
    ASSERT_EQ(discovered.devices.size(), 4u);
    EXPECT_EQ(discovered.devices[2].device_idx, 1);
}

TEST(TopologyFrom, SharedGpusOnLinksGetHbmLinks) {
    // Logical 0, 1 on GPU 0 and 2, 3 on GPU 3, which has two NVLinks to GPU 0.
    const DiscoveredTopology discovered = discover(dgx_v100(), {0, 0, 3, 3});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::links);
    EXPECT_EQ(
        link_tuples(discovered.topology.links()),
        (std::vector<std::tuple<int, int, double>>{
            {0, 1, 900e9}, {0, 2, 50e9}, {0, 3, 50e9}, {1, 2, 50e9}, {1, 3, 50e9}, {2, 3, 900e9}}));
    EXPECT_DOUBLE_EQ(discovered.topology.bridge_bandwidth(), 0.0);
    EXPECT_THAT(discovered.explanation, HasSubstr("a link at HBM bandwidth"));
}

TEST(TopologyFrom, PcieBoxWithoutNvmlIsASwitchAtPcieBandwidth) {
    std::vector<GpuAnswer> gpus;
    for (int gpu_idx = 0; gpu_idx < 4; ++gpu_idx) {
        gpus.push_back(gpu(gpu_idx, "NVIDIA A100 80GB PCIe", 85094301696, 8, 0, 108));
    }
    const GpuAnswers answers = machine(std::move(gpus), false, {{0, 2}, {2, 0}});
    const DiscoveredTopology discovered = discover(answers, {0, 1, 2, 3});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(discovered.topology.num_gpus(), 4);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 31.5e9);
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 2.0e12);
    EXPECT_DOUBLE_EQ(discovered.topology.latency_s(), 5e-6);
    EXPECT_EQ(discovered.topology.name(), "discovered");
    EXPECT_THAT(discovered.explanation, HasSubstr("NVML not available (dlopen(libnvidia-ml.so.1)"));
    EXPECT_THAT(discovered.explanation,
                HasSubstr("switch topology at PCIe Gen4 x16 (sm_8x) bandwidth 31.5 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("pass a topology file"));
    EXPECT_THAT(discovered.explanation, HasSubstr("A100 80 GB: HBM 2000 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("no peer access for 0->2, 2->0"));
    EXPECT_THAT(discovered.explanation, HasSubstr("staged through host memory"));
    EXPECT_THAT(discovered.explanation, HasSubstr("latency 5 us per transfer (assumed"));
}

TEST(TopologyFrom, UnknownGpuEstimatesHbmFromItsMemoryClock) {
    std::vector<GpuAnswer> gpus;
    for (int gpu_idx = 0; gpu_idx < 2; ++gpu_idx) {
        GpuAnswer answer = gpu(gpu_idx, "NVIDIA L40S", 47697362944, 8, 9, 142);
        answer.memory_clock_khz = 9001000;
        answer.memory_bus_width_bits = 384;
        gpus.push_back(std::move(answer));
    }
    // NVML answers, but these cards have no NVLink.
    const DiscoveredTopology discovered = discover(machine(std::move(gpus), true), {0, 1});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 2.0 * 9001e6 * 384 / 8);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 31.5e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("unknown GPU 'NVIDIA L40S'"));
    EXPECT_THAT(discovered.explanation, HasSubstr("2 x 9001 MHz x 384-bit bus = 864.1 GB/s"));
    EXPECT_THAT(discovered.explanation, HasSubstr("NVML reports no active NVLink"));
}

TEST(TopologyFrom, UnknownGpuWithoutMemoryClockIsAssumed) {
    const GpuAnswers answers =
        machine({gpu(0, "Mystery Accelerator 9000", 1 << 30, 12, 0, 10)}, false);
    const DiscoveredTopology discovered = discover(answers, {0, 0});
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 1e12);
    EXPECT_THAT(discovered.explanation, HasSubstr("unknown GPU 'Mystery Accelerator 9000'"));
    EXPECT_THAT(discovered.explanation, HasSubstr("assumed memory bandwidth 1000 GB/s"));
    // Not in the table: no peaks (simulating its kernels is an error naming the key).
    EXPECT_EQ(discovered.topology.device().peak_f16, 0.0);
    EXPECT_DOUBLE_EQ(discovered.topology.device().memory_bytes, double{1 << 30});
}

TEST(TopologyFrom, TheSlowestHbmDecides) {
    GpuAnswers answers = dgx_h100();
    answers.gpus[6].name = "NVIDIA H100 PCIe";
    const DiscoveredTopology discovered = discover(answers, {0, 6});
    EXPECT_DOUBLE_EQ(discovered.topology.hbm_bandwidth(), 2.0e12);
    EXPECT_THAT(discovered.explanation, HasSubstr("H100 PCIe"));
    EXPECT_THAT(discovered.explanation, HasSubstr("the slowest GPU's HBM counts"));
}

TEST(TopologyFrom, BadDeviceListsNameTheEntry) {
    const GpuAnswers answers = dgx_h100();
    absl::StatusOr<DiscoveredTopology> empty = topology_from(answers, {});
    ASSERT_FALSE(empty.ok());
    EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(empty.status().message(), HasSubstr("device_list is empty"));

    absl::StatusOr<DiscoveredTopology> too_far = topology_from(answers, {0, 8});
    ASSERT_FALSE(too_far.ok());
    EXPECT_EQ(too_far.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(too_far.status().message(), HasSubstr("device_list[1] = 8 names no GPU"));
    EXPECT_THAT(too_far.status().message(), HasSubstr("GPUs are 0 to 7"));

    absl::StatusOr<DiscoveredTopology> negative = topology_from(answers, {-1});
    ASSERT_FALSE(negative.ok());
    EXPECT_THAT(negative.status().message(), HasSubstr("device_list[0] = -1"));

    absl::StatusOr<DiscoveredTopology> no_gpu = topology_from(GpuAnswers{}, {0});
    ASSERT_FALSE(no_gpu.ok());
    EXPECT_THAT(no_gpu.status().message(), HasSubstr("this machine has no CUDA GPU"));
}

TEST(NormalizePciBusId, CudaAndNvmlFormsAgree) {
    EXPECT_EQ(normalize_pci_bus_id("00000000:3B:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_pci_bus_id("0000:3b:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_pci_bus_id(" 0001:C1:1F.1 "), "0001:c1:1f.1");
    EXPECT_EQ(normalize_pci_bus_id("3B:00.0"), "0000:3b:00.0");
    EXPECT_EQ(normalize_pci_bus_id("Not:A:Bus.Id"), "not:a:bus.id");
}

TEST(Describe, OneLinePerGpuThenThePeerMatrix) {
    const std::string v100 = describe(dgx_v100());
    EXPECT_THAT(v100, HasSubstr("GPU 0: Tesla V100-SXM2-32GB, sm_70, 31.7 GiB, 80 SMs, PCI "
                                "0000:18:00.0, NVLink 6 of 6 active (GPU 1 x1, GPU 2 x1, GPU 3 "
                                "x2, GPU 4 x2)\n"));
    EXPECT_THAT(v100, HasSubstr("GPU 7: Tesla V100-SXM2-32GB"));
    EXPECT_THAT(v100, HasSubstr("NVML: NVML loaded\n"));
    EXPECT_THAT(v100, HasSubstr("\n   0    -  P0a  P0a"));

    const std::string h100 = describe(dgx_h100());
    EXPECT_THAT(h100, HasSubstr("NVLink 18 of 18 active (NVSwitch x18)"));

    const GpuAnswers pcie = machine({gpu(0, "NVIDIA A100 80GB PCIe", 85094301696, 8, 0, 108),
                                     gpu(1, "NVIDIA A100 80GB PCIe", 85094301696, 8, 0, 108)},
                                    false, {{1, 0}});
    const std::string text = describe(pcie);
    EXPECT_THAT(text, HasSubstr("GPU 1: NVIDIA A100 80GB PCIe, sm_80, 79.3 GiB, 108 SMs, PCI "
                                "0000:28:00.0, NVLink unknown\n"));
    EXPECT_THAT(text, HasSubstr("NVML: dlopen(libnvidia-ml.so.1)"));
    EXPECT_THAT(text, HasSubstr("\n   1    .    -"));
    EXPECT_EQ(describe(GpuAnswers{}), "no CUDA GPU");
}

// NVML as recorded: what a driver answers on a machine, played back through the loader's table
// of NVML functions (nvml::Api, Nvml::start), so that what Nvml::query_gpu tolerates and what
// fails it, and what discovery makes of either, are checked on machines that are not at hand.
struct RecordedLink {
    nvml::Return state_code = nvml::kSuccess; // nvmlDeviceGetNvLinkState
    int state = nvml::kFeatureEnabled;
    nvml::Return remote_pci_code = nvml::kSuccess;  // nvmlDeviceGetNvLinkRemotePciInfo_v2
    std::string remote_bus_id;                      // the CUDA form; handed out in NVML's
    nvml::Return remote_type_code = nvml::kSuccess; // nvmlDeviceGetNvLinkRemoteDeviceType
    int remote_type = nvml::kNvLinkDeviceTypeSwitch;
};

struct RecordedGpu {
    std::string bus_id;                        // the CUDA form, "0000:18:00.0"
    nvml::Return handle_code = nvml::kSuccess; // nvmlDeviceGetHandleByPciBusId_v2
    std::vector<RecordedLink> links;           // by link index
    // What nvmlDeviceGetNvLinkState answers for links past `links`: INVALID_ARGUMENT for links
    // the GPU does not have; NOT_SUPPORTED for every link of a GPU without NVLink, or of a GPU
    // passed through to a virtual machine.
    nvml::Return beyond_links = nvml::kErrorInvalidArgument;
};

struct RecordedNvml {
    nvml::Return init_code = nvml::kSuccess;
    // Whether the driver has nvmlDeviceGetNvLinkRemoteDeviceType (older ones do not).
    bool has_remote_device_type = true;
    std::vector<RecordedGpu> gpus;
    int shutdowns = 0;
};

// "0000:18:00.0" as NVML writes it: an 8-digit domain, upper-case hex.
std::string nvml_bus_id(const std::string& cuda_bus_id) {
    return absl::AsciiStrToUpper(absl::StrCat("0000", cuda_bus_id));
}

nvml::PciInfo pci_info_of(const std::string& cuda_bus_id) {
    nvml::PciInfo info{};
    const std::string text = nvml_bus_id(cuda_bus_id);
    std::snprintf(info.bus_id, sizeof(info.bus_id), "%s", text.c_str());
    std::snprintf(info.bus_id_legacy, sizeof(info.bus_id_legacy), "%s", cuda_bus_id.c_str());
    unsigned function = 0;
    std::sscanf(cuda_bus_id.c_str(), "%x:%x:%x.%x", &info.domain, &info.bus, &info.device,
                &function);
    return info;
}

nvml::Device device_handle(size_t gpu_idx) {
    return reinterpret_cast<nvml::Device>(static_cast<uintptr_t>(gpu_idx + 1));
}

// The table Nvml::load would fill from libnvidia-ml, playing back `recorded`.
nvml::Api recorded_api(std::shared_ptr<RecordedNvml> recorded) {
    auto gpu_of = [recorded](nvml::Device device) -> const RecordedGpu& {
        return recorded->gpus.at(reinterpret_cast<uintptr_t>(device) - 1);
    };
    auto link_of = [gpu_of](nvml::Device device, unsigned link) -> const RecordedLink* {
        const RecordedGpu& gpu = gpu_of(device);
        return link < gpu.links.size() ? &gpu.links[link] : nullptr;
    };
    nvml::Api api;
    api.init = [recorded] { return recorded->init_code; };
    api.shutdown = [recorded] {
        ++recorded->shutdowns;
        return nvml::kSuccess;
    };
    api.error_string = [](nvml::Return code) -> const char* {
        switch (code) {
        case nvml::kSuccess:
            return "Success";
        case nvml::kErrorInvalidArgument:
            return "Invalid Argument";
        case nvml::kErrorNotSupported:
            return "Not Supported";
        case nvml::kErrorNoPermission:
            return "Insufficient Permissions";
        case nvml::kErrorNotFound:
            return "Not Found";
        default:
            return "Unknown Error";
        }
    };
    api.handle_by_pci_bus_id = [recorded](const char* bus_id, nvml::Device* device) {
        for (size_t idx = 0; idx < recorded->gpus.size(); ++idx) {
            if (normalize_pci_bus_id(bus_id) == recorded->gpus[idx].bus_id) {
                if (recorded->gpus[idx].handle_code == nvml::kSuccess) {
                    *device = device_handle(idx);
                }
                return recorded->gpus[idx].handle_code;
            }
        }
        return nvml::kErrorNotFound;
    };
    api.pci_info = [gpu_of](nvml::Device device, nvml::PciInfo* info) {
        *info = pci_info_of(gpu_of(device).bus_id);
        return nvml::kSuccess;
    };
    api.nvlink_state = [gpu_of, link_of](nvml::Device device, unsigned link, int* state) {
        const RecordedLink* recorded_link = link_of(device, link);
        if (recorded_link == nullptr) {
            return gpu_of(device).beyond_links;
        }
        *state = recorded_link->state;
        return recorded_link->state_code;
    };
    api.nvlink_remote_pci_info = [link_of](nvml::Device device, unsigned link,
                                           nvml::PciInfo* info) {
        const RecordedLink* recorded_link = link_of(device, link);
        if (recorded_link == nullptr) {
            return nvml::kErrorInvalidArgument;
        }
        if (recorded_link->remote_pci_code == nvml::kSuccess) {
            *info = pci_info_of(recorded_link->remote_bus_id);
        }
        return recorded_link->remote_pci_code;
    };
    if (recorded->has_remote_device_type) {
        api.nvlink_remote_device_type = [link_of](nvml::Device device, unsigned link, int* type) {
            const RecordedLink* recorded_link = link_of(device, link);
            if (recorded_link == nullptr) {
                return nvml::kErrorInvalidArgument;
            }
            *type = recorded_link->remote_type;
            return recorded_link->remote_type_code;
        };
    }
    return api;
}

absl::StatusOr<std::unique_ptr<Nvml>> start_recorded(std::shared_ptr<RecordedNvml> recorded) {
    return Nvml::start(recorded_api(std::move(recorded)), "recorded NVML");
}

// What NVML says of `answers`' GPUs when every NVLink query succeeds: their links as
// `answers` lists them (links to NVSwitches or GPUs).
std::shared_ptr<RecordedNvml> recorded_links_of(const GpuAnswers& answers) {
    auto recorded = std::make_shared<RecordedNvml>();
    for (const GpuAnswer& gpu : answers.gpus) {
        RecordedGpu recorded_gpu;
        recorded_gpu.bus_id = gpu.pci_bus_id;
        for (const NvLinkAnswer& link : gpu.nvlinks) {
            RecordedLink recorded_link;
            recorded_link.state = link.active ? nvml::kFeatureEnabled : nvml::kFeatureDisabled;
            recorded_link.remote_bus_id = link.remote_pci_bus_id;
            recorded_link.remote_type = link.remote == NvLinkRemote::gpu
                                            ? nvml::kNvLinkDeviceTypeGpu
                                            : nvml::kNvLinkDeviceTypeSwitch;
            recorded_gpu.links.push_back(std::move(recorded_link));
        }
        recorded->gpus.push_back(std::move(recorded_gpu));
    }
    return recorded;
}

// The CUDA runtime's half of `answers`: the GPUs and peers, nothing of NVML.
GpuAnswers cuda_half(GpuAnswers answers) {
    for (GpuAnswer& gpu : answers.gpus) {
        gpu.nvlinks.clear();
    }
    answers.nvml_available = false;
    answers.nvml_status.clear();
    return answers;
}

void expect_no_nvlinks(const GpuAnswers& answers) {
    for (const GpuAnswer& gpu : answers.gpus) {
        EXPECT_TRUE(gpu.nvlinks.empty()) << "GPU " << gpu.device_idx;
    }
}

TEST(RecordedNvml, DgxH100FindsItsNvSwitches) {
    auto recorded = recorded_links_of(dgx_h100());
    {
        absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
        ASSERT_TRUE(nvml.ok()) << nvml.status();
        const GpuAnswers answers = with_nvml_answers(cuda_half(dgx_h100()), nvml);
        EXPECT_TRUE(answers.nvml_available);
        EXPECT_EQ(answers.nvml_status, "NVML loaded");
        ASSERT_EQ(answers.gpus[7].nvlinks.size(), 18u);
        const NvLinkAnswer& link = answers.gpus[7].nvlinks[5];
        EXPECT_EQ(link.link_idx, 5);
        EXPECT_TRUE(link.active);
        EXPECT_EQ(link.remote_pci_bus_id, switch_bus_id(1)); // NVML's form, normalised
        EXPECT_EQ(link.remote, NvLinkRemote::nvswitch);
        const DiscoveredTopology discovered = discover(answers, {0, 1, 2, 3, 4, 5, 6, 7});
        expect_same_as_builtin(discovered.topology, "dgx-h100");
    }
    EXPECT_EQ(recorded->shutdowns, 1) << "NVML is shut down with its Nvml";
}

TEST(RecordedNvml, OldDriverTellsGpusFromSwitchesByHandle) {
    // No nvmlDeviceGetNvLinkRemoteDeviceType: a far end NVML has a handle for is a GPU.
    auto recorded = recorded_links_of(dgx_v100());
    recorded->has_remote_device_type = false;
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    const GpuAnswers answers = with_nvml_answers(cuda_half(dgx_v100()), nvml);
    EXPECT_TRUE(answers.nvml_available);
    EXPECT_THAT(answers.nvml_status, HasSubstr("without nvmlDeviceGetNvLinkRemoteDeviceType"));
    for (const NvLinkAnswer& link : answers.gpus[0].nvlinks) {
        EXPECT_EQ(link.remote, NvLinkRemote::gpu) << "link " << link.link_idx;
    }
    expect_same_as_builtin(discover(answers, {0, 1, 2, 3, 4, 5, 6, 7}).topology, "dgx-v100");
}

TEST(RecordedNvml, PassedThroughGpuWithoutNvLinkAnswers) {
    // A VM with one H100 passed through: NVML loads, but every NVLink query answers
    // NOT_SUPPORTED. That is no NVLink, not a failure.
    auto recorded = std::make_shared<RecordedNvml>();
    recorded->gpus.push_back(
        RecordedGpu{gpu_bus_id(0), nvml::kSuccess, {}, nvml::kErrorNotSupported});
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    absl::StatusOr<NvmlGpuAnswer> answer = (*nvml)->query_gpu(gpu_bus_id(0));
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->pci_bus_id, gpu_bus_id(0));
    EXPECT_TRUE(answer->nvlinks.empty());

    const GpuAnswers answers = with_nvml_answers(
        cuda_half(machine({gpu(0, "NVIDIA H100 80GB HBM3", 85520809984, 9, 0, 132)}, true)), nvml);
    EXPECT_TRUE(answers.nvml_available) << answers.nvml_status;
    expect_no_nvlinks(answers);
    const DiscoveredTopology one = discover(answers, {0});
    EXPECT_EQ(one.topology.num_gpus(), 1);
    EXPECT_THAT(one.explanation, HasSubstr("one device"));
    const DiscoveredTopology virtual_devices = discover(answers, {0, 0, 0, 0});
    EXPECT_EQ(virtual_devices.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(virtual_devices.topology.link_bandwidth(), 3350e9);
}

TEST(RecordedNvml, PassedThroughPairWithUnknownFarEnds) {
    // Two GPUs of a VM joined by an NVLink bridge: the links answer active, but NVML will not
    // say what is at their far ends (NOT_SUPPORTED). The links are kept, far ends unknown, and
    // taken for a switch of the links' bandwidth (for two GPUs the same as one link).
    auto recorded = std::make_shared<RecordedNvml>();
    for (int gpu_idx = 0; gpu_idx < 2; ++gpu_idx) {
        RecordedGpu recorded_gpu{gpu_bus_id(gpu_idx)};
        for (int link = 0; link < 12; ++link) {
            RecordedLink recorded_link;
            recorded_link.remote_pci_code = nvml::kErrorNotSupported;
            recorded_link.remote_type_code = nvml::kErrorNotSupported;
            recorded_gpu.links.push_back(recorded_link);
        }
        recorded->gpus.push_back(std::move(recorded_gpu));
    }
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    const GpuAnswers answers = with_nvml_answers(
        cuda_half(machine({gpu(0, "NVIDIA A100 80GB PCIe", 85094301696, 8, 0, 108),
                           gpu(1, "NVIDIA A100 80GB PCIe", 85094301696, 8, 0, 108)},
                          true)),
        nvml);
    EXPECT_TRUE(answers.nvml_available) << answers.nvml_status;
    ASSERT_EQ(answers.gpus[1].nvlinks.size(), 12u);
    EXPECT_TRUE(answers.gpus[1].nvlinks[11].active);
    EXPECT_EQ(answers.gpus[1].nvlinks[11].remote_pci_bus_id, "");
    EXPECT_EQ(answers.gpus[1].nvlinks[11].remote, NvLinkRemote::unknown);
    const DiscoveredTopology discovered = discover(answers, {0, 1});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 12 * 25e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("taken for NVSwitches"));
}

TEST(RecordedNvml, MissingNvmlIsAPcieSwitch) {
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::load("libeinsummable-no-such-nvml.so.1");
    ASSERT_FALSE(nvml.ok());
    const GpuAnswers answers = with_nvml_answers(cuda_half(dgx_h100()), nvml);
    EXPECT_FALSE(answers.nvml_available);
    EXPECT_THAT(answers.nvml_status, HasSubstr("dlopen(libeinsummable-no-such-nvml.so.1)"));
    expect_no_nvlinks(answers);
    const DiscoveredTopology discovered = discover(answers, {0, 1, 2, 3, 4, 5, 6, 7});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 63e9);
    EXPECT_THAT(discovered.explanation, HasSubstr("NVML not available (dlopen("));
    EXPECT_THAT(discovered.explanation, HasSubstr("pass a topology file"));
}

TEST(RecordedNvml, NoPermissionAtInitIsNvmlNotAvailable) {
    auto recorded = recorded_links_of(dgx_h100());
    recorded->init_code = nvml::kErrorNoPermission;
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_FALSE(nvml.ok());
    EXPECT_EQ(nvml.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(nvml.status().message(),
              "recorded NVML: nvmlInit_v2: Insufficient Permissions (NVML error 4)");
    EXPECT_EQ(recorded->shutdowns, 0) << "NVML that did not start is not shut down";
    const GpuAnswers answers = with_nvml_answers(cuda_half(dgx_h100()), nvml);
    EXPECT_FALSE(answers.nvml_available);
    EXPECT_THAT(answers.nvml_status, HasSubstr("Insufficient Permissions"));
    EXPECT_THAT(discover(answers, {0, 1}).explanation, HasSubstr("NVML not available"));
}

TEST(RecordedNvml, NoPermissionForOneGpuDropsEveryGpusNvLinks) {
    // NVML refuses the caller one GPU (its device node not given to the service): nothing NVML
    // said of the others is used, and the topology says why.
    auto recorded = recorded_links_of(dgx_h100());
    recorded->gpus[1].handle_code = nvml::kErrorNoPermission;
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    absl::StatusOr<NvmlGpuAnswer> refused = (*nvml)->query_gpu(gpu_bus_id(1));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_EQ(refused.status().message(),
              "nvmlDeviceGetHandleByPciBusId_v2(0000:28:00.0): Insufficient Permissions (NVML "
              "error 4)");

    const GpuAnswers answers = with_nvml_answers(cuda_half(dgx_h100()), nvml);
    EXPECT_FALSE(answers.nvml_available);
    EXPECT_EQ(answers.nvml_status,
              "NVML loaded but failed for GPU 1: nvmlDeviceGetHandleByPciBusId_v2(0000:28:00.0): "
              "Insufficient Permissions (NVML error 4)");
    expect_no_nvlinks(answers);
    const DiscoveredTopology discovered = discover(answers, {0, 1, 2, 3, 4, 5, 6, 7});
    EXPECT_EQ(discovered.topology.kind(), TopologyKind::nvswitch);
    EXPECT_DOUBLE_EQ(discovered.topology.link_bandwidth(), 63e9);
    EXPECT_THAT(discovered.explanation,
                HasSubstr("NVML not available (NVML loaded but failed for GPU 1"));
}

TEST(RecordedNvml, NoPermissionForALinkFailsTheGpu) {
    auto recorded = recorded_links_of(dgx_h100());
    recorded->gpus[2].links[4].state_code = nvml::kErrorNoPermission;
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    absl::StatusOr<NvmlGpuAnswer> refused = (*nvml)->query_gpu(gpu_bus_id(2));
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
    EXPECT_THAT(refused.status().message(),
                HasSubstr("nvmlDeviceGetNvLinkState(0000:38:00.0, link 4): Insufficient "
                          "Permissions"));
    EXPECT_FALSE(with_nvml_answers(cuda_half(dgx_h100()), nvml).nvml_available);
}

TEST(RecordedNvml, OtherErrorsNameTheCallAndLink) {
    auto recorded = recorded_links_of(dgx_h100());
    recorded->gpus[0].links[3].remote_pci_code = nvml::kErrorUnknown;
    recorded->gpus[0].links[7].remote_type_code = nvml::kErrorUnknown;
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start_recorded(recorded);
    ASSERT_TRUE(nvml.ok()) << nvml.status();
    absl::StatusOr<NvmlGpuAnswer> failed = (*nvml)->query_gpu(gpu_bus_id(0));
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kInternal);
    EXPECT_EQ(failed.status().message(), "nvmlDeviceGetNvLinkRemotePciInfo_v2(0000:18:00.0, link "
                                         "3): Unknown Error (NVML error 999)");
    recorded->gpus[0].links[3].remote_pci_code = nvml::kSuccess;
    failed = (*nvml)->query_gpu(gpu_bus_id(0));
    ASSERT_FALSE(failed.ok());
    EXPECT_THAT(failed.status().message(),
                HasSubstr("nvmlDeviceGetNvLinkRemoteDeviceType(0000:18:00.0, link 7)"));

    absl::StatusOr<NvmlGpuAnswer> nowhere = (*nvml)->query_gpu("00ff:ff:1f.7");
    ASSERT_FALSE(nowhere.ok());
    EXPECT_EQ(nowhere.status().code(), absl::StatusCode::kNotFound);
}

TEST(NvmlLoader, MissingLibraryOrSymbolIsAStatus) {
    absl::StatusOr<std::unique_ptr<Nvml>> missing = Nvml::load("libeinsummable-no-such-nvml.so.1");
    ASSERT_FALSE(missing.ok());
    EXPECT_EQ(missing.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(missing.status().message(), HasSubstr("dlopen(libeinsummable-no-such-nvml.so.1)"));

    // A library that loads but is not NVML.
    absl::StatusOr<std::unique_ptr<Nvml>> not_nvml = Nvml::load("libc.so.6");
    ASSERT_FALSE(not_nvml.ok());
    EXPECT_EQ(not_nvml.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(not_nvml.status().message(), HasSubstr("dlsym(libc.so.6, nvmlInit_v2)"));
}

// This machine's own answers: zero GPUs without a GPU, otherwise what the CUDA runtime lists.
TEST(QueryGpus, AgreesWithTheCudaRuntime) {
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> devices = kernels::cuda::list_devices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    absl::StatusOr<GpuAnswers> answers = query_gpus();
    ASSERT_TRUE(answers.ok()) << answers.status();
    ASSERT_EQ(answers->gpus.size(), devices->size());
    if (devices->empty()) {
        EXPECT_TRUE(answers->peers.empty());
        EXPECT_FALSE(answers->nvml_available);
        EXPECT_EQ(describe(*answers), "no CUDA GPU");
        absl::StatusOr<DiscoveredTopology> none = topology_from(*answers, {0});
        EXPECT_FALSE(none.ok());
        return;
    }
    for (size_t idx = 0; idx < devices->size(); ++idx) {
        EXPECT_EQ(answers->gpus[idx].device_idx, static_cast<int>(idx));
        EXPECT_EQ(answers->gpus[idx].name, (*devices)[idx].name);
    }
}

TEST(QueryGpus, AnswersOfThisGpuMachineAreSane) {
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> devices = kernels::cuda::list_devices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED(
            "no CUDA GPU: query_gpus() answers of a GPU machine not checked");
    }
    absl::StatusOr<GpuAnswers> answers = query_gpus();
    ASSERT_TRUE(answers.ok()) << answers.status();
    std::cout << describe(*answers);
    const int num_gpus = static_cast<int>(answers->gpus.size());
    ASSERT_EQ(answers->peers.size(), answers->gpus.size());
    for (const GpuAnswer& gpu : answers->gpus) {
        SCOPED_TRACE(absl::StrCat("GPU ", gpu.device_idx, " (", gpu.name, ")"));
        EXPECT_FALSE(gpu.name.empty());
        EXPECT_GT(gpu.total_memory_bytes, int64_t{1} << 30);
        EXPECT_GE(gpu.compute_capability_major, 7);
        EXPECT_GT(gpu.multiprocessor_count, 0);
        EXPECT_EQ(gpu.pci_bus_id, normalize_pci_bus_id(gpu.pci_bus_id));
        EXPECT_THAT(gpu.pci_bus_id,
                    testing::MatchesRegex("[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\\.[0-9a-f]"));
        ASSERT_EQ(answers->peers[gpu.device_idx].size(), answers->gpus.size());
        // Only NVML's answers when it answered for every GPU. An active link's far end may be
        // unknown (NOT_SUPPORTED from some drivers, and in virtual machines): no bus id then.
        if (!answers->nvml_available) {
            EXPECT_TRUE(gpu.nvlinks.empty());
        }
        for (const NvLinkAnswer& link : gpu.nvlinks) {
            EXPECT_EQ(link.remote_pci_bus_id, normalize_pci_bus_id(link.remote_pci_bus_id))
                << "link " << link.link_idx;
            if (!link.active) {
                EXPECT_TRUE(link.remote_pci_bus_id.empty()) << "link " << link.link_idx;
            }
        }
    }
    for (int src = 0; src < num_gpus; ++src) {
        for (int dst = 0; dst < num_gpus; ++dst) {
            if (src != dst && answers->peers[src][dst].access_supported) {
                EXPECT_TRUE(answers->peers[src][dst].can_access_peer) << src << "->" << dst;
            }
        }
    }
    if (!answers->nvml_available) {
        std::cout << "NVML not used: " << answers->nvml_status << "\n";
    }

    const DiscoveredTopology all = discover(*answers, one_device_per_gpu(*answers));
    EXPECT_EQ(all.topology.num_gpus(), num_gpus);
    EXPECT_GT(all.topology.hbm_bandwidth(), 0.0);
    std::cout << "one device per GPU: " << all.topology.name() << "\n"
              << all.explanation << "\n"
              << all.topology.to_text();

    const DiscoveredTopology virtual_devices = discover(*answers, {0, 0, 0, 0});
    EXPECT_EQ(virtual_devices.topology.kind(), TopologyKind::nvswitch);
    EXPECT_EQ(virtual_devices.topology.num_gpus(), 4);
    EXPECT_DOUBLE_EQ(virtual_devices.topology.link_bandwidth(),
                     virtual_devices.topology.hbm_bandwidth());
    EXPECT_THAT(virtual_devices.explanation, HasSubstr("share GPU 0"));

    // The HBM table and the memory clock must tell roughly the same story on a known card.
    const GpuAnswer& first = answers->gpus[0];
    if (first.memory_clock_khz > 0 && first.memory_bus_width_bits > 0) {
        const double estimate =
            2.0 * first.memory_clock_khz * 1e3 * first.memory_bus_width_bits / 8.0;
        const double used = discover(*answers, {0}).topology.hbm_bandwidth();
        EXPECT_GT(estimate, 0.5 * used) << "memory clock " << first.memory_clock_khz << " kHz, "
                                        << first.memory_bus_width_bits << "-bit bus";
        EXPECT_LT(estimate, 2.0 * used) << "memory clock " << first.memory_clock_khz << " kHz, "
                                        << first.memory_bus_width_bits << "-bit bus";
    }
    if (first.name.find("H200") != std::string::npos &&
        first.name.find("GH200") == std::string::npos) {
        EXPECT_DOUBLE_EQ(virtual_devices.topology.hbm_bandwidth(), 4.8e12);
    }
}

// NVML's answer for a GPU must come back under the same PCI bus id as CUDA's: this checks the
// hand-declared nvmlPciInfo_t layout against the real driver. NVML may be absent, or refuse
// (NO_PERMISSION, as in a container not given every device node): query_gpus then goes on
// without it, which is what is checked there.
TEST(NvmlLoader, FindsThisMachinesGpusByPciBusId) {
    absl::StatusOr<std::vector<kernels::cuda::DeviceInfo>> devices = kernels::cuda::list_devices();
    ASSERT_TRUE(devices.ok()) << devices.status();
    if (devices->empty()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("no CUDA GPU: NVML not checked against a driver");
    }
    absl::StatusOr<GpuAnswers> answers = query_gpus();
    ASSERT_TRUE(answers.ok()) << answers.status();
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::load();
    if (!nvml.ok()) {
        EXPECT_FALSE(answers->nvml_available);
        EXPECT_EQ(answers->nvml_status, nvml.status().message());
        GTEST_SKIP() << "NVML does not load on this GPU machine: " << nvml.status();
    }
    absl::Status first_failure = absl::OkStatus();
    for (const GpuAnswer& gpu : answers->gpus) {
        absl::StatusOr<NvmlGpuAnswer> nvml_gpu = (*nvml)->query_gpu(gpu.pci_bus_id);
        if (!nvml_gpu.ok()) {
            // What query_gpu does not tolerate: not NOT_SUPPORTED, which means no link.
            EXPECT_THAT(nvml_gpu.status().code(),
                        testing::AnyOf(absl::StatusCode::kPermissionDenied,
                                       absl::StatusCode::kNotFound, absl::StatusCode::kInternal))
                << nvml_gpu.status();
            EXPECT_THAT(std::string(nvml_gpu.status().message()), Not(HasSubstr("Not Supported")));
            if (first_failure.ok()) {
                first_failure = nvml_gpu.status();
            }
            continue;
        }
        EXPECT_EQ(nvml_gpu->pci_bus_id, gpu.pci_bus_id);
        EXPECT_LE(nvml_gpu->nvlinks.size(), size_t{nvml::kMaxNvLinks});
        for (const NvLinkAnswer& link : nvml_gpu->nvlinks) {
            EXPECT_GE(link.link_idx, 0);
            EXPECT_LT(link.link_idx, static_cast<int>(nvml::kMaxNvLinks));
            EXPECT_EQ(link.remote_pci_bus_id, normalize_pci_bus_id(link.remote_pci_bus_id));
        }
    }
    // query_gpus used NVML exactly when it answered for every GPU, and said why not otherwise.
    EXPECT_EQ(answers->nvml_available, first_failure.ok()) << answers->nvml_status;
    if (!first_failure.ok()) {
        std::cout << "NVML refuses this machine: " << first_failure << "\n";
        EXPECT_THAT(answers->nvml_status, HasSubstr(first_failure.message()));
    }
    absl::StatusOr<NvmlGpuAnswer> nowhere = (*nvml)->query_gpu("00ff:ff:1f.7");
    EXPECT_FALSE(nowhere.ok());
}

} // namespace
} // namespace einsummable::runtime::cuda
