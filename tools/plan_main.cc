// einsummable-plan: prints the logical plan (one join-agg spec per operator) for a built-in
// workload or a graph file and, with --simulate, the whole-plan simulation of it on a topology.
// See docs/planner.md and docs/simulation.md.

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/json.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/workloads.h"
#include "runtime/command_line.h"
#include "tools/timeline_svg.h"
#include "tools/tool_support.h"

ABSL_FLAG(std::string, workload, "",
          "built-in workload: ffn, matmul:N, matmul:MxKxN, llama-block:tokens=T, "
          "llama-block:seqs=NxL, llama-stack:blocks=B,tokens=T, chain:A..E");
ABSL_FLAG(std::string, graph, "", "graph file: GraphDef in protobuf text format or JSON");
ABSL_FLAG(std::string, bind, "", "symbolic dimensions of --graph, e.g. tokens=4096,batch=8");
ABSL_FLAG(int64_t, devices, 8, "number of devices");
ABSL_FLAG(std::string, planner, "dp", "dp, greedy, random or a baseline (docs/planner.md)");
ABSL_FLAG(uint64_t, seed, 0, "seed of the random planner");
ABSL_FLAG(std::string, format, "text", "text or json");
ABSL_FLAG(bool, simulate, false,
          "also compile the plan's exchange programs for --topology, lower it, and print the "
          "whole-plan simulation (docs/simulation.md)");
ABSL_FLAG(std::string, topology, "",
          "with --simulate or the time and search objectives: dgx-a100, dgx-h100, dgx-v100, the "
          "clusters dgx-a100-2nodes ... dgx-h100-4nodes or a "
          "topology file (default: dgx-a100; for --objective time without --simulate, the "
          "daemon's default for --devices: dgx-a100, or a switch of --devices GPUs beyond 8)");
ABSL_FLAG(std::string, schedule, "optimized",
          "with --simulate: exchange programs naive, optimized or ai");
ABSL_FLAG(int, iterations, 600, "with --simulate: candidates the optimized synthesis tries");
ABSL_FLAG(std::string, timeline, "", "with --simulate: write the plan's timeline (SVG) here");
ABSL_FLAG(std::string, objective, "time",
          "what the dp planner minimises (docs/planner.md, \"Objectives\"): bytes, the paper's "
          "cost in bytes (cost is an alias); time, the dynamic programme over predicted time on "
          "--topology (the default; without --topology, the daemon's default topology for "
          "--devices); search, a local search over whole-plan simulated time on --topology "
          "(docs/simulation.md, \"A compute-aware choice\")");

namespace einsummable {
namespace {

absl::StatusOr<ir::Graph> load_graph() {
    return tools::load_graph(absl::GetFlag(FLAGS_workload), absl::GetFlag(FLAGS_graph),
                             absl::GetFlag(FLAGS_bind));
}

int fail(absl::string_view message) {
    std::fprintf(stderr, "einsummable-plan: error: %s\n", std::string(message).c_str());
    return 2;
}

// The simulation as a JSON object.
std::string simulation_json(const exprog::Topology& topology, exprog::SynthesisMode mode,
                            const pipeline::CompiledPlan& plan,
                            const physical::PlanSimulation& sim) {
    using support::json_string;
    std::vector<std::string> devices, path;
    for (size_t d = 0; d < sim.devices.size(); ++d) {
        const physical::DeviceTime& t = sim.devices[d];
        devices.push_back(absl::StrFormat(
            "{\"device\": %d, \"gpu\": %d, \"compute_s\": %.9g, \"communication_s\": %.9g, "
            "\"idle_s\": %.9g}",
            d, sim.gpus[d], t.compute_s, t.communication_s, t.idle_s));
    }
    for (const physical::CriticalStep& step : sim.critical_path) {
        path.push_back(
            absl::StrFormat("{\"node\": %d, \"label\": %s, \"start_s\": %.9g, \"end_s\": %.9g, "
                            "\"waited_for_device\": %s}",
                            step.node, json_string(sim.tasks[step.node].label), step.start,
                            step.end, step.waited_for_device ? "true" : "false"));
    }
    return absl::StrCat(
        "{\"topology\": ", json_string(topology.name()),
        ", \"schedule\": ", json_string(exprog::synthesis_mode_name(mode)),
        ", \"predicted_s\": ", absl::StrFormat("%.9g", sim.predicted_s),
        ", \"exchange_sum_s\": ", absl::StrFormat("%.9g", plan.physical.simulated_s()),
        ", \"nodes\": ", plan.exec.nodes.size(), ", \"devices\": [", absl::StrJoin(devices, ", "),
        "], \"critical_path\": [", absl::StrJoin(path, ", "), "]}");
}

// What the flags ask for.
struct Request {
    pipeline::Options options;
    // Its topology: --topology with --simulate, the search objective or --topology given;
    // otherwise unset (pipeline::default_topology of the devices, as the daemon's).
    pipeline::Machine machine;
    std::string format;
    bool simulate = false;
};

// The flags checked, in the order their errors are reported.
absl::StatusOr<Request> read_flags() {
    Request request;
    EINSUMMABLE_ASSIGN_OR_RETURN(request.options.planner,
                                 logical::parse_planner(absl::GetFlag(FLAGS_planner)));
    request.format = absl::GetFlag(FLAGS_format);
    request.simulate = absl::GetFlag(FLAGS_simulate);
    if (request.format != "text" && request.format != "json") {
        return absl::InvalidArgumentError(absl::StrCat("--format: unknown format '", request.format,
                                                       "' (expected text or json)"));
    }
    const int64_t devices = absl::GetFlag(FLAGS_devices);
    if (devices < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("--devices must be at least 1, got ", devices));
    }
    if (!request.simulate && !absl::GetFlag(FLAGS_timeline).empty()) {
        return absl::InvalidArgumentError("--timeline applies only with --simulate");
    }
    absl::StatusOr<exprog::SynthesisMode> mode =
        exprog::parse_synthesis_mode(absl::GetFlag(FLAGS_schedule));
    if (!mode.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("--schedule: ", mode.status().message()));
    }
    absl::StatusOr<logical::Objective> objective =
        logical::parse_objective(absl::GetFlag(FLAGS_objective));
    if (!objective.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--objective: ", objective.status().message()));
    }
    const logical::Objective planned =
        logical::planned_objective(request.options.planner, *objective);
    const std::string topology = absl::GetFlag(FLAGS_topology);
    if (request.simulate || planned == logical::Objective::search ||
        (planned == logical::Objective::time && !topology.empty())) {
        absl::StatusOr<exprog::Topology> loaded =
            runtime::load_topology(topology.empty() ? "dgx-a100" : topology);
        if (!loaded.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("--topology: ", loaded.status().message()));
        }
        if (loaded->num_gpus() < devices) {
            return absl::InvalidArgumentError(
                absl::StrCat("--devices ", devices, " is more than topology '", loaded->name(),
                             "' has GPUs (", loaded->num_gpus(), ")"));
        }
        request.machine.topology = *std::move(loaded);
    }
    request.options.devices = static_cast<int>(devices);
    request.options.seed = absl::GetFlag(FLAGS_seed);
    request.options.schedule = *mode;
    request.options.synthesis_iterations = absl::GetFlag(FLAGS_iterations);
    request.options.objective = *objective;
    // No backend: the machine has the devices the plan uses (a topology as many, checked above).
    request.machine.devices = request.options.devices;
    return request;
}

// The plan's timeline as an SVG file at --timeline (none: nothing).
absl::Status write_timeline(const Request& request, const pipeline::CompiledPlan& compiled,
                            const physical::PlanSimulation& simulation) {
    const std::string path = absl::GetFlag(FLAGS_timeline);
    if (path.empty()) {
        return absl::OkStatus();
    }
    const std::string title = absl::StrCat(
        absl::GetFlag(FLAGS_workload).empty() ? absl::GetFlag(FLAGS_graph)
                                              : absl::GetFlag(FLAGS_workload),
        ", ", logical::planner_name(request.options.planner), " plan, ", compiled.exec.devices,
        " devices of ", request.machine.topology->name(), " (",
        exprog::synthesis_mode_name(request.options.schedule), " exchanges): simulated ",
        absl::StrFormat("%.3f ms", simulation.predicted_s * 1e3));
    std::ofstream out(path);
    out << tools::plan_timeline_svg(compiled.exec, simulation, title);
    if (!out.good()) {
        return absl::InvalidArgumentError(absl::StrCat("--timeline: cannot write '", path, "'"));
    }
    return absl::OkStatus();
}

// What the tool prints: the logical plan (and the objective that made it), how the search
// objective found it, the simulation.
struct Outcome {
    logical::LogicalPlan plan;
    std::optional<logical::TimeSearchReport> search;
    double search_s = 0.0;                              // the logical pass's wall time
    std::optional<pipeline::CompiledPlan> compiled;     // with --simulate
    std::optional<physical::PlanSimulation> simulation; // with --simulate
};

void print(const Request& request, const ir::Graph& graph, const Outcome& outcome) {
    const exprog::Topology* topology =
        request.machine.topology ? &*request.machine.topology : nullptr;
    const logical::TimeSearchReport* search = outcome.search ? &*outcome.search : nullptr;
    if (request.format == "json") {
        const std::string logical = logical::explain_json(graph, outcome.plan);
        std::string text = logical;
        if (outcome.simulation || search) {
            // {"plan": <the logical plan>, "simulation": {...}, "objective": {...}}
            text = absl::StrCat("{\"plan\": ", absl::StripTrailingAsciiWhitespace(logical));
            if (outcome.simulation) {
                absl::StrAppend(&text, ", \"simulation\": ",
                                simulation_json(*topology, request.options.schedule,
                                                *outcome.compiled, *outcome.simulation));
            }
            if (search) {
                absl::StrAppend(
                    &text, ", \"objective\": {\"name\": \"search\", \"origin\": ",
                    support::json_string(search->origin),
                    absl::StrFormat(", \"predicted_s\": %.9g, \"bytes_plan_predicted_s\": %.9g, "
                                    "\"plans_simulated\": %d, \"search_s\": %.6f}",
                                    search->predicted_s, search->bytes_plan_predicted_s,
                                    search->plans_simulated, outcome.search_s));
            }
            absl::StrAppend(&text, "}\n");
        }
        std::fputs(text.c_str(), stdout);
        return;
    }
    std::fputs(logical::explain_text(graph, outcome.plan).c_str(), stdout);
    if (search) {
        std::printf("\nobjective search on %s: the fastest plan found comes from %s, simulated "
                    "%.3f ms; the bytes objective's plan %.3f ms (%.3fx); %d plans simulated in "
                    "%.1f s\n",
                    topology->name().c_str(), search->origin.c_str(), search->predicted_s * 1e3,
                    search->bytes_plan_predicted_s * 1e3,
                    search->bytes_plan_predicted_s / search->predicted_s, search->plans_simulated,
                    outcome.search_s);
    }
    if (outcome.simulation) {
        std::printf(
            "\nwhole-plan simulation on %s, %s exchange programs (%zu nodes):\n%s",
            topology->name().c_str(),
            std::string(exprog::synthesis_mode_name(request.options.schedule)).c_str(),
            outcome.compiled->exec.nodes.size(),
            physical::explain_simulation(outcome.compiled->exec, *outcome.simulation).c_str());
    }
}

int run() {
    absl::StatusOr<Request> request = read_flags();
    absl::StatusOr<ir::Graph> graph = request.ok() ? load_graph() : request.status();
    if (!graph.ok()) {
        return fail(graph.status().message());
    }
    Outcome outcome;
    if (!request->simulate) {
        // The logical plan alone (pass 1 of the pipeline).
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<pipeline::ObjectivePlan> planned =
            pipeline::plan_logical(*graph, request->options, request->machine);
        outcome.search_s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (!planned.ok()) {
            return fail(planned.status().message());
        }
        outcome.plan = std::move(planned->plan);
        outcome.search = std::move(planned->search);
        print(*request, *graph, outcome);
        return 0;
    }
    // The whole pipeline, then the simulator on the plan it lowered.
    absl::StatusOr<pipeline::CompiledPlan> compiled =
        pipeline::compile(*graph, request->options, request->machine);
    if (!compiled.ok()) {
        return fail(compiled.status().message());
    }
    absl::StatusOr<physical::PlanSimulation> simulation =
        physical::simulate_plan(compiled->exec, *request->machine.topology);
    if (!simulation.ok()) {
        return fail(absl::StrCat("simulate: ", simulation.status().message()));
    }
    if (absl::Status written = write_timeline(*request, *compiled, *simulation); !written.ok()) {
        return fail(written.message());
    }
    outcome.plan = compiled->logical;
    outcome.search = compiled->search;
    outcome.search_s = compiled->seconds.logical;
    outcome.compiled = *std::move(compiled);
    outcome.simulation = *std::move(simulation);
    print(*request, *graph, outcome);
    return 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "prints the logical plan of a graph: einsummable-plan (--workload NAME | --graph FILE) "
        "[--devices P] [--planner NAME] [--seed N] [--format text|json] "
        "[--objective bytes|time|search] "
        "[--simulate [--topology NAME|FILE] [--schedule naive|optimized] [--timeline FILE.svg]]");
    std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
    if (positional.size() > 1) {
        std::fprintf(stderr, "einsummable-plan: error: unexpected argument '%s'\n", positional[1]);
        return 2;
    }
    return einsummable::run();
}
