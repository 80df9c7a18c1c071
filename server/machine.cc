#include "server/machine.h"

#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "runtime/command_line.h"
#include "runtime/plan.h"

namespace einsummable::server {

absl::StatusOr<ResolvedMachine> resolve_machine(const DaemonConfig& config,
                                                const BackendChooser& choose_backend,
                                                std::vector<LogLine>* log) {
    const auto info = [log](std::string text) {
        log->push_back({LogLine::Level::info, std::move(text)});
    };
    const auto warn = [log](std::string text) {
        log->push_back({LogLine::Level::warn, std::move(text)});
    };
    // check_config has checked it in the daemon.
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t device_memory,
                                 parse_byte_size("--device_memory", config.device_memory));
    EINSUMMABLE_ASSIGN_OR_RETURN(runtime::BackendChoice choice,
                                 choose_backend(backend_request(config)));
    const int devices = choice.backend->devices();
    info(absl::StrCat("backend: ", choice.reason));
    if (!choice.gpus.empty()) {
        info(absl::StrCat("GPUs:\n", choice.gpus));
    }
    if (const runtime::KernelsInfo kernels = choice.backend->kernels();
        !kernels.description.empty()) {
        info(absl::StrCat("kernels: ", kernels.description));
        if (!kernels.warning.empty()) {
            warn(kernels.warning);
        }
    }

    // --topology overrides what discovery found; without either, the CPU backend plans for
    // dgx-a100 (a switch beyond 8 devices).
    std::string topology_reason = "--topology";
    absl::StatusOr<exprog::Topology> topology = [&]() -> absl::StatusOr<exprog::Topology> {
        if (!config.topology.empty()) {
            return runtime::load_topology(config.topology);
        }
        if (choice.topology.has_value()) {
            topology_reason = choice.topology_reason;
            return *choice.topology;
        }
        topology_reason = "the CPU backend's default (no --topology)";
        return runtime::default_topology(devices);
    }();
    if (!topology.ok()) {
        return topology.status();
    }
    if (topology->num_gpus() < devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--topology: ", topology->name(), " has ", topology->num_gpus(),
            " GPUs; the backend's ", devices, " devices",
            config.devices.empty() ? "" : absl::StrCat(" (--devices=", config.devices, ")"),
            " need at least as many"));
    }
    info(absl::StrCat("topology ", topology->name(), ": ", topology_reason));

    // Device memory: --device_memory, else the memory of the topology --topology names (the
    // CPU backend's default topology describes another machine: no capacity), and on CUDA
    // never more than the driver's (docs/server.md, "Memory").
    std::string device_memory_reason = "--device_memory";
    if (device_memory == 0 && !config.topology.empty() && topology->device().memory_bytes > 0) {
        device_memory = static_cast<int64_t>(topology->device().memory_bytes);
        device_memory_reason = absl::StrCat("the memory of --topology ", topology->name());
    }
    if (choice.device_memory_bytes > 0 &&
        (device_memory == 0 || device_memory > choice.device_memory_bytes)) {
        if (device_memory > 0) {
            warn(absl::StrCat(device_memory_reason, " (", device_memory,
                              " B per device) is more than the driver reports; using the "
                              "driver's ",
                              choice.device_memory_bytes, " B"));
        }
        device_memory = choice.device_memory_bytes;
        device_memory_reason = "the driver's memory of each GPU, shared by its devices";
    }
    if (device_memory == 0) {
        device_memory_reason.clear();
        info("device memory: not known (no --device_memory); plans are not checked against it");
    } else {
        info(absl::StrCat("device memory: ", device_memory, " B per device (", device_memory_reason,
                          ")"));
    }
    return ResolvedMachine{std::move(choice), *std::move(topology), std::move(topology_reason),
                           device_memory, std::move(device_memory_reason)};
}

EngineOptions engine_options(const DaemonConfig& config, const ResolvedMachine& machine,
                             std::string version) {
    EngineOptions options;
    // Every setting as the flags gave it: DaemonConfig extends EngineSettings.
    static_cast<EngineSettings&>(options) = config;
    options.version = std::move(version);
    options.topology = machine.topology;
    options.backend_reason = machine.choice.reason;
    options.gpus = machine.choice.gpus;
    options.topology_reason = machine.topology_reason;
    options.device_memory_bytes = machine.device_memory_bytes;
    options.device_memory_reason = machine.device_memory_reason;
    return options;
}

} // namespace einsummable::server
