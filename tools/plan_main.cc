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
#include "compiler/physical/plan_simulation.h"
#include "compiler/physical/time_objective.h"
#include "compiler/support/json.h"
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
ABSL_FLAG(std::string, topology, "dgx-a100",
          "with --simulate: dgx-a100, dgx-h100, dgx-v100 or a topology file");
ABSL_FLAG(std::string, schedule, "optimized",
          "with --simulate: exchange programs naive, optimized or ai");
ABSL_FLAG(int, iterations, 600, "with --simulate: candidates the optimized synthesis tries");
ABSL_FLAG(std::string, timeline, "", "with --simulate: write the plan's timeline (SVG) here");
ABSL_FLAG(std::string, objective, "cost",
          "cost: the paper's cost in bytes; time: the fastest plan by whole-plan simulated time "
          "on --topology (docs/simulation.md, \"A compute-aware choice\")");

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
                            const physical::SimulatedPlan& plan) {
    using support::json_string;
    const physical::PlanSimulation& sim = plan.simulation;
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

int run() {
    double search_s = 0.0;
    absl::StatusOr<logical::Planner> planner = logical::parse_planner(absl::GetFlag(FLAGS_planner));
    const std::string format = absl::GetFlag(FLAGS_format);
    const bool simulate = absl::GetFlag(FLAGS_simulate);
    absl::Status status = planner.status();
    if (status.ok() && format != "text" && format != "json") {
        status = absl::InvalidArgumentError(
            absl::StrCat("--format: unknown format '", format, "' (expected text or json)"));
    }
    if (status.ok() && absl::GetFlag(FLAGS_devices) < 1) {
        status = absl::InvalidArgumentError(
            absl::StrCat("--devices must be at least 1, got ", absl::GetFlag(FLAGS_devices)));
    }
    if (status.ok() && !simulate && !absl::GetFlag(FLAGS_timeline).empty()) {
        status = absl::InvalidArgumentError("--timeline applies only with --simulate");
    }
    absl::StatusOr<exprog::SynthesisMode> mode =
        exprog::parse_synthesis_mode(absl::GetFlag(FLAGS_schedule));
    if (status.ok() && !mode.ok()) {
        status = absl::InvalidArgumentError(absl::StrCat("--schedule: ", mode.status().message()));
    }
    absl::StatusOr<physical::Objective> objective =
        physical::parse_objective(absl::GetFlag(FLAGS_objective));
    if (status.ok() && !objective.ok()) {
        status =
            absl::InvalidArgumentError(absl::StrCat("--objective: ", objective.status().message()));
    }
    const bool by_time = objective.ok() && *objective == physical::Objective::time;
    std::optional<exprog::Topology> topology;
    if (status.ok() && (simulate || by_time)) {
        absl::StatusOr<exprog::Topology> loaded =
            runtime::load_topology(absl::GetFlag(FLAGS_topology));
        if (!loaded.ok()) {
            status =
                absl::InvalidArgumentError(absl::StrCat("--topology: ", loaded.status().message()));
        } else if (loaded->num_gpus() < absl::GetFlag(FLAGS_devices)) {
            status = absl::InvalidArgumentError(
                absl::StrCat("--devices ", absl::GetFlag(FLAGS_devices), " is more than topology '",
                             loaded->name(), "' has GPUs (", loaded->num_gpus(), ")"));
        } else {
            topology = *std::move(loaded);
        }
    }
    absl::StatusOr<ir::Graph> graph = status.ok() ? load_graph() : status;
    physical::PhysicalOptions options;
    if (mode.ok()) {
        options.synthesis.mode = *mode;
    }
    options.synthesis.seed = absl::GetFlag(FLAGS_seed);
    options.synthesis.iterations = absl::GetFlag(FLAGS_iterations);
    const logical::PlannerOptions planner_options{absl::GetFlag(FLAGS_devices),
                                                  planner.ok() ? *planner : logical::Planner::dp,
                                                  absl::GetFlag(FLAGS_seed)};
    std::optional<physical::TimeSearchResult> search;
    absl::StatusOr<logical::LogicalPlan> plan =
        graph.ok() ? absl::UnknownError("no plan") : graph.status();
    if (graph.ok() && by_time) {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<physical::TimeSearchResult> found =
            physical::optimize_for_time(*graph, planner_options, *topology, options);
        search_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        if (found.ok()) {
            plan = found->plan;
            search = *std::move(found);
        } else {
            plan = found.status();
        }
    } else if (graph.ok()) {
        plan = logical::optimize(*graph, planner_options);
    }
    if (!plan.ok()) {
        return fail(plan.status().message());
    }
    std::optional<physical::SimulatedPlan> simulated;
    if (simulate) {
        absl::StatusOr<physical::SimulatedPlan> result =
            physical::compile_and_simulate(*graph, *plan, *topology, options);
        if (!result.ok()) {
            return fail(absl::StrCat("simulate: ", result.status().message()));
        }
        simulated = *std::move(result);
        if (const std::string path = absl::GetFlag(FLAGS_timeline); !path.empty()) {
            const std::string title =
                absl::StrCat(absl::GetFlag(FLAGS_workload).empty() ? absl::GetFlag(FLAGS_graph)
                                                                   : absl::GetFlag(FLAGS_workload),
                             ", ", logical::planner_name(*planner), " plan, ",
                             simulated->exec.devices, " devices of ", topology->name(), " (",
                             exprog::synthesis_mode_name(*mode), " exchanges): simulated ",
                             absl::StrFormat("%.3f ms", simulated->simulation.predicted_s * 1e3));
            std::ofstream out(path);
            out << tools::plan_timeline_svg(simulated->exec, simulated->simulation, title);
            if (!out.good()) {
                return fail(absl::StrCat("--timeline: cannot write '", path, "'"));
            }
        }
    }
    if (format == "json") {
        const std::string logical = logical::explain_json(*graph, *plan);
        std::string text = logical;
        if (simulated || search) {
            // {"plan": <the logical plan>, "simulation": {...}, "objective": {...}}
            text = absl::StrCat("{\"plan\": ", absl::StripTrailingAsciiWhitespace(logical));
            if (simulated) {
                absl::StrAppend(
                    &text, ", \"simulation\": ", simulation_json(*topology, *mode, *simulated));
            }
            if (search) {
                absl::StrAppend(
                    &text, ", \"objective\": {\"name\": \"time\", \"origin\": ",
                    support::json_string(search->origin),
                    absl::StrFormat(", \"predicted_s\": %.9g, \"cost_plan_predicted_s\": %.9g, "
                                    "\"plans_simulated\": %d, \"search_s\": %.6f}",
                                    search->predicted_s, search->cost_plan_predicted_s,
                                    search->plans_simulated, search_s));
            }
            absl::StrAppend(&text, "}\n");
        }
        std::fputs(text.c_str(), stdout);
        return 0;
    }
    std::fputs(logical::explain_text(*graph, *plan).c_str(), stdout);
    if (search) {
        std::printf("\nobjective time on %s: the fastest plan found comes from %s, simulated "
                    "%.3f ms; the cost objective's plan %.3f ms (%.3fx); %d plans simulated in "
                    "%.1f s\n",
                    topology->name().c_str(), search->origin.c_str(), search->predicted_s * 1e3,
                    search->cost_plan_predicted_s * 1e3,
                    search->cost_plan_predicted_s / search->predicted_s, search->plans_simulated,
                    search_s);
    }
    if (simulated) {
        std::printf("\nwhole-plan simulation on %s, %s exchange programs (%zu nodes):\n%s",
                    topology->name().c_str(),
                    std::string(exprog::synthesis_mode_name(*mode)).c_str(),
                    simulated->exec.nodes.size(),
                    physical::explain_simulation(simulated->exec, simulated->simulation).c_str());
    }
    return 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "prints the logical plan of a graph: einsummable-plan (--workload NAME | --graph FILE) "
        "[--devices P] [--planner NAME] [--seed N] [--format text|json] "
        "[--objective cost|time] "
        "[--simulate [--topology NAME|FILE] [--schedule naive|optimized] [--timeline FILE.svg]]");
    std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
    if (positional.size() > 1) {
        std::fprintf(stderr, "einsummable-plan: error: unexpected argument '%s'\n", positional[1]);
        return 2;
    }
    return einsummable::run();
}
