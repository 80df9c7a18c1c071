// How the time programme's plan (logical::optimize_by_time, the default objective) compares on
// the whole-plan simulator with the bytes programme's and the hand-written baselines', and how
// well its predicted time ranks plans: per setup (workload × machine × devices) the simulated
// time of every plan, the default's ratio to the best baseline, and the Pearson correlation of
// predicted (predict_plan_seconds) and simulated time over all plans of the setup (the
// programme's, the bytes programme's, greedy's, the baselines' and random draws). Every time is
// simulated (docs/simulation.md), none measured.
//
// Usage: time_dp_check [--machines dgx-a100,...] [--devices 4,8] [--workloads W;W] [--random 6]
//                      [--iterations 100] [--csv FILE]

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_dp.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/workloads/workloads.h"

ABSL_FLAG(std::string, machines, "dgx-a100,dgx-v100,dgx-h100", "built-in topologies");
ABSL_FLAG(std::string, devices, "4,8", "device counts");
ABSL_FLAG(std::string, workloads, "", "workloads (';'-separated); default: the reference ones");
ABSL_FLAG(int, random, 6, "random plans per setup (for the correlation)");
ABSL_FLAG(int, iterations, 100, "synthesis iterations per exchange");
ABSL_FLAG(std::string, csv, "", "also write one row per plan to this file");
ABSL_FLAG(bool, small, false, "the small versions of the workloads (workloads::small_name)");

namespace {

using namespace einsummable;

struct Row {
    std::string plan;
    double predicted_s = 0.0;
    double simulated_s = 0.0;
};

double pearson(const std::vector<Row>& rows) {
    const double n = static_cast<double>(rows.size());
    double mx = 0, my = 0;
    for (const Row& r : rows) {
        mx += r.predicted_s / n;
        my += r.simulated_s / n;
    }
    double sxy = 0, sxx = 0, syy = 0;
    for (const Row& r : rows) {
        sxy += (r.predicted_s - mx) * (r.simulated_s - my);
        sxx += (r.predicted_s - mx) * (r.predicted_s - mx);
        syy += (r.simulated_s - my) * (r.simulated_s - my);
    }
    return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : 1.0;
}

} // namespace

int main(int argc, char** argv) {
    absl::ParseCommandLine(argc, argv);
    std::vector<std::string> workloads =
        absl::GetFlag(FLAGS_workloads).empty()
            ? workloads::reference_names()
            : std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_workloads), ';'));
    if (absl::GetFlag(FLAGS_small)) {
        for (std::string& name : workloads) {
            absl::StatusOr<std::string> small = workloads::small_name(name);
            if (!small.ok()) {
                std::fprintf(stderr, "%s\n", std::string(small.status().message()).c_str());
                return 1;
            }
            name = *small;
        }
    }
    std::ofstream csv;
    if (!absl::GetFlag(FLAGS_csv).empty()) {
        csv.open(absl::GetFlag(FLAGS_csv));
        csv << "workload,machine,devices,plan,predicted_s,simulated_s\n";
    }
    std::printf("%-28s %-9s %2s %10s %10s %-14s %8s %8s %8s %s\n", "workload", "machine", "p",
                "default_ms", "best_bl_ms", "best_baseline", "ratio", "bytes_r", "pearson",
                "origin");
    double log_sum = 0.0;
    int setups = 0, losses = 0;
    for (const std::string& machine :
         std::vector<std::string>(absl::StrSplit(absl::GetFlag(FLAGS_machines), ','))) {
        absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(machine);
        if (!topology.ok()) {
            std::fprintf(stderr, "%s\n", std::string(topology.status().message()).c_str());
            return 1;
        }
        for (absl::string_view p_text : absl::StrSplit(absl::GetFlag(FLAGS_devices), ',')) {
            int p = 0;
            if (!absl::SimpleAtoi(p_text, &p)) {
                return 1;
            }
            for (const std::string& workload : workloads) {
                absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
                if (!graph.ok()) {
                    std::fprintf(stderr, "%s\n", std::string(graph.status().message()).c_str());
                    return 1;
                }
                std::vector<std::pair<std::string, logical::LogicalPlan>> plans;
                logical::PlannerOptions options;
                options.devices = p;
                logical::TimePlanReport report;
                absl::StatusOr<logical::LogicalPlan> by_time =
                    logical::optimize_by_time(*graph, options, *topology, &report);
                if (!by_time.ok()) {
                    std::fprintf(stderr, "%s\n", std::string(by_time.status().message()).c_str());
                    return 1;
                }
                plans.emplace_back("time", *by_time);
                std::vector<std::pair<std::string, logical::PlannerOptions>> others;
                for (logical::Planner planner : logical::all_planners()) {
                    if (planner == logical::Planner::random) {
                        for (int seed = 0; seed < absl::GetFlag(FLAGS_random); ++seed) {
                            logical::PlannerOptions o = options;
                            o.planner = planner;
                            o.seed = seed;
                            others.emplace_back(absl::StrCat("random", seed), o);
                        }
                        continue;
                    }
                    logical::PlannerOptions o = options;
                    o.planner = planner;
                    others.emplace_back(std::string(logical::planner_name(planner)), o);
                }
                for (const auto& [name, o] : others) {
                    absl::StatusOr<logical::LogicalPlan> plan = logical::optimize(*graph, o);
                    if (plan.ok()) {
                        plans.emplace_back(name, *std::move(plan));
                    }
                }
                physical::SynthesisCache cache;
                physical::PhysicalOptions physical;
                physical.synthesis.iterations = absl::GetFlag(FLAGS_iterations);
                physical.cache = &cache;
                std::vector<Row> rows;
                double best_baseline = 1e30, bytes_s = 0.0;
                std::string best_name;
                for (const auto& [name, plan] : plans) {
                    absl::StatusOr<physical::SimulatedPlan> sim =
                        physical::compile_and_simulate(*graph, plan, *topology, physical);
                    absl::StatusOr<double> predicted =
                        logical::predict_plan_seconds(*graph, plan, *topology);
                    if (!sim.ok() || !predicted.ok()) {
                        std::fprintf(
                            stderr, "%s %s p=%d %s: %s\n", workload.c_str(), machine.c_str(), p,
                            name.c_str(),
                            std::string((sim.ok() ? predicted.status() : sim.status()).message())
                                .c_str());
                        continue;
                    }
                    rows.push_back({name, *predicted, sim->simulation.predicted_s});
                    if (logical::parse_planner(name).ok() &&
                        logical::is_baseline(*logical::parse_planner(name)) &&
                        sim->simulation.predicted_s < best_baseline) {
                        best_baseline = sim->simulation.predicted_s;
                        best_name = name;
                    }
                    if (name == "dp") {
                        bytes_s = sim->simulation.predicted_s;
                    }
                    if (csv.is_open()) {
                        csv << workload << "," << machine << "," << p << "," << name << ","
                            << absl::StrFormat("%.9g,%.9g\n", *predicted,
                                               sim->simulation.predicted_s);
                    }
                }
                const double ratio = rows[0].simulated_s / best_baseline;
                log_sum += std::log(ratio);
                ++setups;
                losses += ratio > 1.01 ? 1 : 0;
                std::printf("%-28s %-9s %2d %10.4f %10.4f %-14s %8.3f %8.3f %8.3f %s\n",
                            workload.c_str(), machine.c_str(), p, rows[0].simulated_s * 1e3,
                            best_baseline * 1e3, best_name.c_str(), ratio, bytes_s / best_baseline,
                            pearson(rows), report.origin.c_str());
                std::fflush(stdout);
            }
        }
    }
    std::printf("setups %d, default slower than the best baseline by >1%% on %d, geomean %.4f\n",
                setups, losses, std::exp(log_sum / setups));
    return 0;
}
