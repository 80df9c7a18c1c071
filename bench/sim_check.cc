// sim_check: is the whole-plan simulator true? Compiles many plans of several workloads for the
// CPU backend, measures each plan's execute() and compares it with what physical::simulate_plan
// predicts for the same ExecGraph on a calibrated topology (bench/cpu_calibrate). See
// docs/simulation.md, "Is the simulator true?", and bench/README.md, "sim_check".
//
// Per setup (one workload at --devices devices) the plans are: the random planner with seeds
// S .. S+N-1 (N = --plans, S = --seed) and every other planner (logical::all_planners: dp,
// greedy and the baselines) once. All of a setup's plans are compiled first; then one warm-up
// round and --repeat timed rounds, each executing every plan once (so that noise from the rest
// of the machine hits every plan alike); measured = the median of a plan's rounds (its fastest
// is reported too). predicted = simulate_plan(exec_graph, topology).predicted_s; ratio =
// predicted / measured. Per setup: the Pearson (and Spearman) correlation of predicted and
// measured over its plans, the median ratio and how much of the machine other processes used
// meanwhile; then the same over every plan. Inputs are seeded with S.
//
// Usage: sim_check --topology FILE|NAME [--plans 20] [--devices 2] [--seed S] [--repeat 5]
//                  [--csv OUT] [--workload NAME]... [--quick] [--breakdown] [--wait_idle SEC]
//                  [--compare_topology FILE|NAME]
//   --workload   replaces the default set of workloads (repeatable; by_name names)
//   --quick      one small workload, --repeat 2 unless given, a short synthesis (smoke test)
//   --breakdown  also time every node alone and compare with its modeled time, by node kind
//   --wait_idle  before each round, wait (at most SEC seconds) until other processes use under
//                10% of the machine
//   --compare_topology FILE|NAME  also predict every plan on this topology and print its
//                correlations with the same measurements (e.g. the calibration without its
//                per-class efficiencies: one model against another on the same runs); the CSV
//                gains a compare_predicted_s column
// Exit status: 0 done; 1 a plan failed to compile or execute; 2 usage error, a bad topology or
// a plan the topology cannot simulate (more devices than GPUs, a dtype without a peak).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/support/statistics.h"
#include "compiler/workloads/by_name.h"
#include "kernels/cpu/block_kernel.h"
#include "runtime/command_line.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cpu/node_ops.h"
#include "runtime/plan.h"
#include "tools/tool_support.h"

namespace einsummable {
namespace {

using support::median;
using support::pearson;

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

int fail(int code, const std::string& message) {
    std::fprintf(stderr, "sim_check: error: %s\n", message.c_str());
    return code;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Ranks with ties averaged.
std::vector<double> ranks(const std::vector<double>& values) {
    std::vector<size_t> order(values.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](size_t a, size_t b) { return values[a] < values[b]; });
    std::vector<double> rank(values.size());
    for (size_t i = 0; i < order.size();) {
        size_t j = i;
        while (j + 1 < order.size() && values[order[j + 1]] == values[order[i]]) {
            ++j;
        }
        for (size_t k = i; k <= j; ++k) {
            rank[order[k]] = (i + j) / 2.0;
        }
        i = j + 1;
    }
    return rank;
}

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
    return pearson(ranks(x), ranks(y));
}

std::string number(double value, const char* format = "%.3f") {
    return std::isfinite(value) ? absl::StrFormat(format, value) : "n/a";
}

// CPU time of the whole machine and of this process (/proc, in clock ticks), to tell how much
// of the machine other processes took while plans were timed: on a shared machine they steal
// the cores the virtual devices assume are theirs.
struct CpuSample {
    double busy = 0, total = 0, self = 0;
    bool ok = false;
};

CpuSample sample_cpu() {
    CpuSample sample;
    std::ifstream stat("/proc/stat");
    std::string cpu;
    double user, nice, system, idle, iowait, irq, softirq, steal;
    if (!(stat >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal) ||
        cpu != "cpu") {
        return sample;
    }
    sample.busy = user + nice + system + irq + softirq + steal;
    sample.total = sample.busy + idle + iowait;
    std::ifstream self("/proc/self/stat");
    std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
    // Fields after the command name (which is in parentheses and may hold spaces): utime and
    // stime are the 12th and 13th.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) {
        return sample;
    }
    std::istringstream rest(text.substr(close + 2));
    std::string field;
    double utime = 0, stime = 0;
    for (int i = 1; i <= 13 && rest >> field; ++i) {
        if (i == 12) {
            utime = std::atof(field.c_str());
        } else if (i == 13) {
            stime = std::atof(field.c_str());
        }
    }
    sample.self = utime + stime;
    sample.ok = true;
    return sample;
}

// The share of the machine's CPU time (0 to 1, all cores) that other processes used between
// two samples; NaN without /proc.
double others_share(const CpuSample& a, const CpuSample& b) {
    if (!a.ok || !b.ok || b.total <= a.total) {
        return std::nan("");
    }
    return std::max(0.0, (b.busy - a.busy) - (b.self - a.self)) / (b.total - a.total);
}

// --wait_idle S: waits (in one-second looks, at most S seconds) until other processes use under
// a tenth of the machine, so that timed rounds start on idle cores.
void wait_for_idle(int limit_s) {
    const auto start = std::chrono::steady_clock::now();
    while (seconds_since(start) < limit_s) {
        const CpuSample a = sample_cpu();
        std::this_thread::sleep_for(std::chrono::seconds(1));
        const double share = others_share(a, sample_cpu());
        if (!(share >= 0.1)) { // NaN: no /proc, nothing to wait for
            return;
        }
    }
}

struct Row {
    std::string workload;
    std::string planner;
    uint64_t seed = 0;
    size_t nodes = 0;
    size_t deps = 0;
    int64_t copy_bytes = 0;
    double measured_s = 0; // the median
    double min_s = 0;
    double predicted_s = 0;
    double compare_s = 0; // predicted on --compare_topology, when given
    double ratio() const { return predicted_s / measured_s; }
};

// One plan of a setup, compiled and simulated, with its timed executes.
struct Compiled {
    Row row;
    std::unique_ptr<runtime::Plan> plan;
    physical::PlanSimulation simulation;
    std::vector<double> times;
};

// What a node is, for the breakdown: its kind, a kernel's operator (einsum split into the BLAS
// contractions and the rest) and dtype.
std::string category(const physical::ExecGraph& exec, const physical::ExecNode& node) {
    if (node.kind != physical::NodeKind::kernel) {
        return std::string(physical::node_kind_name(node.kind));
    }
    std::string kind(node.op->kind());
    if (kind == ir::Einsum::kKind) {
        kind = kernels::cpu::uses_gemm(*node.op) ? "einsum (contraction)" : "einsum (other)";
    }
    return absl::StrCat(kind, " ", ir::dtype_name(exec.buffers[node.outputs[0]].dtype));
}

// --breakdown: every plan of the setup run node by node in this thread (runtime::cpu::
// execute_node, the backend's own node code, on arenas of our own), each node timed (the
// fastest of three passes after a warm-up), against the time the model gives that node alone
// (a compute task's duration; a copy's latency + bytes / link_bandwidth, uncontended). Summed
// by category over the setup's plans: where the model's per-node times are wrong, apart from
// scheduling and parallelism.
std::string breakdown(const std::string& name, const std::vector<Compiled>& plans,
                      const exprog::Topology& topology) {
    struct Sum {
        size_t nodes = 0;
        double measured = 0, modeled = 0;
    };
    std::map<std::string, Sum> sums;
    Sum total;
    double executes = 0;
    for (const Compiled& entry : plans) {
        const physical::ExecGraph& exec = entry.plan->exec_graph();
        std::vector<std::unique_ptr<std::byte, void (*)(std::byte*)>> arenas;
        std::vector<std::byte*> bases;
        for (int d = 0; d < exec.devices; ++d) {
            const int64_t bytes = exec.arena_bytes.empty() ? 0 : exec.arena_bytes[d];
            const size_t size = (std::max<int64_t>(bytes, 1) + 63) / 64 * 64;
            auto* base = static_cast<std::byte*>(std::aligned_alloc(64, size));
            std::memset(base, 0, size);
            arenas.emplace_back(base, [](std::byte* p) { std::free(p); });
            bases.push_back(base);
        }
        const size_t n = exec.nodes.size();
        std::vector<double> best(n, std::numeric_limits<double>::infinity());
        for (int pass = 0; pass < 4; ++pass) { // pass 0 is the warm-up
            for (size_t i = 0; i < n; ++i) {
                const auto start = std::chrono::steady_clock::now();
                // Arena contents are zeros or leftovers: only the time is of interest here.
                (void)runtime::cpu::execute_node(exec, exec.nodes[i], bases);
                if (pass > 0) {
                    best[i] = std::min(best[i], seconds_since(start));
                }
            }
        }
        for (size_t i = 0; i < n; ++i) {
            const exprog::SimTask& task = entry.simulation.tasks[i];
            const double modeled =
                task.kind == exprog::SimTask::Kind::compute
                    ? task.duration_s
                    : topology.latency_s() + task.bytes / topology.link_bandwidth();
            Sum& sum = sums[category(exec, exec.nodes[i])];
            for (Sum* s : {&sum, &total}) {
                s->nodes += 1;
                s->measured += best[i];
                s->modeled += modeled;
            }
        }
        executes += entry.row.measured_s;
    }
    std::string text =
        absl::StrCat("\n", name, ": every node of its ", plans.size(),
                     " plans timed alone, in this thread (sums over the plans)\n\n| node | nodes | "
                     "measured (ms) "
                     "| modeled (ms) | modeled / measured |\n|---|---|---|---|---|\n");
    std::vector<std::pair<std::string, Sum>> sorted(sums.begin(), sums.end());
    std::sort(sorted.begin(), sorted.end(),
              [](const auto& a, const auto& b) { return a.second.measured > b.second.measured; });
    sorted.push_back({"all nodes", total});
    for (const auto& [label, sum] : sorted) {
        absl::StrAppend(&text, absl::StrFormat("| %s | %zu | %.3f | %.3f | %s |\n", label,
                                               sum.nodes, sum.measured * 1e3, sum.modeled * 1e3,
                                               number(sum.modeled / sum.measured)));
    }
    absl::StrAppend(&text, absl::StrFormat("\nsum of the plans' measured executes: %.3f ms (all "
                                           "nodes alone, one thread: %.3f ms)\n",
                                           executes * 1e3, total.measured * 1e3));
    return text;
}

std::string csv_quote(const std::string& text) {
    std::string quoted = "\"";
    for (char c : text) {
        quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    }
    return quoted + "\"";
}

struct Summary {
    size_t plans = 0;
    double pearson = 0, spearman = 0, median_ratio = 0, min_ratio = 0, max_ratio = 0;
    double pearson_min = 0; // against the fastest execute instead of the median
    // slowest / fastest plan, measured and predicted: how far apart the plans are (where they
    // are all alike, noise decides the correlation)
    double measured_spread = 0, predicted_spread = 0;
};

Summary summarize(const std::vector<Row>& rows) {
    std::vector<double> measured, fastest, predicted, ratio;
    for (const Row& row : rows) {
        measured.push_back(row.measured_s);
        fastest.push_back(row.min_s);
        predicted.push_back(row.predicted_s);
        ratio.push_back(row.ratio());
    }
    Summary summary;
    summary.plans = rows.size();
    summary.pearson = pearson(predicted, measured);
    summary.spearman = spearman(predicted, measured);
    summary.pearson_min = pearson(predicted, fastest);
    if (!rows.empty()) {
        summary.measured_spread = *std::max_element(measured.begin(), measured.end()) /
                                  *std::min_element(measured.begin(), measured.end());
        summary.predicted_spread = *std::max_element(predicted.begin(), predicted.end()) /
                                   *std::min_element(predicted.begin(), predicted.end());
    } else {
        summary.measured_spread = summary.predicted_spread = std::nan("");
    }
    summary.median_ratio = median(ratio);
    summary.min_ratio =
        ratio.empty() ? std::nan("") : *std::min_element(ratio.begin(), ratio.end());
    summary.max_ratio =
        ratio.empty() ? std::nan("") : *std::max_element(ratio.begin(), ratio.end());
    return summary;
}

std::vector<std::string> default_workloads(bool quick) {
    if (quick) {
        return {*workloads::small_name("ffn")};
    }
    // Three small versions (a few ms each: the per-node overhead dominates) and five larger
    // ones (about 100 ms: GEMMs, attention and copies dominate); the LLaMA block also in f32,
    // which the CPU computes without converting at every kernel (GPUs do not convert at all).
    return {*workloads::small_name("llama-block:tokens=8192"),
            *workloads::small_name("llama-block:seqs=8x1024"),
            *workloads::small_name("chain:A"),
            "llama-block:tokens=1024,d_model=256,heads_q=8,heads_kv=2,d_head=32,d_ff=768",
            "llama-block:tokens=1024,d_model=256,heads_q=8,heads_kv=2,d_head=32,d_ff=768,dtype=f32",
            "chain:A,scale=16",
            "chain:C,scale=8",
            "ffn:tokens=1024,d_model=512,d_ff=2048"};
}

struct Args {
    std::string topology;
    int plans = 20;
    int devices = 2;
    uint64_t seed = 0;
    int repeat = -1; // -1: 5, or 2 with --quick
    std::string csv;
    std::vector<std::string> workloads;
    bool quick = false;
    bool breakdown = false;
    int wait_idle_s = 0;
    std::string compare_topology;
};

std::optional<std::string> parse_args(int argc, char** argv, Args* args) {
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        auto value = [&]() -> std::optional<std::string> {
            if (i + 1 >= argc) {
                return std::nullopt;
            }
            return std::string(argv[++i]);
        };
        auto count = [&](int* out, int low, int high) -> std::optional<std::string> {
            std::optional<std::string> text = value();
            char* end = nullptr;
            const long parsed = text ? std::strtol(text->c_str(), &end, 10) : 0;
            if (!text || *end != '\0' || parsed < low || parsed > high) {
                return absl::StrCat(arg, ": expected a number from ", low, " to ", high);
            }
            *out = static_cast<int>(parsed);
            return std::nullopt;
        };
        std::optional<std::string> error;
        if (arg == "--topology" || arg == "--csv" || arg == "--workload" ||
            arg == "--compare_topology") {
            std::optional<std::string> text = value();
            if (!text) {
                return absl::StrCat(arg, " needs a value");
            }
            if (arg == "--topology") {
                args->topology = *text;
            } else if (arg == "--csv") {
                args->csv = *text;
            } else if (arg == "--compare_topology") {
                args->compare_topology = *text;
            } else {
                args->workloads.push_back(*text);
            }
        } else if (arg == "--plans") {
            error = count(&args->plans, 0, 10000);
        } else if (arg == "--devices") {
            error = count(&args->devices, 1, 1024);
        } else if (arg == "--repeat") {
            error = count(&args->repeat, 1, 10000);
        } else if (arg == "--seed") {
            std::optional<std::string> text = value();
            char* end = nullptr;
            if (!text || text->empty() ||
                (args->seed = std::strtoull(text->c_str(), &end, 10), *end != '\0')) {
                return "--seed: expected a non-negative integer";
            }
        } else if (arg == "--quick") {
            args->quick = true;
        } else if (arg == "--breakdown") {
            args->breakdown = true;
        } else if (arg == "--wait_idle") {
            error = count(&args->wait_idle_s, 0, 3600);
        } else {
            return absl::StrCat("unexpected argument '", arg, "'");
        }
        if (error) {
            return error;
        }
    }
    if (args->topology.empty()) {
        return "--topology FILE|NAME is required (write one with cpu_calibrate --out FILE)";
    }
    if (args->repeat < 0) {
        args->repeat = args->quick ? 2 : 5;
    }
    return std::nullopt;
}

int run(const Args& args) {
    const auto started = std::chrono::steady_clock::now();
    absl::StatusOr<exprog::Topology> topology = runtime::load_topology(args.topology);
    if (!topology.ok()) {
        return fail(kExitUsage, std::string(topology.status().message()));
    }
    if (args.devices > topology->num_gpus()) {
        return fail(kExitUsage,
                    absl::StrCat("--devices ", args.devices, ": topology '", topology->name(),
                                 "' has ", topology->num_gpus(), " GPUs"));
    }
    std::optional<exprog::Topology> compare;
    if (!args.compare_topology.empty()) {
        absl::StatusOr<exprog::Topology> loaded = runtime::load_topology(args.compare_topology);
        if (!loaded.ok()) {
            return fail(kExitUsage,
                        absl::StrCat("--compare_topology: ", loaded.status().message()));
        }
        if (args.devices > loaded->num_gpus()) {
            return fail(kExitUsage, absl::StrCat("--compare_topology: topology '", loaded->name(),
                                                 "' has ", loaded->num_gpus(), " GPUs"));
        }
        compare = *std::move(loaded);
    }
    const std::vector<std::string> names =
        args.workloads.empty() ? default_workloads(args.quick) : args.workloads;
    const unsigned cores = std::thread::hardware_concurrency();
    std::printf("sim_check: seed %llu, topology %s (%s), %d devices on %u cores, %d random plans "
                "+ %zu other planners per workload, median of %d executes\n",
                static_cast<unsigned long long>(args.seed), topology->name().c_str(),
                args.topology.c_str(), args.devices, cores, args.plans,
                logical::all_planners().size() - 1, args.repeat);
    if (cores != 0 && static_cast<unsigned>(args.devices) > cores) {
        std::printf("note: %d devices on %u cores share them; the simulator assumes a core per "
                    "device, so expect measured > predicted\n",
                    args.devices, cores);
    }
    std::shared_ptr<runtime::Backend> backend = runtime::cpu::make_cpu_backend({args.devices, 1});

    std::vector<std::vector<Row>> setups;
    std::vector<double> others; // per setup: the machine's CPU other processes used meanwhile
    std::vector<std::string> breakdowns;
    bool failed = false;
    std::printf("\n| workload | planner | seed | nodes | deps | copied (B) | measured (ms) | "
                "min (ms) | predicted (ms) | predicted / measured |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n");
    for (const std::string& name : names) {
        absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
        if (!graph.ok()) {
            return fail(kExitUsage, absl::StrCat("--workload: ", graph.status().message()));
        }
        std::mt19937_64 rng(args.seed);
        std::vector<std::pair<std::string, std::vector<float>>> inputs;
        for (ir::TensorId id : graph->inputs()) {
            inputs.emplace_back(graph->tensor(id).name,
                                tools::random_values(graph->tensor(id).type, rng));
        }
        std::vector<std::pair<logical::Planner, uint64_t>> choices;
        for (int i = 0; i < args.plans; ++i) {
            choices.push_back({logical::Planner::random, args.seed + i});
        }
        for (logical::Planner planner : logical::all_planners()) {
            if (planner != logical::Planner::random) {
                choices.push_back({planner, args.seed});
            }
        }
        // Every plan of the setup compiled, loaded and simulated first; then --repeat rounds,
        // each executing every plan once, so that whatever else the machine does hits all the
        // plans alike rather than a few of them.
        std::vector<Compiled> plans;
        for (const auto& [planner, seed] : choices) {
            absl::StatusOr<ir::Graph> copy = workloads::by_name(name);
            runtime::CompileOptions options;
            options.devices = args.devices;
            options.planner = planner;
            options.seed = seed;
            options.topology = *topology;
            options.synthesis_iterations = args.quick ? 50 : 600;
            absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
                runtime::Plan::compile(*std::move(copy), options, backend);
            const std::string planner_name(logical::planner_name(planner));
            if (!plan.ok()) {
                std::printf("| %s | %s | %llu | compile failed: %s |\n", name.c_str(),
                            planner_name.c_str(), static_cast<unsigned long long>(seed),
                            std::string(plan.status().message()).c_str());
                failed = true;
                continue;
            }
            for (const auto& [tensor, values] : inputs) {
                if (absl::Status status = (*plan)->load(tensor, values); !status.ok()) {
                    return fail(kExitFailed, std::string(status.message()));
                }
            }
            // What execute() does: the outputs stay on the devices (no offload is timed).
            physical::PlanSimulationOptions measured_part;
            measured_part.offload_saved_outputs = false;
            absl::StatusOr<physical::PlanSimulation> simulation =
                physical::simulate_plan((*plan)->exec_graph(), *topology, measured_part);
            if (!simulation.ok()) {
                return fail(kExitUsage,
                            absl::StrCat(name, " (", planner_name, " ", seed,
                                         "): simulate: ", simulation.status().message()));
            }
            Compiled entry;
            entry.row.workload = name;
            entry.row.planner = planner_name;
            entry.row.seed = seed;
            const physical::ExecGraph& exec = (*plan)->exec_graph();
            entry.row.nodes = exec.nodes.size();
            for (const physical::ExecNode& node : exec.nodes) {
                entry.row.deps += node.deps.size();
            }
            for (const auto& per_src : exec.copy_bytes()) {
                entry.row.copy_bytes += std::accumulate(per_src.begin(), per_src.end(), int64_t{0});
            }
            entry.row.predicted_s = simulation->predicted_s;
            if (compare) {
                absl::StatusOr<physical::PlanSimulation> other =
                    physical::simulate_plan((*plan)->exec_graph(), *compare);
                if (!other.ok()) {
                    return fail(kExitUsage, absl::StrCat(name, " (", planner_name, " ", seed,
                                                         "): simulate on --compare_topology: ",
                                                         other.status().message()));
                }
                entry.row.compare_s = other->predicted_s;
            }
            entry.simulation = *std::move(simulation);
            entry.plan = *std::move(plan);
            plans.push_back(std::move(entry));
        }
        const CpuSample before = sample_cpu();
        for (int r = 0; r <= args.repeat; ++r) { // r = 0 is the warm-up
            if (args.wait_idle_s > 0) {
                wait_for_idle(args.wait_idle_s);
            }
            for (Compiled& entry : plans) {
                const auto start = std::chrono::steady_clock::now();
                if (absl::Status status = entry.plan->execute(); !status.ok()) {
                    return fail(kExitFailed,
                                absl::StrCat(name, " (", entry.row.planner, " ", entry.row.seed,
                                             "): execute: ", status.message()));
                }
                if (r > 0) {
                    entry.times.push_back(seconds_since(start));
                }
            }
        }
        others.push_back(others_share(before, sample_cpu()));
        std::vector<Row> rows;
        for (Compiled& entry : plans) {
            Row& row = entry.row;
            row.measured_s = median(entry.times);
            row.min_s = *std::min_element(entry.times.begin(), entry.times.end());
            std::printf("| %s | %s | %llu | %zu | %zu | %lld | %.3f | %.3f | %.3f | %.3f |\n",
                        name.c_str(), row.planner.c_str(),
                        static_cast<unsigned long long>(row.seed), row.nodes, row.deps,
                        static_cast<long long>(row.copy_bytes), row.measured_s * 1e3,
                        row.min_s * 1e3, row.predicted_s * 1e3, row.ratio());
            rows.push_back(row);
        }
        std::fflush(stdout);
        if (args.breakdown) {
            breakdowns.push_back(breakdown(name, plans, *topology));
        }
        setups.push_back(std::move(rows));
    }

    std::printf("\n| workload | plans | Pearson | Spearman | Pearson (min) | median predicted / "
                "measured | min | max | spread measured | spread predicted | others' CPU |\n"
                "|---|---|---|---|---|---|---|---|---|---|---|\n");
    auto summary_row = [](const std::string& label, const Summary& summary, double other) {
        std::printf("| %s | %zu | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label.c_str(),
                    summary.plans, number(summary.pearson).c_str(),
                    number(summary.spearman).c_str(), number(summary.pearson_min).c_str(),
                    number(summary.median_ratio).c_str(), number(summary.min_ratio).c_str(),
                    number(summary.max_ratio).c_str(),
                    number(summary.measured_spread, "%.2fx").c_str(),
                    number(summary.predicted_spread, "%.2fx").c_str(),
                    number(other * 100, "%.0f%%").c_str());
    };
    std::vector<Row> all;
    for (size_t s = 0; s < setups.size(); ++s) {
        summary_row(names[s], summarize(setups[s]), others[s]);
        all.insert(all.end(), setups[s].begin(), setups[s].end());
    }
    const Summary overall = summarize(all);
    summary_row("all", overall, median(others));
    if (compare) {
        // The same measurements against the other topology's predictions.
        std::printf("\nOn --compare_topology %s (the same measured times):\n",
                    compare->name().c_str());
        std::printf(
            "\n| workload | plans | Pearson | Spearman | Pearson (min) | median predicted / "
            "measured | min | max | spread measured | spread predicted | others' CPU |\n"
            "|---|---|---|---|---|---|---|---|---|---|---|\n");
        auto on_compare = [](std::vector<Row> rows) {
            for (Row& row : rows) {
                row.predicted_s = row.compare_s;
            }
            return summarize(rows);
        };
        for (size_t s = 0; s < setups.size(); ++s) {
            summary_row(names[s], on_compare(setups[s]), others[s]);
        }
        summary_row("all", on_compare(all), median(others));
    }
    std::printf("\noverall Pearson %s over %zu plans (seed %llu); took %.1f s\n",
                number(overall.pearson).c_str(), overall.plans,
                static_cast<unsigned long long>(args.seed), seconds_since(started));

    for (const std::string& text : breakdowns) {
        std::printf("%s", text.c_str());
    }

    if (!args.csv.empty()) {
        std::ofstream csv(args.csv);
        csv << "workload,planner,seed,nodes,deps,copy_bytes,measured_s,min_s,predicted_s,ratio"
            << (compare ? ",compare_predicted_s\n" : "\n");
        for (const Row& row : all) {
            csv << csv_quote(row.workload) << "," << row.planner << "," << row.seed << ","
                << row.nodes << "," << row.deps << "," << row.copy_bytes << ","
                << absl::StrFormat("%.9g,%.9g,%.9g,%.6g", row.measured_s, row.min_s,
                                   row.predicted_s, row.ratio())
                << (compare ? absl::StrFormat(",%.9g", row.compare_s) : "") << "\n";
        }
        csv.close();
        if (!csv) {
            return fail(kExitUsage, absl::StrCat("--csv: cannot write '", args.csv, "'"));
        }
    }
    return failed ? kExitFailed : 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    einsummable::Args args;
    if (std::optional<std::string> error = einsummable::parse_args(argc, argv, &args)) {
        std::fprintf(stderr,
                     "sim_check: error: %s\nusage: sim_check --topology FILE|NAME [--plans N] "
                     "[--devices P] [--seed S] [--repeat R] [--csv OUT] [--workload NAME]... "
                     "[--quick] [--breakdown] [--wait_idle SEC] [--compare_topology FILE|NAME]\n",
                     error->c_str());
        return einsummable::kExitUsage;
    }
    return einsummable::run(args);
}
