#include "runtime/cuda/device_discovery.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_info.h"

namespace einsummable::runtime::cuda {
namespace {

using exprog::Link;
using exprog::Topology;
using exprog::TopologyKind;

// Transfer latencies. The switch and NVLink figures are those of docs/topologies.md (2 us is an
// assumption there too; 0.3 us is the DGX-1 measurement of docs/workloads.md); the PCIe and local
// ones are assumptions: a PCIe peer copy's set-up plus a root-complex hop, and the launch of a
// memcpy node inside a CUDA graph. Latency matters only for small transfers.
constexpr double kSwitchLatencyS = 2e-6;
constexpr double kNvLinkLatencyS = 0.3e-6;
constexpr double kPcieLatencyS = 5e-6;
constexpr double kLocalCopyLatencyS = 1e-6;

// Without a memory clock to estimate from, an unknown GPU's HBM is assumed to do this.
constexpr double kAssumedHbmBandwidth = 1e12;

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string gbps(double bytes_per_s) {
    return absl::StrFormat("%.4g GB/s", bytes_per_s / 1e9);
}

std::string latency_text(double seconds) {
    return absl::StrFormat("%.3g us", seconds * 1e6);
}

std::string sm_name(const GpuAnswer& gpu) {
    return absl::StrCat("sm_", gpu.compute_capability_major, gpu.compute_capability_minor);
}

// Peak HBM bandwidth by GPU name (cudaDeviceProp::name), first match wins, so more specific rows
// come first. Figures from NVIDIA's datasheets: H200 (SXM and NVL) 4.8 TB/s; GH200 4.0 TB/s
// with 96 GB HBM3, 4.9 TB/s with 144 GB HBM3e; H100 SXM ("NVIDIA H100 80GB HBM3") 3.35 TB/s,
// H100 NVL 3.9 TB/s, H100 PCIe 2.0 TB/s; A100 40 GB 1.555 TB/s, A100 80 GB 2.0 TB/s (SXM
// 2.039, PCIe 1.935); V100 (SXM2 and PCIe, 16 and 32 GB) 900 GB/s. The A100 and V100 figures
// are those of docs/topologies/*.topo. The dense peaks (FLOP/s, without sparsity) are the same
// datasheets' for the whole-plan simulator (docs/topologies.md "Devices"): fp32, and fp16 =
// bf16 on tensor cores (V100: fp16 only).
struct HbmRow {
    const char* name_part;
    double min_memory_gib; // the row applies from this much memory up
    double bandwidth;
    const char* model;
    double peak_f32;
    double peak_f16;
    double peak_bf16;
};
constexpr HbmRow kHbmTable[] = {
    {"GH200", 100.0, 4.9e12, "GH200 144 GB", 67e12, 989e12, 989e12},
    {"GH200", 0.0, 4.0e12, "GH200 96 GB", 67e12, 989e12, 989e12},
    {"H200", 0.0, 4.8e12, "H200", 67e12, 989e12, 989e12},
    {"H100 PCIe", 0.0, 2.0e12, "H100 PCIe", 51e12, 756e12, 756e12},
    {"H100 NVL", 0.0, 3.9e12, "H100 NVL", 60e12, 835e12, 835e12},
    {"H100", 0.0, 3.35e12, "H100 SXM", 67e12, 989e12, 989e12},
    {"A100", 48.0, 2.0e12, "A100 80 GB", 19.5e12, 312e12, 312e12},
    {"A100", 0.0, 1.555e12, "A100 40 GB", 19.5e12, 312e12, 312e12},
    {"V100", 0.0, 0.9e12, "V100", 15.7e12, 125e12, 0.0},
};

// The device model of a discovered GPU: its row's peaks (none for a GPU not in the table) and
// the driver's memory, with the default efficiency constants.
exprog::DeviceModel device_model_of(const GpuAnswer& gpu) {
    exprog::DeviceModel device;
    device.memory_bytes = static_cast<double>(gpu.total_memory_bytes);
    const double memory_gib = static_cast<double>(gpu.total_memory_bytes) / kBytesPerGiB;
    for (const HbmRow& row : kHbmTable) {
        if (gpu.name.find(row.name_part) != std::string::npos && memory_gib >= row.min_memory_gib) {
            device.peak_f32 = row.peak_f32;
            device.peak_f16 = row.peak_f16;
            device.peak_bf16 = row.peak_bf16;
            break;
        }
    }
    return device;
}

struct Figure {
    double bytes_per_s = 0.0;
    std::string why;
};

Figure hbm_of(const GpuAnswer& gpu) {
    const double memory_gib = static_cast<double>(gpu.total_memory_bytes) / kBytesPerGiB;
    for (const HbmRow& row : kHbmTable) {
        if (gpu.name.find(row.name_part) != std::string::npos && memory_gib >= row.min_memory_gib) {
            return {row.bandwidth, absl::StrCat(gpu.name, " -> ", row.model, ": HBM ",
                                                gbps(row.bandwidth), " (datasheet)")};
        }
    }
    if (gpu.memory_clock_khz > 0 && gpu.memory_bus_width_bits > 0) {
        // Double data rate: two transfers per clock over the whole bus.
        const double estimate = 2.0 * gpu.memory_clock_khz * 1e3 * gpu.memory_bus_width_bits / 8.0;
        return {estimate,
                absl::StrFormat("unknown GPU '%s' (not in the HBM table): memory bandwidth "
                                "estimated as 2 x %d MHz x %d-bit bus = %s",
                                gpu.name, gpu.memory_clock_khz / 1000, gpu.memory_bus_width_bits,
                                gbps(estimate))};
    }
    return {kAssumedHbmBandwidth,
            absl::StrFormat("unknown GPU '%s' (not in the HBM table, no memory clock): assumed "
                            "memory bandwidth %s",
                            gpu.name, gbps(kAssumedHbmBandwidth))};
}

// NVLink bandwidth per link and direction by generation, taken from the compute capability
// (NVIDIA's NVLink pages): NVLink1 (P100) 20 GB/s; NVLink2 (V100), NVLink3 (A100), NVLink4
// (H100/H200) 25 GB/s; NVLink5 (Blackwell) 50 GB/s.
Figure nvlink_per_link(int cc_major) {
    if (cc_major < 7) {
        return {20e9, "NVLink1"};
    }
    if (cc_major == 7) {
        return {25e9, "NVLink2"};
    }
    if (cc_major == 8) {
        return {25e9, "NVLink3"};
    }
    if (cc_major == 9) {
        return {25e9, "NVLink4"};
    }
    return {50e9, "NVLink5"};
}

// The GPU's host link per direction, x16, by the PCIe generation its architecture came with:
// Gen3 (V100 and older) 15.75 GB/s, Gen4 (Ampere, Ada) 31.5 GB/s, Gen5 (Hopper on) 63 GB/s.
// 15.75 GB/s is dgx-v100's bridge.
Figure pcie_of(int cc_major) {
    if (cc_major >= 9) {
        return {63e9, "PCIe Gen5 x16"};
    }
    if (cc_major == 8) {
        return {31.5e9, "PCIe Gen4 x16"};
    }
    return {15.75e9, "PCIe Gen3 x16"};
}

// "8 x NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB)", models in order of first appearance.
std::string models_of(const GpuAnswers& answers, const std::vector<int>& gpus) {
    std::vector<std::string> names;
    std::map<std::string, int> count;
    std::map<std::string, std::string> detail;
    for (int gpu_idx : gpus) {
        const GpuAnswer& gpu = answers.gpus[gpu_idx];
        if (count[gpu.name]++ == 0) {
            names.push_back(gpu.name);
            detail[gpu.name] =
                absl::StrFormat("%s, %.1f GiB", sm_name(gpu),
                                static_cast<double>(gpu.total_memory_bytes) / kBytesPerGiB);
        }
    }
    std::vector<std::string> parts;
    for (const std::string& name : names) {
        parts.push_back(absl::StrCat(count[name], " x ", name, " (", detail[name], ")"));
    }
    return absl::StrJoin(parts, ", ");
}

// How the GPUs (CUDA ordinals, distinct) are connected to each other.
struct InterGpu {
    bool is_switch = true;
    double switch_bandwidth = 0.0;
    std::map<std::pair<int, int>, double> links; // (lower ordinal, higher) -> bandwidth
    double bridge_bandwidth = 0.0;
    double latency_s = 0.0;
    std::string latency_why;
    std::vector<std::string> reasons;
};

InterGpu inter_gpu(const GpuAnswers& answers, const std::vector<int>& gpus) {
    InterGpu result;
    int min_cc = answers.gpus[gpus[0]].compute_capability_major;
    for (int gpu_idx : gpus) {
        min_cc = std::min(min_cc, answers.gpus[gpu_idx].compute_capability_major);
    }
    const Figure pcie = pcie_of(min_cc);
    auto pcie_switch = [&](std::string why) {
        result.is_switch = true;
        result.switch_bandwidth = pcie.bytes_per_s;
        result.latency_s = kPcieLatencyS;
        result.latency_why = "assumed for a PCIe peer copy";
        result.reasons.push_back(absl::StrCat(why, " -> switch topology at ", pcie.why, " (sm_",
                                              min_cc, "x) bandwidth ", gbps(pcie.bytes_per_s),
                                              " per direction per GPU (assumed)"));
    };
    if (!answers.nvml_available) {
        pcie_switch(absl::StrCat("NVML not available (", answers.nvml_status,
                                 "), so nothing is known of NVLink; pass a topology file if "
                                 "these GPUs have NVLink"));
        return result;
    }

    std::map<std::string, int> gpu_by_bus_id;
    for (const GpuAnswer& gpu : answers.gpus) {
        gpu_by_bus_id[gpu.pci_bus_id] = gpu.device_idx;
    }
    const std::set<int> chosen(gpus.begin(), gpus.end());
    std::map<int, int> switch_links, active_links;
    std::map<std::pair<int, int>, int> pair_links; // ordered (from, to) as seen from `from`
    bool assumed_switch = false;
    for (int gpu_idx : gpus) {
        for (const NvLinkAnswer& link : answers.gpus[gpu_idx].nvlinks) {
            if (!link.active) {
                continue;
            }
            ++active_links[gpu_idx];
            auto remote_gpu = gpu_by_bus_id.find(link.remote_pci_bus_id);
            if (link.remote == NvLinkRemote::nvswitch) {
                ++switch_links[gpu_idx];
            } else if (remote_gpu != gpu_by_bus_id.end() && link.remote != NvLinkRemote::other) {
                if (chosen.count(remote_gpu->second) > 0 && remote_gpu->second != gpu_idx) {
                    ++pair_links[{gpu_idx, remote_gpu->second}];
                }
            } else if (link.remote == NvLinkRemote::unknown) {
                // A driver without nvmlDeviceGetNvLinkRemoteDeviceType: a far end that is no
                // visible GPU is taken to be an NVSwitch.
                ++switch_links[gpu_idx];
                assumed_switch = true;
            }
        }
    }

    std::vector<int> with_switch, without_switch;
    for (int gpu_idx : gpus) {
        (switch_links[gpu_idx] > 0 ? with_switch : without_switch).push_back(gpu_idx);
    }
    const std::string assumed_note =
        assumed_switch ? " (NVML gave no remote device type; far ends that are not visible GPUs "
                         "were taken for NVSwitches)"
                       : "";
    if (without_switch.empty()) {
        int fewest_gpu = gpus[0];
        bool all_links_to_switch = true;
        bool same_count = true;
        for (int gpu_idx : gpus) {
            if (switch_links[gpu_idx] < switch_links[fewest_gpu]) {
                fewest_gpu = gpu_idx;
            }
            all_links_to_switch &= switch_links[gpu_idx] == active_links[gpu_idx];
            same_count &= switch_links[gpu_idx] == switch_links[gpus[0]];
        }
        const int links = switch_links[fewest_gpu];
        const Figure per_link = nvlink_per_link(min_cc);
        result.is_switch = true;
        result.switch_bandwidth = links * per_link.bytes_per_s;
        result.latency_s = kSwitchLatencyS;
        result.latency_why = "assumed, as for dgx-a100 and dgx-h100 in docs/topologies.md";
        const std::string seen =
            same_count ? absl::StrCat("NVSwitch seen on every GPU's ", links,
                                      all_links_to_switch ? " active NVLinks" : " NVLinks")
                       : absl::StrCat("NVSwitch seen on every GPU; the fewest NVSwitch links, ",
                                      links, " on GPU ", fewest_gpu, ", decide");
        result.reasons.push_back(
            absl::StrCat(seen, assumed_note, " -> switch topology at ", links, " links x ",
                         gbps(per_link.bytes_per_s), " (", per_link.why, ", sm_", min_cc,
                         "x) = ", gbps(result.switch_bandwidth), " per direction per GPU"));
        return result;
    }
    if (!with_switch.empty()) {
        result.reasons.push_back(absl::StrCat(
            "NVSwitch seen on GPU ", absl::StrJoin(with_switch, ", "), " but not on GPU ",
            absl::StrJoin(without_switch, ", "), ": the NVSwitch is not used for the topology"));
    }

    std::vector<std::string> described;
    int unlinked = 0;
    for (size_t i = 0; i < gpus.size(); ++i) {
        for (size_t j = i + 1; j < gpus.size(); ++j) {
            const int a = std::min(gpus[i], gpus[j]);
            const int b = std::max(gpus[i], gpus[j]);
            // Each end reports the link; a failed answer on one side must not hide it.
            const int count = std::max(pair_links[{a, b}], pair_links[{b, a}]);
            if (count == 0) {
                ++unlinked;
                continue;
            }
            const Figure per_link =
                nvlink_per_link(std::min(answers.gpus[a].compute_capability_major,
                                         answers.gpus[b].compute_capability_major));
            result.links[{a, b}] = count * per_link.bytes_per_s;
            described.push_back(absl::StrCat(a, "-", b, count > 1 ? absl::StrCat(" x", count) : "",
                                             " (", gbps(count * per_link.bytes_per_s), ")"));
        }
    }
    if (result.links.empty()) {
        pcie_switch("NVML reports no active NVLink between these GPUs");
        return result;
    }
    result.is_switch = false;
    result.latency_s = kNvLinkLatencyS;
    result.latency_why = "the DGX-1 measurement of docs/topologies.md";
    std::string reason =
        absl::StrCat("NVLinks between GPUs ", absl::StrJoin(described, ", "), " (",
                     nvlink_per_link(min_cc).why, ", ", gbps(nvlink_per_link(min_cc).bytes_per_s),
                     " per link and direction) -> links topology");
    if (unlinked > 0) {
        result.bridge_bandwidth = pcie.bytes_per_s;
        absl::StrAppend(&reason, "; the ", unlinked, " unlinked pairs share a ", pcie.why,
                        " bridge of ", gbps(pcie.bytes_per_s), " (assumed)");
    }
    result.reasons.push_back(std::move(reason));
    return result;
}

std::string peer_access_note(const GpuAnswers& answers, const std::vector<int>& gpus) {
    if (answers.peers.size() != answers.gpus.size()) {
        return "peer access not recorded";
    }
    std::vector<std::string> missing;
    for (int src : gpus) {
        for (int dst : gpus) {
            if (src != dst && !answers.peers[src][dst].can_access_peer) {
                missing.push_back(absl::StrCat(src, "->", dst));
            }
        }
    }
    if (missing.empty()) {
        return "peer access between every pair of GPUs";
    }
    return absl::StrCat("no peer access for ", absl::StrJoin(missing, ", "),
                        ": those copies are staged through host memory");
}

bool near(double a, double b) {
    return std::abs(a - b) <= 1e-9 * std::max(std::abs(a), std::abs(b));
}

bool same_numbers(const Topology& a, const Topology& b) {
    if (a.kind() != b.kind() || a.num_gpus() != b.num_gpus() ||
        !near(a.hbm_bandwidth(), b.hbm_bandwidth()) || !near(a.latency_s(), b.latency_s()) ||
        !near(a.link_bandwidth(), b.link_bandwidth()) ||
        !near(a.bridge_bandwidth(), b.bridge_bandwidth()) || a.links().size() != b.links().size()) {
        return false;
    }
    for (size_t idx = 0; idx < a.links().size(); ++idx) {
        const Link& x = a.links()[idx];
        const Link& y = b.links()[idx];
        if (x.a != y.a || x.b != y.b || !near(x.bandwidth, y.bandwidth)) {
            return false;
        }
    }
    return true;
}

// Everything topology_from decides, before it is a Topology.
struct Shape {
    TopologyKind kind = TopologyKind::nvswitch;
    int num_gpus = 0;
    double link_bandwidth = 0.0;
    std::vector<Link> links;
    double bridge_bandwidth = 0.0;
    double hbm_bandwidth = 0.0;
    double latency_s = 0.0;

    absl::StatusOr<Topology> build(std::string name) const {
        if (kind == TopologyKind::nvswitch) {
            return Topology::make_switch(std::move(name), num_gpus, link_bandwidth, hbm_bandwidth,
                                         latency_s);
        }
        return Topology::make_links(std::move(name), num_gpus, links, bridge_bandwidth,
                                    hbm_bandwidth, latency_s);
    }
};

absl::Status check_peers(cudaError_t error, absl::string_view call, int src, int dst) {
    return kernels::cuda::cuda_status(error,
                                      absl::StrCat(call, "(src GPU ", src, ", dst GPU ", dst, ")"));
}

} // namespace

absl::StatusOr<GpuAnswers> query_gpus() {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<kernels::cuda::DeviceInfo> devices,
                                 kernels::cuda::list_devices());
    GpuAnswers answers;
    if (devices.empty()) {
        answers.nvml_status = "not queried: no CUDA GPU";
        return answers;
    }
    for (const kernels::cuda::DeviceInfo& device : devices) {
        GpuAnswer gpu;
        gpu.device_idx = device.device_idx;
        gpu.name = device.name;
        gpu.total_memory_bytes = device.total_memory_bytes;
        gpu.compute_capability_major = device.compute_capability_major;
        gpu.compute_capability_minor = device.compute_capability_minor;
        gpu.multiprocessor_count = device.multiprocessor_count;
        const std::string where = absl::StrCat("(GPU ", device.device_idx, ")");
        EINSUMMABLE_RETURN_IF_ERROR(kernels::cuda::cuda_status(
            cudaDeviceGetAttribute(&gpu.memory_clock_khz, cudaDevAttrMemoryClockRate,
                                   device.device_idx),
            absl::StrCat("cudaDeviceGetAttribute(cudaDevAttrMemoryClockRate)", where)));
        EINSUMMABLE_RETURN_IF_ERROR(kernels::cuda::cuda_status(
            cudaDeviceGetAttribute(&gpu.memory_bus_width_bits, cudaDevAttrGlobalMemoryBusWidth,
                                   device.device_idx),
            absl::StrCat("cudaDeviceGetAttribute(cudaDevAttrGlobalMemoryBusWidth)", where)));
        char bus_id[32] = {};
        EINSUMMABLE_RETURN_IF_ERROR(kernels::cuda::cuda_status(
            cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), device.device_idx),
            absl::StrCat("cudaDeviceGetPCIBusId", where)));
        gpu.pci_bus_id = normalize_pci_bus_id(bus_id);
        answers.gpus.push_back(std::move(gpu));
    }

    const int num_gpus = static_cast<int>(answers.gpus.size());
    answers.peers.assign(num_gpus, std::vector<PeerAnswer>(num_gpus));
    for (int src = 0; src < num_gpus; ++src) {
        for (int dst = 0; dst < num_gpus; ++dst) {
            if (src == dst) {
                continue;
            }
            PeerAnswer& peer = answers.peers[src][dst];
            int value = 0;
            EINSUMMABLE_RETURN_IF_ERROR(check_peers(cudaDeviceCanAccessPeer(&value, src, dst),
                                                    "cudaDeviceCanAccessPeer", src, dst));
            peer.can_access_peer = value != 0;
            const std::pair<cudaDeviceP2PAttr, const char*> attributes[] = {
                {cudaDevP2PAttrPerformanceRank, "cudaDevP2PAttrPerformanceRank"},
                {cudaDevP2PAttrAccessSupported, "cudaDevP2PAttrAccessSupported"},
                {cudaDevP2PAttrNativeAtomicSupported, "cudaDevP2PAttrNativeAtomicSupported"},
            };
            int values[3] = {};
            for (int idx = 0; idx < 3; ++idx) {
                EINSUMMABLE_RETURN_IF_ERROR(check_peers(
                    cudaDeviceGetP2PAttribute(&values[idx], attributes[idx].first, src, dst),
                    absl::StrCat("cudaDeviceGetP2PAttribute(", attributes[idx].second, ")"), src,
                    dst));
            }
            peer.performance_rank = values[0];
            peer.access_supported = values[1] != 0;
            peer.native_atomic_supported = values[2] != 0;
        }
    }

    return with_nvml_answers(std::move(answers), Nvml::load());
}

GpuAnswers with_nvml_answers(GpuAnswers answers,
                             const absl::StatusOr<std::unique_ptr<Nvml>>& nvml) {
    for (GpuAnswer& gpu : answers.gpus) {
        gpu.nvlinks.clear();
    }
    answers.nvml_available = false;
    if (!nvml.ok()) {
        answers.nvml_status = std::string(nvml.status().message());
        return answers;
    }
    std::vector<std::vector<NvLinkAnswer>> nvlinks;
    for (const GpuAnswer& gpu : answers.gpus) {
        absl::StatusOr<NvmlGpuAnswer> nvml_gpu = (*nvml)->query_gpu(gpu.pci_bus_id);
        if (!nvml_gpu.ok()) {
            // NVLink facts for only some GPUs would mislead the topology: use none.
            answers.nvml_status = absl::StrCat("NVML loaded but failed for GPU ", gpu.device_idx,
                                               ": ", nvml_gpu.status().message());
            return answers;
        }
        nvlinks.push_back(std::move(nvml_gpu->nvlinks));
    }
    for (size_t gpu_idx = 0; gpu_idx < answers.gpus.size(); ++gpu_idx) {
        answers.gpus[gpu_idx].nvlinks = std::move(nvlinks[gpu_idx]);
    }
    answers.nvml_available = true;
    answers.nvml_status = (*nvml)->knows_remote_device_type()
                              ? "NVML loaded"
                              : "NVML loaded (without nvmlDeviceGetNvLinkRemoteDeviceType)";
    return answers;
}

std::vector<int> one_device_per_gpu(const GpuAnswers& answers) {
    std::vector<int> device_list(answers.gpus.size());
    for (size_t idx = 0; idx < device_list.size(); ++idx) {
        device_list[idx] = static_cast<int>(idx);
    }
    return device_list;
}

absl::StatusOr<DiscoveredTopology> topology_from(const GpuAnswers& answers,
                                                 absl::Span<const int> device_list) {
    const int num_gpus = static_cast<int>(answers.gpus.size());
    if (device_list.empty()) {
        return absl::InvalidArgumentError("device_list is empty: at least one device is needed");
    }
    for (size_t logical = 0; logical < device_list.size(); ++logical) {
        if (device_list[logical] < 0 || device_list[logical] >= num_gpus) {
            return absl::InvalidArgumentError(absl::StrCat(
                "device_list[", logical, "] = ", device_list[logical], " names no GPU: ",
                num_gpus == 0 ? "this machine has no CUDA GPU"
                              : absl::StrCat("GPUs are 0 to ", num_gpus - 1)));
        }
        if (answers.gpus[device_list[logical]].device_idx != device_list[logical]) {
            return absl::InvalidArgumentError(
                absl::StrCat("answers.gpus[", device_list[logical], "] has device_idx ",
                             answers.gpus[device_list[logical]].device_idx,
                             ": GPU answers must be indexed by CUDA ordinal"));
        }
    }
    std::vector<int> gpus; // distinct, in order of first use
    for (int gpu_idx : device_list) {
        if (std::find(gpus.begin(), gpus.end(), gpu_idx) == gpus.end()) {
            gpus.push_back(gpu_idx);
        }
    }
    const int num_devices = static_cast<int>(device_list.size());
    std::vector<std::string> reasons;
    reasons.push_back(absl::StrCat(num_devices, " logical device", num_devices > 1 ? "s" : "",
                                   " on ", gpus.size(), " GPU", gpus.size() > 1 ? "s" : "", " (",
                                   absl::StrJoin(gpus, ", "), "): ", models_of(answers, gpus)));

    Shape shape;
    shape.num_gpus = num_devices;
    Figure hbm;
    for (int gpu_idx : gpus) {
        Figure figure = hbm_of(answers.gpus[gpu_idx]);
        if (hbm.why.empty() || figure.bytes_per_s < hbm.bytes_per_s) {
            hbm = std::move(figure);
        }
    }
    shape.hbm_bandwidth = hbm.bytes_per_s;
    reasons.push_back(gpus.size() > 1 ? absl::StrCat(hbm.why, " (the slowest GPU's HBM counts)")
                                      : hbm.why);

    if (gpus.size() == 1) {
        shape.kind = TopologyKind::nvswitch;
        shape.link_bandwidth = shape.hbm_bandwidth;
        shape.latency_s = kLocalCopyLatencyS;
        if (num_devices == 1) {
            reasons.push_back("one device: nothing is transferred; a switch at HBM bandwidth");
        } else {
            reasons.push_back(absl::StrCat(
                "all ", num_devices, " logical devices share GPU ", gpus[0],
                ": copies between them are device-local memcpys at HBM speed -> switch topology "
                "at HBM bandwidth ",
                gbps(shape.hbm_bandwidth),
                " per device (a copy reads and writes the one HBM, "
                "which the devices share: real copies are slower), latency ",
                latency_text(kLocalCopyLatencyS), " (assumed)"));
        }
    } else {
        InterGpu inter = inter_gpu(answers, gpus);
        for (std::string& reason : inter.reasons) {
            reasons.push_back(std::move(reason));
        }
        reasons.push_back(peer_access_note(answers, gpus));
        shape.latency_s = inter.latency_s;
        const bool shared = num_devices > static_cast<int>(gpus.size());
        if (inter.is_switch) {
            shape.kind = TopologyKind::nvswitch;
            shape.link_bandwidth = inter.switch_bandwidth;
            if (shared) {
                reasons.push_back(
                    "several logical devices share a GPU: copies between them are modelled at the "
                    "switch's bandwidth, though they are device-local memcpys (faster)");
            }
        } else {
            shape.kind = TopologyKind::links;
            bool any_unlinked = false;
            for (int a = 0; a < num_devices; ++a) {
                for (int b = a + 1; b < num_devices; ++b) {
                    const int gpu_a = device_list[a];
                    const int gpu_b = device_list[b];
                    if (gpu_a == gpu_b) {
                        shape.links.push_back(Link{a, b, shape.hbm_bandwidth});
                        continue;
                    }
                    auto link = inter.links.find(std::minmax(gpu_a, gpu_b));
                    if (link == inter.links.end()) {
                        any_unlinked = true;
                    } else {
                        shape.links.push_back(Link{a, b, link->second});
                    }
                }
            }
            shape.bridge_bandwidth = any_unlinked ? inter.bridge_bandwidth : 0.0;
            if (shared) {
                reasons.push_back("several logical devices share a GPU: each such pair gets a "
                                  "link at HBM bandwidth (device-local memcpys)");
            }
        }
        reasons.push_back(absl::StrCat("latency ", latency_text(shape.latency_s), " per transfer (",
                                       inter.latency_why, ")"));
    }

    // The device model: the table's peaks and the smallest memory of the GPUs used.
    exprog::DeviceModel device = device_model_of(answers.gpus[device_list.front()]);
    for (int gpu_idx : device_list) {
        const exprog::DeviceModel other = device_model_of(answers.gpus[gpu_idx]);
        device.memory_bytes = std::min(device.memory_bytes, other.memory_bytes);
        if (!(other == device)) { // mixed GPUs: the slowest peaks count
            device.peak_f32 = std::min(device.peak_f32, other.peak_f32);
            device.peak_f16 = std::min(device.peak_f16, other.peak_f16);
            device.peak_bf16 = std::min(device.peak_bf16, other.peak_bf16);
        }
    }
    absl::StatusOr<Topology> topology = shape.build("discovered");
    if (topology.ok()) {
        topology = topology->with_device(device);
    }
    if (!topology.ok()) {
        return absl::InternalError(
            absl::StrCat("topology_from built an invalid topology: ", topology.status().message()));
    }
    for (const std::string& builtin : exprog::builtin_topology_names()) {
        absl::StatusOr<Topology> known = exprog::builtin_topology(builtin);
        if (known.ok() && same_numbers(*topology, *known)) {
            // The built-in itself, device numbers included (docs/topologies.md "Devices").
            topology = *std::move(known);
            reasons.push_back(absl::StrCat("the same numbers as the built-in ", builtin,
                                           " (docs/topologies/", builtin, ".topo)"));
            break;
        }
    }
    if (!topology.ok()) {
        return topology.status();
    }

    DiscoveredTopology result{*std::move(topology), absl::StrJoin(reasons, ".\n"), {}};
    absl::StrAppend(&result.explanation, ".");
    for (int gpu_idx : device_list) {
        result.devices.push_back(answers.gpus[gpu_idx]);
    }
    return result;
}

std::string describe(const GpuAnswers& answers) {
    if (answers.gpus.empty()) {
        return "no CUDA GPU";
    }
    std::map<std::string, int> gpu_by_bus_id;
    for (const GpuAnswer& gpu : answers.gpus) {
        gpu_by_bus_id[gpu.pci_bus_id] = gpu.device_idx;
    }
    std::string text;
    for (const GpuAnswer& gpu : answers.gpus) {
        absl::StrAppendFormat(&text, "GPU %d: %s, %s, %.1f GiB, %d SMs, PCI %s, ", gpu.device_idx,
                              gpu.name, sm_name(gpu),
                              static_cast<double>(gpu.total_memory_bytes) / kBytesPerGiB,
                              gpu.multiprocessor_count, gpu.pci_bus_id);
        if (!answers.nvml_available) {
            absl::StrAppend(&text, "NVLink unknown\n");
            continue;
        }
        if (gpu.nvlinks.empty()) {
            absl::StrAppend(&text, "no NVLink\n");
            continue;
        }
        int active = 0;
        std::map<std::string, int> far_ends; // "NVSwitch", "GPU 3", ... -> links
        for (const NvLinkAnswer& link : gpu.nvlinks) {
            if (!link.active) {
                continue;
            }
            ++active;
            auto remote_gpu = gpu_by_bus_id.find(link.remote_pci_bus_id);
            if (link.remote == NvLinkRemote::nvswitch) {
                ++far_ends["NVSwitch"];
            } else if (remote_gpu != gpu_by_bus_id.end()) {
                ++far_ends[absl::StrCat("GPU ", remote_gpu->second)];
            } else {
                ++far_ends[absl::StrCat(nvlink_remote_name(link.remote), " ",
                                        link.remote_pci_bus_id)];
            }
        }
        std::vector<std::string> parts;
        for (const auto& [far_end, count] : far_ends) {
            parts.push_back(absl::StrCat(far_end, " x", count));
        }
        absl::StrAppend(&text, "NVLink ", active, " of ", gpu.nvlinks.size(), " active",
                        parts.empty() ? "" : absl::StrCat(" (", absl::StrJoin(parts, ", "), ")"),
                        "\n");
    }
    absl::StrAppend(&text, "NVML: ", answers.nvml_status.empty() ? "-" : answers.nvml_status, "\n");
    const int num_gpus = static_cast<int>(answers.gpus.size());
    if (num_gpus > 1 && answers.peers.size() == answers.gpus.size()) {
        absl::StrAppend(&text, "peer access, src row to dst column (P: cudaDeviceCanAccessPeer, "
                               "digit: performance rank, a: native atomics, .: none):\n    ");
        for (int dst = 0; dst < num_gpus; ++dst) {
            absl::StrAppendFormat(&text, "%5d", dst);
        }
        for (int src = 0; src < num_gpus; ++src) {
            absl::StrAppendFormat(&text, "\n%4d", src);
            for (int dst = 0; dst < num_gpus; ++dst) {
                const PeerAnswer& peer = answers.peers[src][dst];
                std::string cell = src == dst ? "-"
                                   : peer.can_access_peer
                                       ? absl::StrCat("P", peer.performance_rank,
                                                      peer.native_atomic_supported ? "a" : "")
                                       : ".";
                absl::StrAppendFormat(&text, "%5s", cell);
            }
        }
        absl::StrAppend(&text, "\n");
    }
    return text;
}

} // namespace einsummable::runtime::cuda
