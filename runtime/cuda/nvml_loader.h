#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::runtime::cuda {

// NVML (the driver's management library) is opened at run time with dlopen, never linked: the
// binaries must start on machines without an NVIDIA driver, and NVML's header is not part of the
// CUDA toolkit. nvml_loader.cc declares the few prototypes and structs it uses itself.

// What the far end of an NVLink is.
enum class NvLinkRemote {
    unknown, // NVML could not say (old driver without nvmlDeviceGetNvLinkRemoteDeviceType)
    gpu,
    nvswitch,
    other, // an IBM NPU (POWER9 hosts)
};

absl::string_view nvlink_remote_name(NvLinkRemote remote); // "unknown", "gpu", "nvswitch", ...

// One NVLink of a GPU as NVML reports it. Only links that exist are listed.
struct NvLinkAnswer {
    int link_idx = 0;
    bool active = false;
    // The remote end's PCI bus id, normalised (normalize_pci_bus_id); empty if inactive.
    std::string remote_pci_bus_id;
    NvLinkRemote remote = NvLinkRemote::unknown;
};

// NVML's view of one GPU.
struct NvmlGpuAnswer {
    std::string pci_bus_id; // normalised
    std::vector<NvLinkAnswer> nvlinks;
};

// PCI bus ids come as "0000:3B:00.0" from CUDA and "00000000:3B:00.0" from NVML; both become
// "0000:3b:00.0" (domain, bus, device in lower-case hex, function). Text that is not a bus id
// comes back lower-cased, so it still compares equal only to itself.
std::string normalize_pci_bus_id(absl::string_view bus_id);

class Nvml {
public:
    // dlopens `library`, resolves the NVML entry points and calls nvmlInit_v2. A missing library
    // is Unavailable, a missing symbol or a failed nvmlInit_v2 is FailedPrecondition; each names
    // the library and dlerror() or NVML's error string. nvmlDeviceGetNvLinkRemoteDeviceType is
    // optional (older drivers lack it): without it every remote is NvLinkRemote::unknown.
    static absl::StatusOr<std::unique_ptr<Nvml>>
    load(absl::string_view library = "libnvidia-ml.so.1");

    // nvmlShutdown, then dlclose.
    ~Nvml();
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    // The GPU at a PCI bus id (as cudaDeviceGetPCIBusId gives it) and its NVLinks. A GPU without
    // NVLink has no links; any other NVML failure is a Status naming the call, GPU and link.
    absl::StatusOr<NvmlGpuAnswer> query_gpu(absl::string_view pci_bus_id) const;

    bool knows_remote_device_type() const;

private:
    struct Api;
    Nvml(void* handle, std::unique_ptr<Api> api);

    void* handle_ = nullptr;
    std::unique_ptr<Api> api_;
};

} // namespace einsummable::runtime::cuda
