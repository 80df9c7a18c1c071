#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "runtime/backend_choice.h"
#include "server/config.h"
#include "server/engine.h"

namespace einsummable::server {

// A line the daemon logs at start-up.
struct LogLine {
    enum class Level { info, warn };
    Level level = Level::info;
    std::string text;

    bool operator==(const LogLine&) const = default;
};

// The machine the daemon serves on, as its flags and the hardware give it.
struct ResolvedMachine {
    // The backend (--backend, --devices), why it was chosen, its GPUs and the driver's memory
    // (runtime/backend_choice.h).
    runtime::BackendChoice choice;
    // The topology the exchange programs are synthesised for, and where it came from: --topology,
    // else the one discovered on CUDA, else the CPU backend's default (runtime::default_topology:
    // dgx-a100 up to 8 devices, a switch beyond). It has at least as many GPUs as the backend
    // has devices.
    exprog::Topology topology;
    std::string topology_reason;
    // Bytes each device may hold (docs/server.md, "Memory"): --device_memory, else the memory
    // of the topology --topology names (the CPU backend's default topology describes another
    // machine: it gives none), and on CUDA never more than the driver's. 0 = not known, and
    // then device_memory_reason is empty.
    int64_t device_memory_bytes = 0;
    std::string device_memory_reason;
};

// Makes the backend a request asks for: runtime::choose_backend, or a stand-in in tests.
using BackendChooser =
    std::function<absl::StatusOr<runtime::BackendChoice>(const runtime::BackendRequest&)>;

// Resolves the machine from `config` (--backend, --devices, --topology, --device_memory),
// choosing the backend with `choose_backend`. Appends to `log` the lines the daemon logs about
// it as they are decided (the backend and why, the GPUs, the kernels, the topology and why, the
// device memory and why), so that the lines before an error are there too. Errors name the
// flag at fault: --device_memory that does not parse, the chooser's error, a --topology that
// cannot be loaded, or a topology with fewer GPUs than the backend has devices.
absl::StatusOr<ResolvedMachine> resolve_machine(const DaemonConfig& config,
                                                const BackendChooser& choose_backend,
                                                std::vector<LogLine>* log);

// The engine's options on `machine`: every EngineSettings as `config` gives it, and the
// machine's facts (topology, device memory, and why; the backend's reason and GPUs).
EngineOptions engine_options(const DaemonConfig& config, const ResolvedMachine& machine,
                             std::string version);

} // namespace einsummable::server
