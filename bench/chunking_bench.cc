// Pipelined exchanges in the whole plan (bench/README.md "paper", docs/physical.md "Choosing
// chunks"): the DP plan of every reference workload (the LLaMA block at its token workloads,
// chains A–E; fp16) on every machine and device count, its exchanges synthesised (optimized, the
// paper's settings: 600 candidates, seed 0)
//   - whole:   with whole atoms (max_chunks 0, the physical compiler's default),
//   - chunked: with chunks (max_chunks K) wherever synthesis finds them faster alone,
//   - choose:  per exchange, whichever of the two its lowering simulates faster
//              (physical::PhysicalOptions::choose_chunking), the plan so chosen kept only
//              where it simulates faster than whole (pipeline::keep_fastest_chunking): what a
//              plan by time gets by default,
// each lowered with and without buffer views (exec_graph.h Buffer::parent) and simulated
// (docs/simulation.md). One CSV row per (workload, machine, devices, variant, views). Every time
// is simulated.
//
//   chunking_bench --csv OUT [--max_chunks 8] [--iterations 600] [--machines ...]
//                  [--devices 4,8] [--workloads W;W]

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/topology.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/workloads/workloads.h"

ABSL_FLAG(std::string, csv, "", "where to write the CSV (required)");
ABSL_FLAG(int, max_chunks, 8, "the most chunks of the chunked and choose variants");
ABSL_FLAG(int, iterations, 600, "candidates the optimized synthesis tries per program");
ABSL_FLAG(std::string, machines, "dgx-a100,dgx-v100,dgx-h100", "built-in topologies");
ABSL_FLAG(std::string, devices, "4,8", "device counts");
ABSL_FLAG(std::string, workloads, "",
          "workloads (by_name names, ';'-separated); default: the reference LLaMA blocks and "
          "chains A-E");

namespace einsummable {
namespace {

struct Variant {
    const char* name;
    int max_chunks;
    bool choose;
};

int count_kind(const physical::ExecGraph& exec, physical::NodeKind kind) {
    int count = 0;
    for (const physical::ExecNode& node : exec.nodes) {
        count += node.kind == kind ? 1 : 0;
    }
    return count;
}

// Rows of one setup: every variant, lowered with and without views.
std::vector<std::string> run_setup(const std::string& workload, const std::string& machine_name,
                                   int devices, int max_chunks, int iterations) {
    std::vector<std::string> rows;
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(machine_name);
    if (!graph.ok() || !topology.ok()) {
        std::fprintf(stderr, "chunking_bench: %s on %s: cannot load\n", workload.c_str(),
                     machine_name.c_str());
        return rows;
    }
    pipeline::Machine machine;
    machine.devices = devices;
    machine.topology = *topology;
    for (const Variant& variant :
         {Variant{"whole", 0, false}, Variant{"chunked", max_chunks, false},
          Variant{"choose", max_chunks, true}}) {
        pipeline::Options options;
        options.devices = devices;
        options.planner = logical::Planner::dp;
        options.synthesis_seed = 0;
        options.schedule = exprog::SynthesisMode::optimized;
        options.synthesis_iterations = iterations;
        options.max_chunks = variant.max_chunks;
        options.choose_chunking = variant.choose;
        absl::StatusOr<pipeline::CompiledPlan> compiled =
            pipeline::compile(*graph, options, machine);
        if (!compiled.ok()) {
            std::fprintf(stderr, "chunking_bench: %s %s %d %s: %s\n", workload.c_str(),
                         machine_name.c_str(), devices, variant.name,
                         std::string(compiled.status().message()).c_str());
            continue;
        }
        int exchanges = 0, chunked = 0;
        for (const physical::OperatorPlacement& op : compiled->physical.operators) {
            for (const physical::Exchange& exchange : op.exchanges) {
                ++exchanges;
                bool has_chunks = false;
                for (const exprog::Action& action : exchange.program.actions) {
                    has_chunks = has_chunks || action.chunk.count > 1;
                }
                chunked += has_chunks ? 1 : 0;
            }
        }
        for (bool views : {false, true}) {
            absl::StatusOr<physical::ExecGraph> exec =
                views ? absl::StatusOr<physical::ExecGraph>(compiled->exec)
                      : physical::lower(*graph, compiled->physical, nullptr, nullptr, false);
            if (!exec.ok()) {
                continue;
            }
            absl::StatusOr<physical::PlanSimulation> sim =
                physical::simulate_plan(*exec, *topology);
            if (!sim.ok()) {
                continue;
            }
            rows.push_back(absl::StrFormat("%s,%s,%d,%s,%d,%.9g,%zu,%d,%d,%d,%d,%d,%.6f", workload,
                                           machine_name, devices, variant.name, views ? 1 : 0,
                                           sim->predicted_s, exec->nodes.size(),
                                           count_kind(*exec, physical::NodeKind::slice),
                                           count_kind(*exec, physical::NodeKind::concat),
                                           count_kind(*exec, physical::NodeKind::aggregate),
                                           chunked, exchanges, compiled->seconds.physical));
        }
    }
    return rows;
}

int run() {
    const std::string csv = absl::GetFlag(FLAGS_csv);
    if (csv.empty()) {
        std::fprintf(stderr, "chunking_bench: error: --csv is required\n");
        return 2;
    }
    std::vector<std::string> names =
        absl::StrSplit(absl::GetFlag(FLAGS_workloads), ';', absl::SkipWhitespace());
    if (names.empty()) {
        for (const std::string& name : workloads::reference_names()) {
            if (name.rfind("llama-block", 0) == 0 || name.rfind("chain:", 0) == 0) {
                names.push_back(name);
            }
        }
    }
    std::vector<int> devices;
    for (absl::string_view text :
         absl::StrSplit(absl::GetFlag(FLAGS_devices), ',', absl::SkipWhitespace())) {
        int value = 0;
        if (!absl::SimpleAtoi(text, &value) || value < 1) {
            std::fprintf(stderr, "chunking_bench: error: --devices: bad count\n");
            return 2;
        }
        devices.push_back(value);
    }
    std::ofstream out(csv);
    out << "workload,machine,devices,variant,views,predicted_s,nodes,slices,concats,aggregates,"
           "chunked_exchanges,exchanges,synthesis_s\n";
    for (const std::string& workload : names) {
        for (absl::string_view machine :
             absl::StrSplit(absl::GetFlag(FLAGS_machines), ',', absl::SkipWhitespace())) {
            for (int p : devices) {
                for (const std::string& row :
                     run_setup(workload, std::string(machine), p, absl::GetFlag(FLAGS_max_chunks),
                               absl::GetFlag(FLAGS_iterations))) {
                    out << row << "\n";
                }
                out.flush();
                std::fprintf(stderr, "chunking_bench: %s on %s, %d devices\n", workload.c_str(),
                             std::string(machine).c_str(), p);
            }
        }
    }
    return out ? 0 : 2;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    absl::ParseCommandLine(argc, argv);
    return einsummable::run();
}
