#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::runtime::cuda {

// NVML (the driver's management library) is opened at run time with dlopen, never linked: the
// binaries must start on machines without an NVIDIA driver, and NVML's header is not part of the
// CUDA toolkit. The few prototypes, structs and values used are declared here by hand (namespace
// nvml), with the layouts and values of nvml.h of CUDA 12/13 drivers (NVML API reference,
// "Device Structs" and "NvLink"). C enums are int-sized.
namespace nvml {

using Return = int; // nvmlReturn_t
using Device = struct DeviceOpaque*;

constexpr Return kSuccess = 0;
constexpr Return kErrorUninitialized = 1;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNoPermission = 4;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorUnknown = 999;

constexpr int kFeatureDisabled = 0; // nvmlEnableState_t
constexpr int kFeatureEnabled = 1;

// nvmlIntNvLinkDeviceType_t
constexpr int kNvLinkDeviceTypeGpu = 0;
constexpr int kNvLinkDeviceTypeIbmNpu = 1;
constexpr int kNvLinkDeviceTypeSwitch = 2;

// NVML_NVLINK_MAX_LINKS: 18 in NVML 12, 36 in NVML 13 (V100 has 6 links, A100 12, H100 18).
// Links past a GPU's own count answer NVML_ERROR_INVALID_ARGUMENT, so asking for 36 is safe on
// every generation and driver.
constexpr unsigned kMaxNvLinks = 36;

// nvmlPciInfo_t as nvmlDeviceGetPciInfo_v3 and nvmlDeviceGetNvLinkRemotePciInfo_v2 fill it.
struct PciInfo {
    char bus_id_legacy[16]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    char bus_id[32]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

// The NVML functions the loader calls, one member per function with its signature. Nvml::load
// fills the table with the driver's functions; a test fills it with functions that give recorded
// answers (tests/unit/runtime/cuda_discovery_test.cc: a DGX, a GPU passed through to a VM, NVML
// refusing permission), so that what query_gpu tolerates and what it fails on is checked on
// machines that are not at hand.
struct Api {
    std::function<Return()> init;     // nvmlInit_v2
    std::function<Return()> shutdown; // nvmlShutdown
    std::function<const char*(Return)> error_string;
    std::function<Return(const char* bus_id, Device*)> handle_by_pci_bus_id; // ..._v2
    std::function<Return(Device, PciInfo*)> pci_info;                        // ..._v3
    std::function<Return(Device, unsigned link, int* state)> nvlink_state;
    std::function<Return(Device, unsigned link, PciInfo*)> nvlink_remote_pci_info; // ..._v2
    // Optional (older drivers lack it): empty, every remote is NvLinkRemote::unknown.
    std::function<Return(Device, unsigned link, int* type)> nvlink_remote_device_type;
};

} // namespace nvml

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
    // dlopens `library`, resolves the NVML entry points and starts NVML (start()). A missing
    // library is Unavailable, a missing symbol FailedPrecondition naming the library and
    // dlerror(). nvmlDeviceGetNvLinkRemoteDeviceType is optional (older drivers lack it).
    static absl::StatusOr<std::unique_ptr<Nvml>>
    load(absl::string_view library = "libnvidia-ml.so.1");

    // NVML over the functions in `api` (every member but nvlink_remote_device_type set): calls
    // api.init; FailedPrecondition naming `name` and NVML's error string when it fails (a
    // driver that refuses the caller answers NVML_ERROR_NO_PERMISSION here). load() ends in it;
    // tests call it with recorded answers.
    static absl::StatusOr<std::unique_ptr<Nvml>> start(nvml::Api api, absl::string_view name);

    // api.shutdown, then dlclose when the library was loaded.
    ~Nvml();
    Nvml(const Nvml&) = delete;
    Nvml& operator=(const Nvml&) = delete;

    // The GPU at a PCI bus id (as cudaDeviceGetPCIBusId gives it) and its NVLinks. Tolerated,
    // as NVML's answers on GPUs without NVLink, on GPUs passed through to a virtual machine and
    // on some drivers' NVSwitch links: NVML_ERROR_NOT_SUPPORTED (or INVALID_ARGUMENT) from
    // nvmlDeviceGetNvLinkState, which lists no such link (a GPU without NVLink has none), and
    // NOT_SUPPORTED for an active link's far end (bus id empty, or remote unknown). Any other
    // NVML failure is a Status naming the call, GPU and link: NotFound when no GPU has the bus
    // id, PermissionDenied for NVML_ERROR_NO_PERMISSION, Internal otherwise.
    absl::StatusOr<NvmlGpuAnswer> query_gpu(absl::string_view pci_bus_id) const;

    bool knows_remote_device_type() const;

private:
    explicit Nvml(nvml::Api api);

    void* handle_ = nullptr; // the dlopened library; null for start()'s
    nvml::Api api_;
};

} // namespace einsummable::runtime::cuda
