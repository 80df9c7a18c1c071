#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/exprog/topology.h"
#include "runtime/cuda/nvml_loader.h"

namespace einsummable::runtime::cuda {

// Device discovery in two steps: query_gpus() records what the hardware says (CUDA runtime,
// NVML when it loads) and touches nothing else; topology_from() turns such answers into the
// exprog::Topology the synthesiser plans for, as a pure function, so that tests check it on
// recorded answers of machines that are not at hand (tests/unit/runtime/cuda_discovery_test.cc).

// One GPU as the CUDA runtime and NVML describe it.
struct GpuAnswer {
    int device_idx = 0; // CUDA runtime ordinal (after CUDA_VISIBLE_DEVICES)
    std::string name;   // cudaDeviceProp::name, e.g. "NVIDIA H100 80GB HBM3"
    int64_t total_memory_bytes = 0;
    int compute_capability_major = 0;
    int compute_capability_minor = 0;
    int multiprocessor_count = 0;
    // Peak memory clock and bus width (cudaDevAttrMemoryClockRate, ...GlobalMemoryBusWidth);
    // 0 when unknown. Used only to estimate the HBM bandwidth of a GPU the table does not know.
    int memory_clock_khz = 0;
    int memory_bus_width_bits = 0;
    std::string pci_bus_id; // normalize_pci_bus_id(cudaDeviceGetPCIBusId)
    // From NVML; empty when NVML is not available or the GPU has no NVLink.
    std::vector<NvLinkAnswer> nvlinks;
};

// What the CUDA runtime says about src -> dst (cudaDeviceCanAccessPeer and
// cudaDeviceGetP2PAttribute).
struct PeerAnswer {
    bool can_access_peer = false;
    int performance_rank = 0; // relative; lower is faster
    bool access_supported = false;
    bool native_atomic_supported = false;
};

struct GpuAnswers {
    std::vector<GpuAnswer> gpus; // indexed by CUDA ordinal
    // [src][dst] for src != dst; the diagonal is left default. Empty when there are no GPUs.
    std::vector<std::vector<PeerAnswer>> peers;
    // Whether NVML answered for every GPU; if not, nvml_status says why (e.g. the dlopen error),
    // and no GPU has nvlinks.
    bool nvml_available = false;
    std::string nvml_status;
};

// Asks the CUDA runtime and, when it loads, NVML (with_nvml_answers). A machine without a CUDA
// driver or GPU gives zero GPUs, not an error; NVML missing or failing gives nvml_available =
// false with the reason, not an error. Other CUDA failures are a Status naming the call and the
// device.
absl::StatusOr<GpuAnswers> query_gpus();

// The NVML half of query_gpus: `answers` (the CUDA runtime's, for one or more GPUs) with each
// GPU's NVLinks as `nvml` answers them (Nvml::query_gpu, by the GPU's PCI bus id).
// nvml_available = true only when NVML answered for every GPU; otherwise no GPU has NVLinks
// (facts for only some GPUs would mislead the topology), and nvml_status says why: `nvml`'s
// status when NVML did not load or start, or the first GPU's failure ("NVML loaded but failed
// for GPU 1: ..."). Tests feed it NVML with recorded answers (Nvml::start).
GpuAnswers with_nvml_answers(GpuAnswers answers, const absl::StatusOr<std::unique_ptr<Nvml>>& nvml);

// The topology for a list of logical devices: device_list[logical device] = CUDA ordinal of the
// GPU it runs on. Several logical devices may share a GPU ("virtual devices": {0, 0, 0, 0} is
// four devices on GPU 0).
struct DiscoveredTopology {
    exprog::Topology topology;
    // Which facts led to which numbers, one sentence per decision, for logs, `explain` and
    // GetServerInfo.
    std::string explanation;
    // The GPU of each logical device (a copy of answers.gpus[device_list[i]]).
    std::vector<GpuAnswer> devices;
};

// Rules (each one is stated in the explanation when it applies):
//   - logical devices all on one GPU: copies between them are device-local memcpys; a switch at
//     that GPU's HBM bandwidth.
//   - every GPU has active NVLinks to NVSwitches: a switch whose per-GPU bandwidth is the
//     fewest NVSwitch links of any GPU times the NVLink generation's per-link bandwidth.
//   - NVLinks between GPUs (DGX-1 hybrid cube-mesh, NVLink bridges): links from the actual link
//     counts; unlinked pairs share a PCIe bridge.
//   - NVML not available, or no active NVLink between the GPUs: a switch at a PCIe figure.
//   - several GPUs, some shared by several logical devices: the inter-GPU topology; on a
//     switch, same-GPU pairs get the switch's bandwidth (an underestimate), on links they get
//     a link at HBM bandwidth.
// HBM bandwidth: the slowest GPU's, from a small table by GPU name; an unknown GPU's is
// estimated from its memory clock and bus width, or assumed. A topology with exactly the numbers
// of a built-in (docs/topologies/*.topo) takes the built-in's name, else "discovered".
// InvalidArgument for an empty device_list or one naming a GPU that is not there.
absl::StatusOr<DiscoveredTopology> topology_from(const GpuAnswers& answers,
                                                 absl::Span<const int> device_list);

// 0, 1, ..., answers.gpus.size() - 1: one logical device per GPU. (--devices lists are
// parsed by parse_device_list in cuda_backend.h.)
std::vector<int> one_device_per_gpu(const GpuAnswers& answers);

// For logs and GetServerInfo: one line per GPU (name, compute capability, memory, SMs, PCI bus
// id, NVLinks), NVML's status, then the peer matrix with a legend.
std::string describe(const GpuAnswers& answers);

} // namespace einsummable::runtime::cuda
