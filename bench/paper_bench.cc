// The paper's experiments on the whole-plan simulator (bench/README.md "paper"):
// every plan — DP (the bytes objective), greedy, random draws, the hand-written baselines, the
// time programme's plan (time-dp) and the search objective's (search) — of every reference
// workload (docs/workloads.md: the LLaMA block at five token workloads, chains A–E; fp16), on
// every machine and device count, each with naive and optimized exchange programs, compiled
// through the compile pipeline (compiler/pipeline/pipeline.h) and simulated (docs/simulation.md).
// Writes one CSV row per (workload, machine, devices, plan, schedule); bench/paper_report.py turns
// it into the report. Every time in it is simulated except planning_s and synthesis_s, which are
// measured wall times of this run.
//
//   paper_bench --csv OUT [--quick] [--threads 2] [--random 20] [--iterations 600]
//               [--machines dgx-a100,dgx-v100,dgx-h100] [--devices 1,4,8] [--workloads ...]

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_model.h"
#include "compiler/logical/time_objective.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/support/status_macros.h"
#include "compiler/workloads/workloads.h"

ABSL_FLAG(std::string, csv, "", "where to write the CSV (required)");
ABSL_FLAG(bool, quick, false,
          "a smaller run (dgx-v100, whose mixed links make the exchange schedules differ most, at "
          "8 devices, 3 random draws, 100 synthesis iterations) that keeps every workload and "
          "every plan kind");
ABSL_FLAG(int, threads, 2, "setups compiled in parallel");
ABSL_FLAG(int, random, 20, "random plans per setup (seeds 0..N-1)");
ABSL_FLAG(int, iterations, 600, "candidates the optimized synthesis tries per program");
ABSL_FLAG(
    int, max_chunks, -1,
    "the most chunks the optimized synthesis's pipelined candidates use, for every plan (0: "
    "whole atoms, no ORDER); -1: the compile pipeline's default (whole atoms, except the time "
    "objective's plan, chunked where the whole plan simulates faster)");
ABSL_FLAG(bool, choose_chunking, false,
          "with --max_chunks > 0, chunk each exchange only where its lowering simulates faster "
          "(physical::PhysicalOptions::choose_chunking)");
ABSL_FLAG(std::string, machines, "dgx-a100,dgx-v100,dgx-h100", "built-in topologies");
ABSL_FLAG(std::string, devices, "1,4,8", "device counts");
ABSL_FLAG(std::string, workloads, "",
          "workloads (by_name names, ';'-separated); default: the reference LLaMA blocks and "
          "chains A-E");

namespace einsummable {
namespace {

struct Setup {
    std::string workload;
    std::string machine;
    int devices = 1;
};

struct PlanChoice {
    // "dp" (the bytes programme), "random", "ulysses", ..., "time-dp" (the time programme) or
    // "search" (the search objective).
    std::string name;
    logical::Planner planner = logical::Planner::dp;
    uint64_t seed = 0;
    // What dp minimises (logical::Objective): the planners' own plans are the bytes objective's.
    logical::Objective objective = logical::Objective::bytes;
};

struct Settings {
    int random = 20;
    int iterations = 600;
    int max_chunks = -1; // -1: the pipeline's default
    bool choose_chunking = false;
};

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string csv_field(const std::string& text) {
    if (text.find_first_of(",\"\n") == std::string::npos) {
        return text;
    }
    std::string quoted = "\"";
    for (char c : text) {
        quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    }
    return quoted + "\"";
}

constexpr const char* kHeader =
    "workload,machine,devices,plan,seed,schedule,strategy,cost_bytes,cost_elements,predicted_s,"
    "exchange_sum_s,compute_s,communication_s,idle_s,planning_s,synthesis_s,nodes,origin,"
    "distributed_s,compute_bound_s,delivery_bound_s";

// A lower bound on the simulated time of every plan the planners can give on `devices` devices
// (the DP's candidates and the four baselines'): the simulator runs one kernel at a time per
// device, each function spec's kernel for function_seconds (the simulator's own kernel model),
// so the busiest device computes at least the sum over operators of the least total kernel time
// of any of the operator's candidates, divided by the devices. Exchanges, aggregation and the
// outputs' delivery are left out (they only add), so no plan beats it; how close the best
// baseline comes to it bounds what any planner can gain on the setup.
absl::StatusOr<double> compute_bound_seconds(const ir::Graph& graph,
                                             const exprog::Topology& topology, int devices) {
    logical::PlannerOptions options;
    options.devices = devices;
    EINSUMMABLE_ASSIGN_OR_RETURN(logical::GraphCandidates candidates,
                                 logical::planning_candidates(graph, options));
    for (logical::Planner baseline : {logical::Planner::data_parallel, logical::Planner::megatron,
                                      logical::Planner::ulysses, logical::Planner::row_sharded}) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<logical::Candidate> chosen,
                                     logical::choose_baseline(graph, baseline, devices));
        for (size_t node = 0; node < chosen.size(); ++node) {
            candidates[node].push_back(chosen[node]);
        }
    }
    double total = 0.0;
    for (size_t node = 0; node < graph.nodes().size(); ++node) {
        const ir::Operator& op = *graph.nodes()[node].op;
        double least = std::numeric_limits<double>::infinity();
        for (const logical::Candidate& candidate : candidates[node]) {
            EINSUMMABLE_ASSIGN_OR_RETURN(ir::JoinAggSpec spec, op.spec(candidate.request));
            double sum = 0.0;
            for (int k = 0; k < static_cast<int>(spec.functions.size()); ++k) {
                EINSUMMABLE_ASSIGN_OR_RETURN(double seconds,
                                             logical::function_seconds(op, spec, k, topology));
                sum += seconds;
            }
            least = std::min(least, sum);
        }
        total += least;
    }
    return total / devices;
}

// A lower bound on the saved outputs' delivery in every plan: each of their bytes leaves the
// devices over one GPU's host link (Topology::host_bandwidth), `devices` links at once, after
// the topology's latency. With compute_bound_seconds, max(compute, delivery) bounds every plan.
double delivery_bound_seconds(const ir::Graph& graph, const exprog::Topology& topology,
                              int devices) {
    double bytes = 0.0;
    for (ir::TensorId saved : graph.saved()) {
        bytes += static_cast<double>(graph.tensor(saved).type.bytes());
    }
    return bytes == 0.0 ? 0.0
                        : topology.latency_s() + bytes / (devices * topology.host_bandwidth());
}

// The plans of every setup: the DP (the bytes objective), greedy, the random draws, the
// baselines, the time programme's plan and the search's.
std::vector<PlanChoice> plan_choices(const Settings& settings) {
    std::vector<PlanChoice> plans = {{"dp", logical::Planner::dp, 0},
                                     {"greedy", logical::Planner::greedy, 0}};
    for (int seed = 0; seed < settings.random; ++seed) {
        plans.push_back({"random", logical::Planner::random, static_cast<uint64_t>(seed)});
    }
    for (logical::Planner baseline : {logical::Planner::data_parallel, logical::Planner::megatron,
                                      logical::Planner::ulysses, logical::Planner::row_sharded}) {
        plans.push_back({std::string(logical::planner_name(baseline)), baseline, 0});
    }
    plans.push_back({"time-dp", logical::Planner::dp, 0, logical::Objective::time});
    plans.push_back({"search", logical::Planner::dp, 0, logical::Objective::search});
    return plans;
}

// Every row of one setup, or one error row per plan that failed (never silently dropped).
std::vector<std::string> run_setup(const Setup& setup, const Settings& settings) {
    std::vector<std::string> rows;
    absl::StatusOr<ir::Graph> graph = workloads::by_name(setup.workload);
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(setup.machine);
    if (!graph.ok() || !topology.ok()) {
        std::fprintf(
            stderr, "paper_bench: %s on %s: %s\n", setup.workload.c_str(), setup.machine.c_str(),
            std::string((graph.ok() ? topology.status() : graph.status()).message()).c_str());
        return rows;
    }
    const std::vector<PlanChoice> plans = plan_choices(settings);
    absl::StatusOr<double> bound = compute_bound_seconds(*graph, *topology, setup.devices);
    const double delivery = delivery_bound_seconds(*graph, *topology, setup.devices);
    if (!bound.ok()) {
        std::fprintf(stderr, "paper_bench: %s on %s, %d devices: the compute bound: %s\n",
                     setup.workload.c_str(), setup.machine.c_str(), setup.devices,
                     std::string(bound.status().message()).c_str());
        return rows;
    }
    // One synthesis cache per setup: its plans share many exchanges (a hit is exactly what
    // synthesis would give).
    physical::SynthesisCache cache;
    pipeline::Machine machine;
    machine.devices = setup.devices;
    machine.topology = *topology;
    for (const PlanChoice& choice : plans) {
        for (exprog::SynthesisMode mode :
             {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
            const std::string prefix =
                absl::StrCat(csv_field(setup.workload), ",", setup.machine, ",", setup.devices, ",",
                             choice.name, ",", choice.seed, ",", exprog::synthesis_mode_name(mode));
            // The plan by the paper's cost (the planner alone), by the time programme or by the
            // search, through the compile pipeline on this machine.
            pipeline::Options options;
            options.devices = setup.devices;
            options.planner = choice.planner;
            options.seed = choice.seed;
            options.synthesis_seed = 0; // every plan's exchanges with the same seed
            options.schedule = mode;
            options.synthesis_iterations = settings.iterations;
            if (settings.max_chunks >= 0) {
                options.max_chunks = settings.max_chunks;
            }
            options.choose_chunking = settings.choose_chunking;
            options.cache = &cache;
            options.objective = choice.objective;
            options.time_search.search_iterations = settings.iterations; // the cache serves it
            absl::StatusOr<pipeline::CompiledPlan> compiled =
                pipeline::compile(*graph, options, machine);
            if (!compiled.ok()) {
                std::fprintf(stderr, "paper_bench: %s: %s\n", prefix.c_str(),
                             std::string(compiled.status().message()).c_str());
                continue;
            }
            const logical::LogicalPlan& plan = compiled->logical;
            const physical::ExecGraph& exec = compiled->exec;
            // Where the plan came from: the search's or the time programme's origin, else the
            // row's plan.
            const std::string origin = plan.objective.has_value() && !plan.objective->origin.empty()
                                           ? plan.objective->origin
                                           : choice.name;
            absl::StatusOr<physical::PlanSimulation> sim = physical::simulate_plan(exec, *topology);
            if (!sim.ok()) {
                std::fprintf(stderr, "paper_bench: %s: %s\n", prefix.c_str(),
                             std::string(sim.status().message()).c_str());
                continue;
            }
            // The same plan with its outputs left where they were computed.
            physical::PlanSimulationOptions distributed;
            distributed.offload_saved_outputs = false;
            absl::StatusOr<physical::PlanSimulation> spread =
                physical::simulate_plan(exec, *topology, distributed);
            if (!spread.ok()) {
                std::fprintf(stderr, "paper_bench: %s: %s\n", prefix.c_str(),
                             std::string(spread.status().message()).c_str());
                continue;
            }
            double compute = 0.0, communication = 0.0, idle = 0.0;
            for (const physical::DeviceTime& device : sim->devices) {
                compute += device.compute_s;
                communication += device.communication_s;
                idle += device.idle_s;
            }
            const double n = static_cast<double>(sim->devices.size());
            // planning_s and synthesis_s: the measured wall times of the logical pass and of the
            // exchange synthesis.
            std::string row = absl::StrFormat(
                "%s,%s,%.0f,%.0f,%.9g,%.9g,%.9g,%.9g,%.9g,%.6f,%.6f,%d,%s,%.9g,%.9g,%.9g", prefix,
                csv_field(plan.strategy), plan.total.bytes.total(), plan.total.elements.total(),
                sim->predicted_s, compiled->physical.simulated_s(), compute / n, communication / n,
                idle / n, compiled->seconds.logical, compiled->seconds.physical,
                static_cast<int>(exec.nodes.size()), csv_field(origin), spread->predicted_s, *bound,
                delivery);
            if (row.empty()) { // StrFormat's answer to a bad format: never write a blank row
                std::fprintf(stderr, "paper_bench: %s: internal error formatting the row\n",
                             prefix.c_str());
                continue;
            }
            rows.push_back(std::move(row));
        }
    }
    return rows;
}

std::vector<std::string> split_list(const std::string& text, char separator) {
    return absl::StrSplit(text, separator, absl::SkipWhitespace());
}

int run() {
    const std::string csv = absl::GetFlag(FLAGS_csv);
    if (csv.empty()) {
        std::fprintf(stderr, "paper_bench: error: --csv is required\n");
        return 2;
    }
    const bool quick = absl::GetFlag(FLAGS_quick);
    Settings settings;
    settings.random = quick ? 3 : absl::GetFlag(FLAGS_random);
    settings.iterations = quick ? 100 : absl::GetFlag(FLAGS_iterations);
    settings.max_chunks = absl::GetFlag(FLAGS_max_chunks);
    settings.choose_chunking = absl::GetFlag(FLAGS_choose_chunking);
    std::vector<std::string> machines =
        split_list(quick ? std::string("dgx-v100") : absl::GetFlag(FLAGS_machines), ',');
    std::vector<int> devices;
    for (const std::string& text : split_list(quick ? "8" : absl::GetFlag(FLAGS_devices), ',')) {
        int value = 0;
        if (!absl::SimpleAtoi(text, &value) || value < 1) {
            std::fprintf(stderr, "paper_bench: error: --devices: bad count '%s'\n", text.c_str());
            return 2;
        }
        devices.push_back(value);
    }
    std::vector<std::string> names = absl::GetFlag(FLAGS_workloads).empty()
                                         ? std::vector<std::string>{}
                                         : split_list(absl::GetFlag(FLAGS_workloads), ';');
    if (names.empty()) {
        for (const std::string& name : workloads::reference_names()) {
            if (name.rfind("llama-block", 0) == 0 || name.rfind("chain:", 0) == 0) {
                names.push_back(name);
            }
        }
    }
    std::vector<Setup> setups;
    for (const std::string& workload : names) {
        for (const std::string& machine : machines) {
            for (int p : devices) {
                setups.push_back({workload, machine, p});
            }
        }
    }
    // Largest setups first so that the threads finish together; rows go out in setup order.
    std::vector<size_t> order(setups.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return setups[a].devices > setups[b].devices; });
    std::vector<std::vector<std::string>> rows(setups.size());
    std::atomic<size_t> next{0};
    std::mutex log;
    const auto start = std::chrono::steady_clock::now();
    auto worker = [&] {
        for (size_t at = next++; at < order.size(); at = next++) {
            const Setup& setup = setups[order[at]];
            const auto setup_start = std::chrono::steady_clock::now();
            rows[order[at]] = run_setup(setup, settings);
            std::lock_guard<std::mutex> lock(log);
            std::fprintf(stderr, "paper_bench: [%zu/%zu] %s on %s, %d devices: %zu rows, %.1f s\n",
                         at + 1, order.size(), setup.workload.c_str(), setup.machine.c_str(),
                         setup.devices, rows[order[at]].size(), seconds_since(setup_start));
            std::fflush(stderr);
        }
    };
    std::vector<std::thread> threads;
    for (int t = 0; t < std::max(1, absl::GetFlag(FLAGS_threads)); ++t) {
        threads.emplace_back(worker);
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    std::ofstream out(csv);
    out << kHeader << "\n";
    size_t total = 0;
    for (const std::vector<std::string>& setup_rows : rows) {
        for (const std::string& row : setup_rows) {
            out << row << "\n";
            ++total;
        }
    }
    out.close();
    if (!out) {
        std::fprintf(stderr, "paper_bench: error: cannot write '%s'\n", csv.c_str());
        return 2;
    }
    const size_t expected = setups.size() * plan_choices(settings).size() * 2;
    std::fprintf(stderr, "paper_bench: %zu of %zu rows to %s in %.1f s\n", total, expected,
                 csv.c_str(), seconds_since(start));
    return total == expected ? 0 : 1;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "the paper's experiments on the whole-plan simulator: paper_bench --csv OUT [--quick] "
        "[--threads N] [--random N] [--iterations N] [--max_chunks N] [--choose_chunking] "
        "[--machines A,B] [--devices "
        "1,4,8] "
        "[--workloads W;W]");
    absl::ParseCommandLine(argc, argv);
    return einsummable::run();
}
