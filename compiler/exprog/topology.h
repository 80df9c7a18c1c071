#pragma once

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/support/kernel_class.h"

namespace einsummable::exprog {

// A machine as the exchange-program simulator sees it (docs/topologies.md): GPUs, the
// bandwidth of each one's HBM, a fixed latency per transfer, and a set of named resources
// with capacities in bytes/s that transfers share.
//
//   - switch (NVSwitch, DGX-A100/H100): each GPU has an egress and an ingress resource of
//     capacity link_bandwidth; src -> dst uses egress(src) and ingress(dst) only.
//   - links (DGX-1 V100 hybrid cube-mesh): a directed resource per ordered linked pair, with
//     the pair's capacity per direction; transfers between unlinked GPUs all share one
//     "pcie-bridge" resource (both directions).
//   - cluster (several DGX-A100/H100 nodes): `nodes` switches of gpus/nodes GPUs each, GPU g in
//     node g / (gpus/nodes). Inside a node as a switch; between nodes each GPU's own NIC
//     (nic-out(g), nic-in(g), capacity nic_bandwidth: GPUDirect RDMA on a non-blocking
//     rail-optimized fabric), src -> dst using nic-out(src) and nic-in(dst) only, after
//     nic_latency instead of latency.
// Every GPU also has an hbm resource that local aggregations use.
//
// Topologies are data: parse_topology reads the text format, builtin_topology the three
// machines of docs/workloads.md "Machines". This library does no I/O; tools read the files.

enum class TopologyKind {
    nvswitch, // written "switch"
    links,
    cluster,
};

absl::string_view topology_kind_name(TopologyKind kind); // "switch", "links" or "cluster"

// A resource transfers or aggregations flow through; capacity in bytes/s.
struct Resource {
    std::string name; // "egress(0)", "ingress(3)", "link(0->3)", "pcie-bridge", "hbm(2)"
    double capacity = 0.0;
};

using support::KernelClass;

// One kernel class's own fractions of peak FLOP/s and of HBM bandwidth; nullopt: the device's
// shared compute_efficiency / memory_efficiency.
struct ClassEfficiency {
    std::optional<double> compute;
    std::optional<double> memory;

    bool operator==(const ClassEfficiency&) const = default;
};

// What one device computes with, for the whole-plan simulator (compiler/physical/
// plan_simulation.h; docs/topologies.md "Devices"). Every device of a topology has the same
// model. A peak of 0 means "not given": simulating a kernel of that dtype is an error naming the
// key. A kernel of class c takes max(FLOPs / (peak · compute_efficiency_of(c)), bytes /
// (hbm_bandwidth · memory_efficiency_of(c))) + launch_overhead (kernel_seconds).
struct DeviceModel {
    double peak_f32 = 0.0;     // dense FLOP/s
    double peak_f16 = 0.0;     // dense FLOP/s (tensor cores)
    double peak_bf16 = 0.0;    // dense FLOP/s (tensor cores)
    double memory_bytes = 0.0; // capacity of one device; 0 = not given
    // Fraction of peak FLOP/s a kernel reaches; fraction of HBM bandwidth a memory-bound kernel
    // reaches; fixed time per kernel (launch inside a CUDA graph, or a dispatch on the CPU).
    // The two fractions apply to every kernel class without its own in by_class.
    double compute_efficiency = 0.75;
    double memory_efficiency = 0.85;
    double launch_overhead_s = 3e-6;
    // Per kernel class, indexed by static_cast<int>(KernelClass) (the topology format's
    // <class>_compute_efficiency and <class>_memory_efficiency keys).
    std::array<ClassEfficiency, support::kKernelClasses.size()> by_class{};

    ClassEfficiency& efficiency(KernelClass kernel_class) {
        return by_class[static_cast<size_t>(kernel_class)];
    }
    const ClassEfficiency& efficiency(KernelClass kernel_class) const {
        return by_class[static_cast<size_t>(kernel_class)];
    }
    // The class's own fraction where it has one, the shared one otherwise.
    double compute_efficiency_of(KernelClass kernel_class) const {
        return efficiency(kernel_class).compute.value_or(compute_efficiency);
    }
    double memory_efficiency_of(KernelClass kernel_class) const {
        return efficiency(kernel_class).memory.value_or(memory_efficiency);
    }

    bool operator==(const DeviceModel&) const = default;
};

// Seconds one kernel of `kernel_class` takes on `device` with HBM of `hbm_bandwidth` bytes/s:
// the kernel model of the whole-plan simulator and of the planner's time pricing
// (compiler/logical/time_model.h), kept here so that both give the same number:
//   max(bytes / (hbm_bandwidth · memory_efficiency_of(class)),
//       flops / (peak · compute_efficiency_of(class))) + launch_overhead,
// the compute term only when flops > 0. `peak` is the FLOP/s of the kernel's dtype (the caller
// picks it and rejects a kernel with flops but no peak).
double kernel_seconds(const DeviceModel& device, KernelClass kernel_class, double hbm_bandwidth,
                      double peak, double flops, double bytes);

// A bidirectional NVLink connection between GPUs a and b; bandwidth per direction, bytes/s.
struct Link {
    int a = 0;
    int b = 0;
    double bandwidth = 0.0;
};

// The host-link bandwidth of a topology whose file gives no host_bandwidth: PCIe 3.0 x16's
// measured device-to-host rate (docs/topologies.md "Host link"), the slowest of the built-ins.
inline constexpr double kDefaultHostBandwidth = 12e9;

class Topology {
public:
    // Validating constructors for topologies built in code (InvalidArgument on bad values).
    // Bandwidths are bytes/s and must be positive and finite; latency is seconds, >= 0.
    static absl::StatusOr<Topology> make_switch(std::string name, int num_gpus,
                                                double link_bandwidth, double hbm_bandwidth,
                                                double latency_s);
    // bridge_bandwidth may be 0 only when every pair of GPUs is linked.
    static absl::StatusOr<Topology> make_links(std::string name, int num_gpus,
                                               std::vector<Link> links, double bridge_bandwidth,
                                               double hbm_bandwidth, double latency_s);
    // `nodes` switches of `gpus_per_node` GPUs (link_bandwidth inside, latency_s per transfer),
    // joined by a NIC per GPU (nic_bandwidth per direction, nic_latency_s per transfer).
    static absl::StatusOr<Topology> make_cluster(std::string name, int nodes, int gpus_per_node,
                                                 double link_bandwidth, double nic_bandwidth,
                                                 double hbm_bandwidth, double latency_s,
                                                 double nic_latency_s);

    const std::string& name() const { return name_; }
    int num_gpus() const { return num_gpus_; }
    TopologyKind kind() const { return kind_; }
    double hbm_bandwidth() const { return hbm_bandwidth_; }
    // The latency of a transfer inside a node (every transfer but a cluster's between nodes).
    double latency_s() const { return latency_s_; }
    // The latency of a transfer src -> dst: nic_latency_s between a cluster's nodes, latency_s
    // otherwise.
    double latency_s(int src, int dst) const {
        return node_of(src) == node_of(dst) ? latency_s_ : nic_latency_s_;
    }
    // cluster: its nodes and GPUs per node; one node of every GPU otherwise.
    int nodes() const { return nodes_; }
    int gpus_per_node() const { return num_gpus_ / nodes_; }
    int node_of(int gpu) const { return gpu / gpus_per_node(); }
    // cluster: each GPU's NIC per direction, and the latency of a transfer between nodes; 0 and
    // latency_s() otherwise.
    double nic_bandwidth() const { return nic_bandwidth_; }
    double nic_latency_s() const { return nic_latency_s_; }
    // switch and cluster (inside a node): per direction per GPU; 0 for links.
    double link_bandwidth() const { return link_bandwidth_; }
    // links: the shared bridge's capacity (0 if there is no unlinked pair); 0 for switch.
    double bridge_bandwidth() const { return bridge_bandwidth_; }
    // Per GPU, per direction: its link to the host (PCIe), which the offload of saved outputs
    // uses (SimTask::Kind::offload); kDefaultHostBandwidth unless the file gives host_bandwidth.
    double host_bandwidth() const { return host_bandwidth_; }
    // This topology with another host-link bandwidth; InvalidArgument unless positive and finite.
    absl::StatusOr<Topology> with_host_bandwidth(double host_bandwidth) const;
    // links: the links, each pair once with a < b, sorted; empty for switch.
    const std::vector<Link>& links() const { return links_; }
    // The compute model every device shares (docs/topologies.md "Devices").
    const DeviceModel& device() const { return device_; }
    // This topology with another device model; InvalidArgument naming the field (its key in the
    // text format) for a negative or non-finite peak or capacity, an efficiency outside (0, 1]
    // (shared or of a class), a negative launch overhead.
    absl::StatusOr<Topology> with_device(const DeviceModel& device) const;

    const std::vector<Resource>& resources() const { return resources_; }
    // The index in resources() of a name, or -1.
    int find_resource(absl::string_view name) const;
    // The hbm resource of a GPU (index into resources()). Precondition: 0 <= gpu < num_gpus.
    int hbm(int gpu) const { return hbm_[gpu]; }
    // The resources (indices into resources()) a transfer src -> dst uses. Empty if src or dst
    // is out of range or src == dst.
    const std::vector<int>& route(int src, int dst) const;

    // The text format (parse_topology(to_text()) gives this topology back, numbers to 15
    // significant digits).
    std::string to_text() const;

private:
    Topology() = default;
    int add_resource(std::string name, double capacity);

    std::string name_;
    int num_gpus_ = 0;
    TopologyKind kind_ = TopologyKind::nvswitch;
    double hbm_bandwidth_ = 0.0;
    double latency_s_ = 0.0;
    int nodes_ = 1;
    double nic_bandwidth_ = 0.0;
    double nic_latency_s_ = 0.0;
    double link_bandwidth_ = 0.0;
    double bridge_bandwidth_ = 0.0;
    double host_bandwidth_ = kDefaultHostBandwidth;
    std::vector<Link> links_;
    DeviceModel device_;
    std::vector<Resource> resources_;
    std::vector<int> hbm_;
    std::vector<std::vector<int>> routes_; // [src * num_gpus + dst]
};

// Reads the text format of docs/topologies.md:
//
//   # DGX A100
//   name: dgx-a100
//   gpus: 8
//   kind: switch
//   link_bandwidth: 300 GB/s     # per direction per GPU
//   hbm_bandwidth: 1555 GB/s
//   latency: 2 us
//
// (kind: links takes `link: A B <bandwidth>` lines and `bridge_bandwidth:` instead of
// link_bandwidth; kind: cluster takes link_bandwidth and `nodes`, `nic_bandwidth` and
// `nic_latency`; the optional host_bandwidth gives the host link, kDefaultHostBandwidth when
// absent; the optional device keys peak_f32/peak_f16/peak_bf16, memory,
// compute_efficiency, memory_efficiency, launch_overhead and, per kernel class,
// <class>_compute_efficiency and <class>_memory_efficiency (gemm_compute_efficiency, ...) give
// the DeviceModel). Errors are InvalidArgument "line L: ..." naming the problem; a missing
// required key has no line.
absl::StatusOr<Topology> parse_topology(absl::string_view text);

// A memory size in the topology file's units (B, kB, KB, MB, GB, TB, KiB, MiB, GiB, TiB; a bare
// number is bytes), in bytes; nullopt when it is not one. For flags that take the same sizes.
std::optional<double> parse_memory_size(absl::string_view text);

// A switch topology like `base` (its bandwidths, latency and device model) with `gpus` GPUs,
// named "<base>-<gpus>": the simulated DGX-H100-like switches of 16 and 64 GPUs the
// context-parallel experiments use (bench/README.md). InvalidArgument when base is not a switch
// or gpus is out of range.
absl::StatusOr<Topology> resized_switch(const Topology& base, int gpus);

// The built-in machines: "dgx-a100", "dgx-h100", "dgx-v100", and clusters of 2 and 4 of the
// first two, "dgx-a100-2nodes" ... "dgx-h100-4nodes" (docs/topologies/<name>.topo).
std::vector<std::string> builtin_topology_names();
// The embedded text of a built-in (identical to docs/topologies/<name>.topo); NotFound listing
// the known names otherwise.
absl::StatusOr<absl::string_view> builtin_topology_text(absl::string_view name);
absl::StatusOr<Topology> builtin_topology(absl::string_view name);

} // namespace einsummable::exprog
