#include "runtime/cuda/nvml_loader.h"

#include <cstring>
#include <utility>

#include <dlfcn.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace einsummable::runtime::cuda {
namespace {

using nvml::PciInfo;

extern "C" {
using NvmlInitFn = nvml::Return (*)();
using NvmlShutdownFn = nvml::Return (*)();
using NvmlErrorStringFn = const char* (*)(nvml::Return);
using NvmlGetHandleByPciBusIdFn = nvml::Return (*)(const char*, nvml::Device*);
using NvmlGetPciInfoFn = nvml::Return (*)(nvml::Device, PciInfo*);
using NvmlGetNvLinkStateFn = nvml::Return (*)(nvml::Device, unsigned int, int*);
using NvmlGetNvLinkRemotePciInfoFn = nvml::Return (*)(nvml::Device, unsigned int, PciInfo*);
using NvmlGetNvLinkRemoteDeviceTypeFn = nvml::Return (*)(nvml::Device, unsigned int, int*);
}

// "nvmlDeviceGetNvLinkState(0000:19:00.0, link 3): Not Supported (NVML error 3)"
std::string nvml_error(const nvml::Api& api, nvml::Return code, absl::string_view call) {
    const char* text = api.error_string ? api.error_string(code) : nullptr;
    return absl::StrCat(call, ": ", text != nullptr ? text : "unknown error", " (NVML error ", code,
                        ")");
}

// The Status for a failed NVML call that query_gpu does not tolerate.
absl::Status nvml_failure(const nvml::Api& api, nvml::Return code, absl::string_view call) {
    std::string message = nvml_error(api, code, call);
    switch (code) {
    case nvml::kErrorNotFound:
        return absl::NotFoundError(message);
    case nvml::kErrorNoPermission:
        return absl::PermissionDeniedError(message);
    default:
        return absl::InternalError(message);
    }
}

// "domain:bus:device.function" from NVML's numeric fields, which unlike the strings do not
// depend on the struct version's string widths.
std::string bus_id_from_fields(const PciInfo& info) {
    // The function is not a field of nvmlPciInfo_t; NVLink endpoints are function 0 (the bus id
    // string says so too, and normalize_pci_bus_id prefers it when it parses).
    return absl::StrFormat("%04x:%02x:%02x.0", info.domain, info.bus, info.device);
}

std::string bus_id_of(const PciInfo& info) {
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

Nvml::Nvml(nvml::Api api) : api_(std::move(api)) {}

Nvml::~Nvml() {
    // A failing shutdown leaves nothing to undo; the library is closed either way.
    if (api_.shutdown) {
        api_.shutdown();
    }
    if (handle_ != nullptr) {
        dlclose(handle_);
    }
}

bool Nvml::knows_remote_device_type() const {
    return static_cast<bool>(api_.nvlink_remote_device_type);
}

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::start(nvml::Api api, absl::string_view name) {
    if (nvml::Return code = api.init(); code != nvml::kSuccess) {
        return absl::FailedPreconditionError(
            absl::StrCat(name, ": ", nvml_error(api, code, "nvmlInit_v2")));
    }
    return std::unique_ptr<Nvml>(new Nvml(std::move(api)));
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
    std::string missing;
    // The address of `symbol`, null when absent (the first required one absent goes into
    // `missing`). A null function pointer makes an empty std::function.
    auto resolve = [&](const char* symbol, bool required) -> void* {
        dlerror();
        void* address = dlsym(handle, symbol);
        if (address == nullptr && required && missing.empty()) {
            const char* reason = dlerror();
            missing = absl::StrCat("dlsym(", library_name, ", ", symbol,
                                   "): ", reason != nullptr ? reason : "not found");
        }
        return address;
    };
    nvml::Api api;
    api.init = reinterpret_cast<NvmlInitFn>(resolve("nvmlInit_v2", true));
    api.shutdown = reinterpret_cast<NvmlShutdownFn>(resolve("nvmlShutdown", true));
    api.error_string = reinterpret_cast<NvmlErrorStringFn>(resolve("nvmlErrorString", true));
    api.handle_by_pci_bus_id = reinterpret_cast<NvmlGetHandleByPciBusIdFn>(
        resolve("nvmlDeviceGetHandleByPciBusId_v2", true));
    api.pci_info = reinterpret_cast<NvmlGetPciInfoFn>(resolve("nvmlDeviceGetPciInfo_v3", true));
    api.nvlink_state =
        reinterpret_cast<NvmlGetNvLinkStateFn>(resolve("nvmlDeviceGetNvLinkState", true));
    api.nvlink_remote_pci_info = reinterpret_cast<NvmlGetNvLinkRemotePciInfoFn>(
        resolve("nvmlDeviceGetNvLinkRemotePciInfo_v2", true));
    api.nvlink_remote_device_type = reinterpret_cast<NvmlGetNvLinkRemoteDeviceTypeFn>(
        resolve("nvmlDeviceGetNvLinkRemoteDeviceType", false));
    if (!missing.empty()) {
        dlclose(handle);
        return absl::FailedPreconditionError(missing);
    }
    absl::StatusOr<std::unique_ptr<Nvml>> nvml = start(std::move(api), library_name);
    if (!nvml.ok()) {
        dlclose(handle);
        return nvml.status();
    }
    (*nvml)->handle_ = handle;
    return nvml;
}

absl::StatusOr<NvmlGpuAnswer> Nvml::query_gpu(absl::string_view pci_bus_id) const {
    const std::string bus_id(pci_bus_id);
    nvml::Device device = nullptr;
    if (nvml::Return code = api_.handle_by_pci_bus_id(bus_id.c_str(), &device);
        code != nvml::kSuccess) {
        return nvml_failure(api_, code,
                            absl::StrCat("nvmlDeviceGetHandleByPciBusId_v2(", bus_id, ")"));
    }
    PciInfo pci{};
    if (nvml::Return code = api_.pci_info(device, &pci); code != nvml::kSuccess) {
        return nvml_failure(api_, code, absl::StrCat("nvmlDeviceGetPciInfo_v3(", bus_id, ")"));
    }
    NvmlGpuAnswer answer;
    answer.pci_bus_id = bus_id_of(pci);

    for (unsigned link = 0; link < nvml::kMaxNvLinks; ++link) {
        const std::string where = absl::StrCat("(", answer.pci_bus_id, ", link ", link, ")");
        int state = 0;
        nvml::Return code = api_.nvlink_state(device, link, &state);
        if (code == nvml::kErrorInvalidArgument || code == nvml::kErrorNotSupported) {
            // No such link on this GPU (or no NVLink at all, or none NVML shows: a GPU passed
            // through to a virtual machine).
            continue;
        }
        if (code != nvml::kSuccess) {
            return nvml_failure(api_, code, absl::StrCat("nvmlDeviceGetNvLinkState", where));
        }
        NvLinkAnswer nvlink;
        nvlink.link_idx = static_cast<int>(link);
        nvlink.active = state == nvml::kFeatureEnabled;
        if (nvlink.active) {
            // The far end's PCI id: some drivers answer NOT_SUPPORTED for links to NVSwitches
            // (NCCL skips such a link too); an unknown far end is kept, not fatal for the GPU.
            PciInfo remote{};
            code = api_.nvlink_remote_pci_info(device, link, &remote);
            if (code == nvml::kSuccess) {
                nvlink.remote_pci_bus_id = bus_id_of(remote);
            } else if (code != nvml::kErrorNotSupported) {
                return nvml_failure(api_, code,
                                    absl::StrCat("nvmlDeviceGetNvLinkRemotePciInfo_v2", where));
            }
            if (api_.nvlink_remote_device_type) {
                int type = 0;
                code = api_.nvlink_remote_device_type(device, link, &type);
                if (code == nvml::kSuccess) {
                    nvlink.remote = type == nvml::kNvLinkDeviceTypeGpu      ? NvLinkRemote::gpu
                                    : type == nvml::kNvLinkDeviceTypeSwitch ? NvLinkRemote::nvswitch
                                    : type == nvml::kNvLinkDeviceTypeIbmNpu ? NvLinkRemote::other
                                                                            : NvLinkRemote::unknown;
                } else if (code != nvml::kErrorNotSupported) {
                    return nvml_failure(api_, code,
                                        absl::StrCat("nvmlDeviceGetNvLinkRemoteDeviceType", where));
                }
            }
            // No device type from the driver: a far end NVML knows as a device is a GPU (perhaps
            // one CUDA_VISIBLE_DEVICES hides), not an NVSwitch, which topology_from would assume.
            if (nvlink.remote == NvLinkRemote::unknown && !nvlink.remote_pci_bus_id.empty()) {
                nvml::Device peer = nullptr;
                if (api_.handle_by_pci_bus_id(nvlink.remote_pci_bus_id.c_str(), &peer) ==
                    nvml::kSuccess) {
                    nvlink.remote = NvLinkRemote::gpu;
                }
            }
        }
        answer.nvlinks.push_back(std::move(nvlink));
    }
    return answer;
}

} // namespace einsummable::runtime::cuda
