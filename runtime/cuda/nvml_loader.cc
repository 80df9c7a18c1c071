#include "runtime/cuda/nvml_loader.h"

#include <cstring>
#include <type_traits>
#include <utility>

#include <dlfcn.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace einsummable::runtime::cuda {
namespace {

// The subset of nvml.h used here, declared by hand so that building needs no NVML header.
// Layouts and values follow nvml.h of CUDA 12/13 drivers (NVML API reference, "Device Structs"
// and "NvLink"); nvmlPciInfo_t is the layout that nvmlDeviceGetPciInfo_v3 and
// nvmlDeviceGetNvLinkRemotePciInfo_v2 fill. C enums are int-sized.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;

constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorInvalidArgument = 2;
constexpr NvmlReturn kNvmlErrorNotSupported = 3;
constexpr NvmlReturn kNvmlErrorNotFound = 6;

constexpr int kNvmlFeatureEnabled = 1; // nvmlEnableState_t

// nvmlIntNvLinkDeviceType_t
constexpr int kNvmlNvLinkDeviceTypeGpu = 0;
constexpr int kNvmlNvLinkDeviceTypeIbmNpu = 1;
constexpr int kNvmlNvLinkDeviceTypeSwitch = 2;

// NVML_NVLINK_MAX_LINKS: 18 in NVML 12, 36 in NVML 13 (V100 has 6 links, A100 12, H100 18).
// Links past a GPU's own count answer NVML_ERROR_INVALID_ARGUMENT, so asking for 36 is safe on
// every generation and driver.
constexpr unsigned kNvmlNvLinkMaxLinks = 36;

struct NvmlPciInfo {
    char bus_id_legacy[16]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
    unsigned int domain;
    unsigned int bus;
    unsigned int device;
    unsigned int pci_device_id;
    unsigned int pci_subsystem_id;
    char bus_id[32]; // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

extern "C" {
using NvmlInitFn = NvmlReturn (*)();
using NvmlShutdownFn = NvmlReturn (*)();
using NvmlErrorStringFn = const char* (*)(NvmlReturn);
using NvmlGetHandleByPciBusIdFn = NvmlReturn (*)(const char*, NvmlDevice*);
using NvmlGetPciInfoFn = NvmlReturn (*)(NvmlDevice, NvmlPciInfo*);
using NvmlGetNvLinkStateFn = NvmlReturn (*)(NvmlDevice, unsigned int, int*);
using NvmlGetNvLinkRemotePciInfoFn = NvmlReturn (*)(NvmlDevice, unsigned int, NvmlPciInfo*);
using NvmlGetNvLinkRemoteDeviceTypeFn = NvmlReturn (*)(NvmlDevice, unsigned int, int*);
}

// "domain:bus:device.function" from NVML's numeric fields, which unlike the strings do not
// depend on the struct version's string widths.
std::string bus_id_from_fields(const NvmlPciInfo& info) {
    // The function is not a field of nvmlPciInfo_t; NVLink endpoints are function 0 (the bus id
    // string says so too, and normalize_pci_bus_id prefers it when it parses).
    return absl::StrFormat("%04x:%02x:%02x.0", info.domain, info.bus, info.device);
}

std::string bus_id_of(const NvmlPciInfo& info) {
    const size_t length = strnlen(info.bus_id, sizeof(info.bus_id));
    if (length > 0 && length < sizeof(info.bus_id)) {
        return normalize_pci_bus_id(absl::string_view(info.bus_id, length));
    }
    return bus_id_from_fields(info);
}

bool parse_hex(absl::string_view text, unsigned* value) {
    if (text.empty() || text.size() > 8) {
        return false;
    }
    unsigned result = 0;
    for (char c : text) {
        const char lower = absl::ascii_tolower(static_cast<unsigned char>(c));
        unsigned digit = 0;
        if (lower >= '0' && lower <= '9') {
            digit = lower - '0';
        } else if (lower >= 'a' && lower <= 'f') {
            digit = lower - 'a' + 10;
        } else {
            return false;
        }
        result = result * 16 + digit;
    }
    *value = result;
    return true;
}

} // namespace

struct Nvml::Api {
    NvmlInitFn init = nullptr;
    NvmlShutdownFn shutdown = nullptr;
    NvmlErrorStringFn error_string = nullptr;
    NvmlGetHandleByPciBusIdFn handle_by_pci_bus_id = nullptr;
    NvmlGetPciInfoFn pci_info = nullptr;
    NvmlGetNvLinkStateFn nvlink_state = nullptr;
    NvmlGetNvLinkRemotePciInfoFn nvlink_remote_pci_info = nullptr;
    NvmlGetNvLinkRemoteDeviceTypeFn nvlink_remote_device_type = nullptr; // optional

    // "nvmlDeviceGetNvLinkState(0000:19:00.0, link 3): Not Supported (NVML error 3)"
    std::string error(NvmlReturn code, absl::string_view call) const {
        const char* text = error_string != nullptr ? error_string(code) : nullptr;
        return absl::StrCat(call, ": ", text != nullptr ? text : "unknown error", " (NVML error ",
                            code, ")");
    }
};

absl::string_view nvlink_remote_name(NvLinkRemote remote) {
    switch (remote) {
    case NvLinkRemote::gpu:
        return "gpu";
    case NvLinkRemote::nvswitch:
        return "nvswitch";
    case NvLinkRemote::other:
        return "other";
    case NvLinkRemote::unknown:
        break;
    }
    return "unknown";
}

std::string normalize_pci_bus_id(absl::string_view bus_id) {
    // [domain:]bus:device.function, all hex; CUDA writes a 4-digit domain, NVML an 8-digit one.
    const std::string trimmed(absl::StripAsciiWhitespace(bus_id));
    const size_t dot = trimmed.rfind('.');
    const size_t last_colon = trimmed.rfind(':');
    if (dot == std::string::npos || last_colon == std::string::npos || last_colon > dot) {
        return absl::AsciiStrToLower(trimmed);
    }
    const size_t first_colon = trimmed.find(':');
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    const bool has_domain = first_colon != last_colon;
    const bool parsed =
        (!has_domain || parse_hex(absl::string_view(trimmed).substr(0, first_colon), &domain)) &&
        parse_hex(
            absl::string_view(trimmed).substr(has_domain ? first_colon + 1 : 0,
                                              last_colon - (has_domain ? first_colon + 1 : 0)),
            &bus) &&
        parse_hex(absl::string_view(trimmed).substr(last_colon + 1, dot - last_colon - 1),
                  &device) &&
        parse_hex(absl::string_view(trimmed).substr(dot + 1), &function);
    if (!parsed) {
        return absl::AsciiStrToLower(trimmed);
    }
    return absl::StrFormat("%04x:%02x:%02x.%x", domain, bus, device, function);
}

Nvml::Nvml(void* handle, std::unique_ptr<Api> api) : handle_(handle), api_(std::move(api)) {}

Nvml::~Nvml() {
    // A failing shutdown leaves nothing to undo; the library is closed either way.
    api_->shutdown();
    dlclose(handle_);
}

bool Nvml::knows_remote_device_type() const {
    return api_->nvlink_remote_device_type != nullptr;
}

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::load(absl::string_view library) {
    const std::string library_name(library);
    // RTLD_LOCAL: NVML's symbols must not satisfy anyone else's lookups.
    void* handle = dlopen(library_name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
        const char* reason = dlerror();
        return absl::UnavailableError(absl::StrCat("dlopen(", library_name,
                                                   "): ", reason != nullptr ? reason : "failed",
                                                   " (no NVIDIA driver's NVML on this machine)"));
    }
    auto api = std::make_unique<Api>();
    std::string missing;
    auto resolve = [&](auto& function, const char* symbol, bool required) {
        dlerror();
        void* address = dlsym(handle, symbol);
        if (address == nullptr && required && missing.empty()) {
            const char* reason = dlerror();
            missing = absl::StrCat("dlsym(", library_name, ", ", symbol,
                                   "): ", reason != nullptr ? reason : "not found");
        }
        function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(address);
    };
    resolve(api->init, "nvmlInit_v2", true);
    resolve(api->shutdown, "nvmlShutdown", true);
    resolve(api->error_string, "nvmlErrorString", true);
    resolve(api->handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2", true);
    resolve(api->pci_info, "nvmlDeviceGetPciInfo_v3", true);
    resolve(api->nvlink_state, "nvmlDeviceGetNvLinkState", true);
    resolve(api->nvlink_remote_pci_info, "nvmlDeviceGetNvLinkRemotePciInfo_v2", true);
    resolve(api->nvlink_remote_device_type, "nvmlDeviceGetNvLinkRemoteDeviceType", false);
    if (!missing.empty()) {
        dlclose(handle);
        return absl::FailedPreconditionError(missing);
    }
    if (NvmlReturn code = api->init(); code != kNvmlSuccess) {
        absl::Status status = absl::FailedPreconditionError(
            absl::StrCat(library_name, ": ", api->error(code, "nvmlInit_v2")));
        dlclose(handle);
        return status;
    }
    return std::unique_ptr<Nvml>(new Nvml(handle, std::move(api)));
}

absl::StatusOr<NvmlGpuAnswer> Nvml::query_gpu(absl::string_view pci_bus_id) const {
    const std::string bus_id(pci_bus_id);
    NvmlDevice device = nullptr;
    if (NvmlReturn code = api_->handle_by_pci_bus_id(bus_id.c_str(), &device);
        code != kNvmlSuccess) {
        const std::string message =
            api_->error(code, absl::StrCat("nvmlDeviceGetHandleByPciBusId_v2(", bus_id, ")"));
        return code == kNvmlErrorNotFound ? absl::NotFoundError(message)
                                          : absl::InternalError(message);
    }
    NvmlPciInfo pci{};
    if (NvmlReturn code = api_->pci_info(device, &pci); code != kNvmlSuccess) {
        return absl::InternalError(
            api_->error(code, absl::StrCat("nvmlDeviceGetPciInfo_v3(", bus_id, ")")));
    }
    NvmlGpuAnswer answer;
    answer.pci_bus_id = bus_id_of(pci);

    for (unsigned link = 0; link < kNvmlNvLinkMaxLinks; ++link) {
        const std::string where = absl::StrCat("(", answer.pci_bus_id, ", link ", link, ")");
        int state = 0;
        NvmlReturn code = api_->nvlink_state(device, link, &state);
        if (code == kNvmlErrorInvalidArgument || code == kNvmlErrorNotSupported) {
            // No such link on this GPU (or no NVLink at all).
            continue;
        }
        if (code != kNvmlSuccess) {
            return absl::InternalError(
                api_->error(code, absl::StrCat("nvmlDeviceGetNvLinkState", where)));
        }
        NvLinkAnswer nvlink;
        nvlink.link_idx = static_cast<int>(link);
        nvlink.active = state == kNvmlFeatureEnabled;
        if (nvlink.active) {
            // The far end's PCI id: some drivers answer NOT_SUPPORTED for links to NVSwitches
            // (NCCL skips such a link too); an unknown far end is kept, not fatal for the GPU.
            NvmlPciInfo remote{};
            code = api_->nvlink_remote_pci_info(device, link, &remote);
            if (code == kNvmlSuccess) {
                nvlink.remote_pci_bus_id = bus_id_of(remote);
            } else if (code != kNvmlErrorNotSupported) {
                return absl::InternalError(
                    api_->error(code, absl::StrCat("nvmlDeviceGetNvLinkRemotePciInfo_v2", where)));
            }
            if (api_->nvlink_remote_device_type != nullptr) {
                int type = 0;
                code = api_->nvlink_remote_device_type(device, link, &type);
                if (code == kNvmlSuccess) {
                    nvlink.remote = type == kNvmlNvLinkDeviceTypeGpu      ? NvLinkRemote::gpu
                                    : type == kNvmlNvLinkDeviceTypeSwitch ? NvLinkRemote::nvswitch
                                    : type == kNvmlNvLinkDeviceTypeIbmNpu ? NvLinkRemote::other
                                                                          : NvLinkRemote::unknown;
                } else if (code != kNvmlErrorNotSupported) {
                    return absl::InternalError(api_->error(
                        code, absl::StrCat("nvmlDeviceGetNvLinkRemoteDeviceType", where)));
                }
            }
            // No device type from the driver: a far end NVML knows as a device is a GPU (perhaps
            // one CUDA_VISIBLE_DEVICES hides), not an NVSwitch, which topology_from would assume.
            if (nvlink.remote == NvLinkRemote::unknown && !nvlink.remote_pci_bus_id.empty()) {
                NvmlDevice peer = nullptr;
                if (api_->handle_by_pci_bus_id(nvlink.remote_pci_bus_id.c_str(), &peer) ==
                    kNvmlSuccess) {
                    nvlink.remote = NvLinkRemote::gpu;
                }
            }
        }
        answer.nvlinks.push_back(std::move(nvlink));
    }
    return answer;
}

} // namespace einsummable::runtime::cuda
