// einsummable-run: compiles a workload or graph file, fills its inputs with seeded random data,
// executes it on the backend --backend picks (CPU, or CUDA) and checks the saved outputs against
// the single-device reference. See docs/runtime.md.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/support/json.h"
#include "compiler/support/statistics.h"
#include "compiler/workloads/by_name.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/backend_choice.h"
#include "runtime/command_line.h"
#include "runtime/plan.h"
#include "tools/tool_support.h"

ABSL_FLAG(
    std::string, workload, "",
    "built-in workload (see einsummable-plan --help): ffn, llama-block:tokens=T, chain:A, ...");
ABSL_FLAG(std::string, graph, "", "graph file: GraphDef in protobuf text format or JSON");
ABSL_FLAG(std::string, bind, "", "symbolic dimensions of --graph, e.g. tokens=4096,batch=8");
ABSL_FLAG(std::string, backend, "auto",
          "auto | cpu | cuda (auto = cuda when this build has it and a GPU is visible)");
ABSL_FLAG(std::string, devices, "4",
          "devices: a count, or for cuda a list of GPU ordinals (0,0,0,0: four virtual devices "
          "on GPU 0)");
ABSL_FLAG(std::string, planner, "dp", "dp, greedy, random or a baseline (docs/planner.md)");
ABSL_FLAG(std::string, objective, "time",
          "what the dp planner minimises (docs/planner.md, \"Objectives\"): bytes, the paper's "
          "cost in bytes (cost is an alias); time, the dynamic programme over predicted time on "
          "the plan's topology (the default); search, a local search over whole-plan simulated "
          "time on it (docs/simulation.md)");
ABSL_FLAG(std::string, schedule, "optimized", "exchange programs: naive, optimized or ai");
ABSL_FLAG(std::string, topology, "",
          "machine the exchange programs are synthesised for: dgx-a100, dgx-h100, dgx-v100, the "
          "clusters dgx-a100-2nodes ... dgx-h100-4nodes or a "
          "topology file (default: dgx-a100, or a switch of --devices GPUs beyond 8)");
ABSL_FLAG(std::string, scale, "", "'small': the workload's small version (workloads::small_name)");
ABSL_FLAG(int, repeat, 3, "executions to time (the median is reported)");
ABSL_FLAG(uint64_t, seed, 20261130, "seed of the inputs, the random planner and the synthesis");
ABSL_FLAG(int, iterations, 600, "candidates the optimized synthesis tries per program");
ABSL_FLAG(bool, json, false, "print the result as one JSON object");
ABSL_FLAG(bool, explain, false, "print the plan (logical plan and exchange programs) first");
ABSL_FLAG(std::string, predict_topology, "",
          "also simulate the compiled plan (docs/simulation.md) on this machine: dgx-a100, "
          "dgx-h100, dgx-v100 or a topology file (e.g. one written by bench/cpu_calibrate)");

namespace einsummable {
namespace {

using support::median;

using support::json_string;

constexpr int kExitMismatch = 1;
constexpr int kExitUsage = 2;
constexpr int kExitBackendUnavailable = 3;

int fail(int code, absl::string_view message) {
    std::fprintf(stderr, "einsummable-run: error: %s\n", std::string(message).c_str());
    return code;
}

int run() {
    const int repeat = absl::GetFlag(FLAGS_repeat);
    if (repeat < 1) {
        return fail(kExitUsage, "--repeat must be at least 1");
    }
    // Every flag is checked before the backend is chosen, so that a mistake in one is reported as
    // such (exit 2) on a machine where the backend cannot be had (exit 3) too: scripts/gpu-check
    // relies on it to check its command lines without a GPU.
    const runtime::BackendRequest backend_request = {absl::GetFlag(FLAGS_backend),
                                                     absl::GetFlag(FLAGS_devices), 4};
    if (absl::Status status = runtime::check_backend_request(backend_request); !status.ok()) {
        return fail(kExitUsage, status.message());
    }
    std::string workload = absl::GetFlag(FLAGS_workload);
    const std::string scale = absl::GetFlag(FLAGS_scale);
    if (!scale.empty()) {
        if (scale != "small") {
            return fail(kExitUsage, absl::StrCat("--scale: unknown scale '", scale,
                                                 "' (the only one is 'small')"));
        }
        if (workload.empty()) {
            return fail(kExitUsage, "--scale small applies to --workload, not --graph");
        }
        absl::StatusOr<std::string> small = workloads::small_name(workload);
        if (!small.ok()) {
            return fail(kExitUsage, small.status().message());
        }
        workload = *small;
    }
    absl::StatusOr<ir::Graph> graph =
        tools::load_graph(workload, absl::GetFlag(FLAGS_graph), absl::GetFlag(FLAGS_bind));
    if (!graph.ok()) {
        return fail(kExitUsage, graph.status().message());
    }
    runtime::CompileOptions options;
    options.seed = absl::GetFlag(FLAGS_seed);
    options.synthesis_iterations = absl::GetFlag(FLAGS_iterations);
    absl::StatusOr<logical::Planner> planner = logical::parse_planner(absl::GetFlag(FLAGS_planner));
    if (!planner.ok()) {
        return fail(kExitUsage, planner.status().message());
    }
    options.planner = *planner;
    absl::StatusOr<logical::Objective> objective =
        logical::parse_objective(absl::GetFlag(FLAGS_objective));
    if (!objective.ok()) {
        return fail(kExitUsage, absl::StrCat("--objective: ", objective.status().message()));
    }
    options.objective = *objective;
    absl::StatusOr<exprog::SynthesisMode> schedule =
        exprog::parse_synthesis_mode(absl::GetFlag(FLAGS_schedule));
    if (!schedule.ok()) {
        return fail(kExitUsage, absl::StrCat("--schedule: ", schedule.status().message()));
    }
    options.schedule = *schedule;
    if (!absl::GetFlag(FLAGS_topology).empty()) {
        absl::StatusOr<exprog::Topology> topology =
            runtime::load_topology(absl::GetFlag(FLAGS_topology));
        if (!topology.ok()) {
            return fail(kExitUsage, topology.status().message());
        }
        options.topology = *std::move(topology);
    }
    // --predict_topology: the machine the compiled plan is also simulated on.
    std::optional<exprog::Topology> predict_topology;
    if (const std::string arg = absl::GetFlag(FLAGS_predict_topology); !arg.empty()) {
        absl::StatusOr<exprog::Topology> topology = runtime::load_topology(arg);
        if (!topology.ok()) {
            // load_topology speaks for --topology; name this flag instead.
            absl::string_view message = topology.status().message();
            absl::ConsumePrefix(&message, "--topology: ");
            return fail(kExitUsage, absl::StrCat("--predict_topology: ", message));
        }
        predict_topology = *std::move(topology);
    }

    absl::StatusOr<runtime::BackendChoice> backend = runtime::choose_backend(backend_request);
    if (!backend.ok()) {
        // FailedPrecondition: the flags are fine but this machine cannot run the backend (no GPU,
        // no driver, no plugin).
        return fail(absl::IsFailedPrecondition(backend.status()) ? kExitBackendUnavailable
                                                                 : kExitUsage,
                    backend.status().message());
    }
    const int devices = backend->backend->devices();
    if (const std::string warning = backend->backend->kernels().warning; !warning.empty()) {
        std::fprintf(stderr, "einsummable-run: warning: %s\n", warning.c_str());
    }
    options.devices = devices;
    if (!options.topology.has_value() && backend->topology.has_value()) {
        options.topology = backend->topology;
    }

    // Inputs, and the single-device reference on them (double precision, BLAS contractions).
    std::mt19937_64 rng(options.seed);
    std::map<std::string, std::vector<float>> inputs;
    std::map<std::string, ir::HostTensor> host_inputs;
    for (ir::TensorId id : graph->inputs()) {
        const ir::GraphTensor& tensor = graph->tensor(id);
        std::vector<float> values = tools::random_values(tensor.type, rng);
        host_inputs.emplace(
            tensor.name,
            ir::HostTensor(tensor.type.box(), std::vector<double>(values.begin(), values.end())));
        inputs.emplace(tensor.name, std::move(values));
    }
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(*graph, host_inputs, kernels::cpu::run_block);
    if (!reference.ok()) {
        return fail(kExitUsage, absl::StrCat("reference: ", reference.status().message()));
    }

    const auto compile_start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        runtime::Plan::compile(*std::move(graph), options, backend->backend);
    if (!plan.ok()) {
        return fail(kExitUsage, absl::StrCat("compile: ", plan.status().message()));
    }
    const double compile_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - compile_start).count();
    runtime::Plan& compiled = **plan;
    // What made the plan: the objective for dp, the planner's own rule for the others.
    const logical::Objective made_by =
        logical::planned_objective(options.planner, options.objective);
    // Simulated before anything runs, so a plan the topology cannot hold fails fast.
    std::optional<double> predicted_s;
    if (predict_topology.has_value()) {
        absl::StatusOr<physical::PlanSimulation> simulation =
            physical::simulate_plan(compiled.exec_graph(), *predict_topology);
        if (!simulation.ok()) {
            return fail(kExitUsage,
                        absl::StrCat("--predict_topology: ", simulation.status().message()));
        }
        predicted_s = simulation->predicted_s;
    }
    for (const auto& [name, values] : inputs) {
        if (absl::Status status = compiled.load(name, values); !status.ok()) {
            return fail(kExitUsage, status.message());
        }
    }
    std::vector<double> times;
    for (int r = 0; r < repeat; ++r) {
        const auto start = std::chrono::steady_clock::now();
        if (absl::Status status = compiled.execute(); !status.ok()) {
            return fail(kExitMismatch, absl::StrCat("execute: ", status.message()));
        }
        times.push_back(
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }

    bool within = true;
    std::vector<std::string> error_lines, error_json;
    for (const auto& [name, expected] : *reference) {
        absl::StatusOr<std::vector<float>> actual = compiled.offload(name);
        if (!actual.ok()) {
            return fail(kExitMismatch, actual.status().message());
        }
        const ir::HostTensor got(expected.box(),
                                 std::vector<double>(actual->begin(), actual->end()));
        const double error = ir::max_relative_error(got, expected);
        const ir::DType dtype =
            compiled.graph().tensor(*compiled.graph().find_tensor(name)).type.dtype;
        const double tolerance = runtime::output_tolerance(dtype);
        within = within && error <= tolerance;
        error_lines.push_back(absl::StrFormat("  %s: %.3g (%s, tolerance %.0e)%s", name, error,
                                              ir::dtype_name(dtype), tolerance,
                                              error <= tolerance ? "" : "  EXCEEDED"));
        error_json.push_back(absl::StrCat(
            "{\"tensor\": ", json_string(name), ", \"dtype\": ", json_string(ir::dtype_name(dtype)),
            ", \"max_relative_error\": ", absl::StrFormat("%.6g", error),
            ", \"tolerance\": ", absl::StrFormat("%.6g", tolerance), "}"));
    }
    // Bytes per execute, by device pair.
    const std::vector<std::vector<int64_t>> moved = compiled.bytes_moved();
    std::vector<std::string> pair_lines, pair_json;
    int64_t total = 0;
    for (int src = 0; src < devices; ++src) {
        for (int dst = 0; dst < devices; ++dst) {
            const int64_t bytes = moved[src][dst] / repeat;
            if (bytes != 0) {
                total += bytes;
                pair_lines.push_back(absl::StrCat("  ", src, " -> ", dst, ": ", bytes));
                pair_json.push_back(absl::StrCat("{\"src\": ", src, ", \"dst\": ", dst,
                                                 ", \"bytes\": ", bytes, "}"));
            }
        }
    }
    const double median_s = median(times);
    if (absl::GetFlag(FLAGS_json)) {
        std::printf(
            "%s\n",
            absl::StrCat(
                "{\"workload\": ",
                json_string(workload.empty() ? absl::GetFlag(FLAGS_graph) : workload),
                ", \"backend\": ", json_string(backend->backend->name()), ", \"kernels\": ",
                json_string(backend->backend->kernels().description), ", \"devices\": ", devices,
                ", \"planner\": ", json_string(logical::planner_name(options.planner)),
                ", \"objective\": ", json_string(logical::objective_name(made_by)),
                ", \"schedule\": ", json_string(exprog::synthesis_mode_name(options.schedule)),
                ", \"strategy\": ", json_string(compiled.logical_plan().strategy),
                ", \"compile_s\": ", absl::StrFormat("%.6f", compile_s),
                ", \"execute_median_s\": ", absl::StrFormat("%.6f", median_s),
                ", \"repeat\": ", repeat, ", \"outputs\": [", absl::StrJoin(error_json, ", "),
                "], \"within_tolerance\": ", within ? "true" : "false",
                ", \"bytes_moved_per_execute\": ", total, ", \"bytes_by_pair\": [",
                absl::StrJoin(pair_json, ", "), "], \"peak_bytes\": [",
                absl::StrJoin(compiled.peak_bytes(), ", "), "], \"simulated_exchange_s\": ",
                absl::StrFormat("%.9f", compiled.physical_plan().simulated_s()),
                predicted_s.has_value()
                    ? absl::StrCat(
                          ", \"predicted_s\": ", absl::StrFormat("%.9f", *predicted_s),
                          ", \"predicted_topology\": ", json_string(predict_topology->name()))
                    : "",
                "}")
                .c_str());
    } else {
        if (absl::GetFlag(FLAGS_explain)) {
            std::printf("backend: %s\n", backend->reason.c_str());
            if (const std::string kernels = backend->backend->kernels().description;
                !kernels.empty()) {
                std::printf("kernels: %s\n", kernels.c_str());
            }
            if (!backend->topology_reason.empty()) {
                std::printf("topology: %s\n", backend->topology_reason.c_str());
            }
            std::printf("%s\n", compiled.explain().c_str());
        }
        std::printf("%s", absl::StrCat("workload ",
                                       workload.empty() ? absl::GetFlag(FLAGS_graph) : workload,
                                       " on ", devices, " ", backend->backend->name(),
                                       " devices; planner ", logical::planner_name(options.planner),
                                       ", objective ", logical::objective_name(made_by),
                                       ", schedule ", exprog::synthesis_mode_name(options.schedule),
                                       "; strategy: ", compiled.logical_plan().strategy, "\n")
                              .c_str());
        std::printf("compile: %.1f ms\n", compile_s * 1e3);
        std::printf("execute: %.3f ms (median of %d)\n", median_s * 1e3, repeat);
        if (predicted_s.has_value()) {
            std::printf("predicted: %.3f ms (simulated on %s)\n", *predicted_s * 1e3,
                        predict_topology->name().c_str());
        }
        std::printf("max relative error against the single-device reference:\n%s\n",
                    absl::StrJoin(error_lines, "\n").c_str());
        std::printf("bytes moved per execute: %lld%s%s\n", static_cast<long long>(total),
                    pair_lines.empty() ? "" : "\n", absl::StrJoin(pair_lines, "\n").c_str());
        std::printf("peak memory per device (bytes): %s\n",
                    absl::StrJoin(compiled.peak_bytes(), ", ").c_str());
    }
    return within ? 0 : kExitMismatch;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "compiles and runs a graph on the CPU or CUDA backend, checked against the single-device "
        "reference: einsummable-run (--workload NAME | --graph FILE [--bind ...]) "
        "[--backend auto|cpu|cuda] [--devices P|GPU,GPU,...] "
        "[--planner NAME] [--objective bytes|time|search] [--schedule naive|optimized|ai] "
        "[--topology "
        "NAME|PATH] "
        "[--predict_topology NAME|PATH] [--scale small] [--repeat N] [--seed N] [--json] "
        "[--explain]. Exit status: 0 outputs "
        "within tolerance; 1 outside it or execution failed; 2 usage or compile error; 3 the "
        "backend cannot run on this machine (e.g. --backend=cuda without a GPU).");
    if (std::optional<std::string> error = einsummable::runtime::check_flags(argc, argv)) {
        return einsummable::fail(einsummable::kExitUsage, *error);
    }
    std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
    if (positional.size() > 1) {
        return einsummable::fail(einsummable::kExitUsage,
                                 absl::StrCat("unexpected argument '", positional[1], "'"));
    }
    return einsummable::run();
}
