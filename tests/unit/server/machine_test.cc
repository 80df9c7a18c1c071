// server/machine.h: how the daemon resolves its machine from --backend, --devices, --topology
// and --device_memory, what it logs about it, and the engine's options built from it. The CUDA
// branches (a discovered topology, the driver's memory) run with a stand-in for the backend
// choice, on any machine.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "compiler/exprog/topology.h"
#include "runtime/backend_choice.h"
#include "server/machine.h"

namespace einsummable::server {

// How gtest prints a line of the log (found by argument-dependent lookup, so not in the
// unnamed namespace).
void PrintTo(const LogLine& line, std::ostream* out) {
    *out << (line.level == LogLine::Level::warn ? "warn: " : "info: ") << line.text;
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

LogLine info(std::string text) {
    return {LogLine::Level::info, std::move(text)};
}
LogLine warn(std::string text) {
    return {LogLine::Level::warn, std::move(text)};
}

// A backend that only says what it is: resolve_machine runs nothing on it.
class FakeBackend : public runtime::Backend {
public:
    FakeBackend(int devices, runtime::KernelsInfo kernels)
        : devices_(devices), kernels_(std::move(kernels)) {}
    std::string name() const override { return "fake"; }
    int devices() const override { return devices_; }
    runtime::KernelsInfo kernels() const override { return kernels_; }
    absl::StatusOr<std::unique_ptr<runtime::Executable>>
    prepare(const physical::ExecGraph&, std::shared_ptr<runtime::ResidentMemory>) override {
        return absl::UnimplementedError("fake backend");
    }
    absl::StatusOr<std::shared_ptr<runtime::ResidentMemory>>
    allocate_resident(const std::vector<int64_t>&) override {
        return absl::UnimplementedError("fake backend");
    }

private:
    int devices_;
    runtime::KernelsInfo kernels_;
};

constexpr int64_t kDriverMemory = int64_t{40} << 30;

exprog::Topology discovered_topology() {
    absl::StatusOr<exprog::Topology> topology =
        exprog::Topology::make_switch("discovered-4", 4, 300e9, 2e12, 1e-6);
    EXPECT_TRUE(topology.ok()) << topology.status();
    return *topology;
}

// What runtime::choose_backend gives on a machine with a GPU: 4 devices, the GPUs, the
// discovered topology, the driver's memory per device.
BackendChooser cuda_like(int devices = 4) {
    return [devices](const runtime::BackendRequest&) -> absl::StatusOr<runtime::BackendChoice> {
        runtime::BackendChoice choice;
        choice.backend = std::make_shared<FakeBackend>(
            devices, runtime::KernelsInfo{"fake kernels", "fake kernels are slow"});
        choice.reason = "auto: 1 GPU visible -> cuda on GPUs [0,0,0,0]";
        choice.gpus = "GPU 0: Fake GPU, 40 GiB";
        choice.topology = discovered_topology();
        choice.topology_reason = "discovered: 1 GPU, 4 devices";
        choice.device_memory_bytes = kDriverMemory;
        return choice;
    };
}

// The CPU backend as the daemon chooses it, with `devices` virtual devices.
DaemonConfig cpu_config(const std::string& devices) {
    DaemonConfig config;
    config.backend = "cpu";
    config.devices = devices;
    return config;
}

class TempFile {
public:
    explicit TempFile(const std::string& contents)
        : path_(std::filesystem::temp_directory_path() /
                ("machine_test_" + std::to_string(getpid()) + ".topo")) {
        std::ofstream(path_) << contents;
    }
    ~TempFile() { std::filesystem::remove(path_); }
    std::string path() const { return path_.string(); }

private:
    std::filesystem::path path_;
};

TEST(ResolveMachineTest, CpuWithoutTopologyPlansForDgxA100WithoutAMemory) {
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(cpu_config("4"), runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->choice.backend->name(), "cpu");
    EXPECT_EQ(machine->choice.backend->devices(), 4);
    EXPECT_EQ(machine->topology.name(), "dgx-a100");
    EXPECT_EQ(machine->topology_reason, "the CPU backend's default (no --topology)");
    // dgx-a100 has a memory (40 GB), but the default topology describes another machine.
    EXPECT_GT(machine->topology.device().memory_bytes, 0);
    EXPECT_EQ(machine->device_memory_bytes, 0);
    EXPECT_EQ(machine->device_memory_reason, "");
    ASSERT_GE(log.size(), 3u);
    EXPECT_EQ(log.front(), info("backend: " + machine->choice.reason));
    EXPECT_EQ(log[log.size() - 2],
              info("topology dgx-a100: the CPU backend's default (no --topology)"));
    EXPECT_EQ(log.back(), info("device memory: not known (no --device_memory); plans are not "
                               "checked against it"));
}

TEST(ResolveMachineTest, CpuBeyondEightDevicesPlansForASwitch) {
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(cpu_config("16"), runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "switch-16");
    EXPECT_EQ(machine->topology.num_gpus(), 16);
    EXPECT_EQ(machine->topology_reason, "the CPU backend's default (no --topology)");
}

TEST(ResolveMachineTest, CpuWithABuiltInTopologyTakesItsMemory) {
    DaemonConfig config = cpu_config("8");
    config.topology = "dgx-h100";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "dgx-h100");
    EXPECT_EQ(machine->topology_reason, "--topology");
    EXPECT_EQ(machine->device_memory_bytes, 80'000'000'000);
    EXPECT_EQ(machine->device_memory_reason, "the memory of --topology dgx-h100");
    ASSERT_GE(log.size(), 2u);
    EXPECT_EQ(log[log.size() - 2], info("topology dgx-h100: --topology"));
    EXPECT_EQ(log.back(), info("device memory: 80000000000 B per device (the memory of "
                               "--topology dgx-h100)"));
}

TEST(ResolveMachineTest, DeviceMemoryFlagWinsOverTheTopologysMemory) {
    DaemonConfig config = cpu_config("8");
    config.topology = "dgx-h100";
    config.device_memory = "512MiB";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->device_memory_bytes, 512 << 20);
    EXPECT_EQ(machine->device_memory_reason, "--device_memory");
    EXPECT_EQ(log.back(), info("device memory: 536870912 B per device (--device_memory)"));
}

TEST(ResolveMachineTest, DeviceMemoryFlagOnTheDefaultTopology) {
    DaemonConfig config = cpu_config("2");
    config.device_memory = "1048576";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "dgx-a100");
    EXPECT_EQ(machine->device_memory_bytes, 1 << 20);
    EXPECT_EQ(machine->device_memory_reason, "--device_memory");
}

TEST(ResolveMachineTest, TopologyFile) {
    absl::StatusOr<exprog::Topology> v100 = exprog::builtin_topology("dgx-v100");
    ASSERT_TRUE(v100.ok()) << v100.status();
    TempFile file(v100->to_text());
    DaemonConfig config = cpu_config("8");
    config.topology = file.path();
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "dgx-v100");
    EXPECT_EQ(machine->topology_reason, "--topology");
    EXPECT_EQ(machine->device_memory_bytes, 32'000'000'000);
    EXPECT_EQ(machine->device_memory_reason, "the memory of --topology dgx-v100");
}

TEST(ResolveMachineTest, TopologyFileWithoutAMemoryLeavesItUnknown) {
    absl::StatusOr<exprog::Topology> plain =
        exprog::Topology::make_switch("plain-8", 8, 300e9, 2e12, 1e-6);
    ASSERT_TRUE(plain.ok()) << plain.status();
    TempFile file(plain->to_text());
    DaemonConfig config = cpu_config("8");
    config.topology = file.path();
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "plain-8");
    EXPECT_EQ(machine->device_memory_bytes, 0);
    EXPECT_EQ(machine->device_memory_reason, "");
}

TEST(ResolveMachineTest, TopologyThatCannotBeLoadedNamesTheFlag) {
    DaemonConfig config = cpu_config("8");
    config.topology = "/nonexistent/machine.topo";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    EXPECT_EQ(machine.status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(machine.status().message(), "--topology: cannot read '/nonexistent/machine.topo'");

    config.topology = "dgx-z100";
    machine = resolve_machine(config, runtime::choose_backend, &log);
    EXPECT_EQ(machine.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(machine.status().message()), StartsWith("--topology: "));
    EXPECT_THAT(std::string(machine.status().message()),
                HasSubstr("; or give the path of a topology file"));
}

TEST(ResolveMachineTest, TopologyWithFewerGpusThanDevicesIsRefused) {
    DaemonConfig config = cpu_config("16");
    config.topology = "dgx-a100";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine =
        resolve_machine(config, runtime::choose_backend, &log);
    EXPECT_EQ(machine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(machine.status().message(), "--topology: dgx-a100 has 8 GPUs; the backend's 16 "
                                          "devices (--devices=16) need at least as many");
    // What was decided before the error is logged with it; the topology is not.
    ASSERT_FALSE(log.empty());
    EXPECT_THAT(log.front().text, StartsWith("backend: "));
    EXPECT_THAT(log.back().text, ::testing::Not(StartsWith("topology ")));
}

TEST(ResolveMachineTest, TopologyWithFewerGpusThanDevicesWithoutDevicesFlag) {
    // Every visible GPU (no --devices): the message names no flag value.
    DaemonConfig config;
    config.topology = "dgx-a100";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, cuda_like(16), &log);
    EXPECT_EQ(machine.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(machine.status().message(),
              "--topology: dgx-a100 has 8 GPUs; the backend's 16 devices need at least as many");
}

TEST(ResolveMachineTest, DeviceMemoryThatDoesNotParseNamesTheFlag) {
    for (const char* text : {"lots", "80 XB", "-1GB", "10000000TB"}) {
        DaemonConfig config = cpu_config("2");
        config.device_memory = text;
        bool chose = false;
        const BackendChooser chooser = [&chose](const runtime::BackendRequest& request) {
            chose = true;
            return runtime::choose_backend(request);
        };
        std::vector<LogLine> log;
        absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, chooser, &log);
        EXPECT_EQ(machine.status().code(), absl::StatusCode::kInvalidArgument) << text;
        EXPECT_THAT(std::string(machine.status().message()),
                    StartsWith(std::string("--device_memory=") + text + ": expected bytes"));
        EXPECT_FALSE(chose) << "no backend is made for a bad --device_memory";
        EXPECT_TRUE(log.empty());
    }
}

TEST(ResolveMachineTest, TheChoosersErrorIsReturnedAsItIs) {
    DaemonConfig config;
    config.backend = "cuda";
    config.devices = "0,1";
    runtime::BackendRequest asked;
    const BackendChooser chooser =
        [&asked](const runtime::BackendRequest& request) -> absl::StatusOr<runtime::BackendChoice> {
        asked = request;
        return absl::FailedPreconditionError("--backend=cuda: no GPU is visible");
    };
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, chooser, &log);
    EXPECT_EQ(machine.status(), absl::FailedPreconditionError("--backend=cuda: no GPU is visible"));
    EXPECT_EQ(asked.backend, "cuda");
    EXPECT_EQ(asked.devices, "0,1");
    EXPECT_TRUE(log.empty());
}

TEST(ResolveMachineTest, CudaTakesTheDiscoveredTopologyAndTheDriversMemory) {
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(DaemonConfig{}, cuda_like(), &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "discovered-4");
    EXPECT_EQ(machine->topology_reason, "discovered: 1 GPU, 4 devices");
    EXPECT_EQ(machine->device_memory_bytes, kDriverMemory);
    EXPECT_EQ(machine->device_memory_reason,
              "the driver's memory of each GPU, shared by its devices");
    EXPECT_THAT(log, ElementsAre(info("backend: auto: 1 GPU visible -> cuda on GPUs [0,0,0,0]"),
                                 info("GPUs:\nGPU 0: Fake GPU, 40 GiB"),
                                 info("kernels: fake kernels"), warn("fake kernels are slow"),
                                 info("topology discovered-4: discovered: 1 GPU, 4 devices"),
                                 info("device memory: 42949672960 B per device (the driver's "
                                      "memory of each GPU, shared by its devices)")));
}

TEST(ResolveMachineTest, DeviceMemoryFlagAboveTheDriversIsLowered) {
    DaemonConfig config;
    config.device_memory = "80GB";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, cuda_like(), &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->device_memory_bytes, kDriverMemory);
    EXPECT_EQ(machine->device_memory_reason,
              "the driver's memory of each GPU, shared by its devices");
    ASSERT_GE(log.size(), 2u);
    EXPECT_EQ(log[log.size() - 2],
              warn("--device_memory (80000000000 B per device) is more than the driver reports; "
                   "using the driver's 42949672960 B"));
}

TEST(ResolveMachineTest, DeviceMemoryFlagBelowTheDriversIsKept) {
    DaemonConfig config;
    config.device_memory = "1GB";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, cuda_like(), &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->device_memory_bytes, 1'000'000'000);
    EXPECT_EQ(machine->device_memory_reason, "--device_memory");
    for (const LogLine& line : log) {
        EXPECT_THAT(line.text, ::testing::Not(HasSubstr("more than the driver reports")));
    }
    EXPECT_EQ(log.back(), info("device memory: 1000000000 B per device (--device_memory)"));
}

TEST(ResolveMachineTest, TopologyFlagOverridesDiscoveryAndItsMemoryIsCappedByTheDriver) {
    DaemonConfig config;
    config.topology = "dgx-h100";
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, cuda_like(), &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    EXPECT_EQ(machine->topology.name(), "dgx-h100");
    EXPECT_EQ(machine->topology_reason, "--topology");
    EXPECT_EQ(machine->device_memory_bytes, kDriverMemory);
    EXPECT_THAT(log, ::testing::Contains(warn(
                         "the memory of --topology dgx-h100 (80000000000 B per device) is more "
                         "than the driver reports; using the driver's 42949672960 B")));
}

TEST(EngineOptionsTest, CarryEverySettingAndTheMachine) {
    DaemonConfig config;
    config.max_tensor_bytes = 12345;
    config.max_message_bytes = 4096;
    config.plan_cache_entries = 3;
    config.share_weights = false;
    config.instances_per_plan = 3;
    config.max_queue_delay_us = 250;
    config.execute_delay_ms = 7;
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(config, cuda_like(), &log);
    ASSERT_TRUE(machine.ok()) << machine.status();
    const EngineOptions options = engine_options(config, *machine, "1.2.3");
    EXPECT_EQ(options.max_tensor_bytes, 12345);
    EXPECT_EQ(options.max_message_bytes, 4096);
    EXPECT_EQ(options.plan_cache_entries, 3);
    EXPECT_FALSE(options.share_weights);
    EXPECT_EQ(options.instances_per_plan, 3);
    EXPECT_EQ(options.max_queue_delay_us, 250);
    EXPECT_EQ(options.execute_delay_ms, 7);
    EXPECT_EQ(options.version, "1.2.3");
    ASSERT_TRUE(options.topology.has_value());
    EXPECT_EQ(options.topology->name(), "discovered-4");
    EXPECT_EQ(options.topology_reason, "discovered: 1 GPU, 4 devices");
    EXPECT_EQ(options.backend_reason, "auto: 1 GPU visible -> cuda on GPUs [0,0,0,0]");
    EXPECT_EQ(options.gpus, "GPU 0: Fake GPU, 40 GiB");
    EXPECT_EQ(options.device_memory_bytes, kDriverMemory);
    EXPECT_EQ(options.device_memory_reason,
              "the driver's memory of each GPU, shared by its devices");
}

} // namespace
} // namespace einsummable::server
