// cpu_calibrate: measures what one virtual device of the CPU backend computes and moves, and
// writes it as a topology file (docs/topologies.md "File format") that the whole-plan simulator
// can predict CPU-backend plans with (docs/simulation.md, "Is the simulator true?").
//
//   peak_f32        the library sgemm through kernels::cpu::run_f32 (the f32 kernel path), square
//                   matmuls; the median over the large sizes of each size's median rate;
//   peak_f16/bf16   the same matmuls stored as f16 / bf16, as a p = 1 CPU-backend plan runs them
//                   (converted to f32 scratch at the kernel boundary, then sgemm);
//   hbm_bandwidth   an element-wise add (einsum ij,ij->ij) through run_f32 on buffers far larger
//                   than the caches: bytes read + written / time;
//   link_bandwidth  copy nodes of the backend between two virtual devices (memcpy into the
//                   destination's arena, on its worker), large buffers;
//   latency         the same copy path with tiny buffers, each copy waiting for the previous one
//                   on the other device: the fixed cost of one copy;
//   launch_overhead a p = 1 plan of many tiny kernels in a chain: time per node.
// and, per kernel class (docs/topologies.md "Kernel classes"), the fraction of those rates the
// class's kernel reaches through run_f32, the kernels a worker runs:
//   gemm            1: peak_f32 is the GEMM's rate;
//   attention       compute: a causal grouped-query attention (the sim_check LLaMA block's
//                   shape), FLOP/s over peak_f32;
//   elementwise     memory 1: hbm_bandwidth is the element-wise add's rate (a softmax's is in a
//                   comment: the class takes the add's);
//   norm            memory: an rmsnorm far larger than the caches, bytes/s over hbm_bandwidth.
// Comments in the file give every size's rate, the f32 GEMM on all cores at once, the
// in-cache bandwidth and the cost of a dep, which the model does not have.
// Per-item costs come from the slope between a short and a long chain, so the fixed cost of
// one run() (waking the workers, waiting for the last) is left out. Everything runs
// single-threaded (BLAS in the calling thread), as a worker does.
//
// Usage: cpu_calibrate --out FILE [--devices N] [--quick]
//   --devices N  the topology's GPU count (default 8); memory = physical RAM / N
//   --quick      small sizes and few repeats (a few seconds; for the smoke test)

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/exprog/topology.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/support/statistics.h"
#include "compiler/workloads/by_name.h"
#include "kernels/cpu/kernels.h"
#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"

namespace einsummable {
namespace {

using support::median;

constexpr uint64_t kSeed = 20261130;

[[noreturn]] void die(const std::string& what, const absl::Status& status) {
    std::fprintf(stderr, "cpu_calibrate: %s: %s\n", what.c_str(),
                 std::string(status.message()).c_str());
    std::exit(1);
}

[[noreturn]] void usage(const std::string& message) {
    std::fprintf(stderr,
                 "cpu_calibrate: %s\nusage: cpu_calibrate --out FILE [--devices N] [--quick]\n",
                 message.c_str());
    std::exit(2);
}

double seconds(const std::function<void()>& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// One warm-up, then the median of `repeat` timed runs.
double median_time(const std::function<void()>& run, int repeat) {
    run();
    std::vector<double> times;
    for (int r = 0; r < repeat; ++r) {
        times.push_back(seconds(run));
    }
    return median(times);
}

std::vector<float> random_floats(int64_t n, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    std::vector<float> values(n);
    for (float& v : values) {
        v = uniform(rng);
    }
    return values;
}

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    if (!graph.ok()) {
        die(name, graph.status());
    }
    return *std::move(graph);
}

// One node's operator called through run_f32 on whole f32 tensors; returns the median seconds
// per call and sets *flops and *bytes to the node's work (as the simulator counts it).
double time_direct(const ir::Graph& graph, int repeat, double* flops, double* bytes) {
    const ir::GraphNode& node = graph.nodes().at(0);
    const ir::JoinAggSpec spec = node.op->whole_spec();
    const ir::FunctionSpec& function = spec.functions.at(0);
    std::mt19937_64 rng(kSeed);
    std::vector<std::vector<float>> values;
    std::vector<const float*> in;
    std::vector<float*> out;
    double total_bytes = 0.0;
    for (ir::TensorId t : node.inputs) {
        values.push_back(random_floats(graph.tensor(t).type.elements(), rng));
        total_bytes += 4.0 * static_cast<double>(values.back().size());
    }
    for (ir::TensorId t : node.outputs) {
        values.push_back(std::vector<float>(graph.tensor(t).type.elements()));
        total_bytes += 4.0 * static_cast<double>(values.back().size());
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
        in.push_back(values[i].data());
    }
    for (size_t j = 0; j < node.outputs.size(); ++j) {
        out.push_back(values[node.inputs.size() + j].data());
    }
    *flops = node.op->flops(function);
    *bytes = total_bytes;
    return median_time(
        [&] {
            if (absl::Status status = kernels::cpu::run_f32(*node.op, function, in, out);
                !status.ok()) {
                die(node.name, status);
            }
        },
        repeat);
}

// A p = 1 CPU-backend plan of `graph` (inputs random), for timing execute().
std::unique_ptr<runtime::Plan> one_device_plan(ir::Graph graph,
                                               std::shared_ptr<runtime::Backend> backend) {
    std::mt19937_64 rng(kSeed);
    std::vector<std::pair<std::string, std::vector<float>>> inputs;
    for (ir::TensorId id : graph.inputs()) {
        inputs.emplace_back(graph.tensor(id).name,
                            random_floats(graph.tensor(id).type.elements(), rng));
    }
    runtime::CompileOptions options;
    options.devices = 1;
    options.seed = kSeed;
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        runtime::Plan::compile(std::move(graph), options, std::move(backend));
    if (!plan.ok()) {
        die("compile", plan.status());
    }
    for (const auto& [name, values] : inputs) {
        if (absl::Status status = (*plan)->load(name, values); !status.ok()) {
            die(name, status);
        }
    }
    return *std::move(plan);
}

double time_execute(runtime::Plan& plan, int repeat) {
    return median_time(
        [&] {
            if (absl::Status status = plan.execute(); !status.ok()) {
                die("execute", status);
            }
        },
        repeat);
}

// A chain of `nodes` tiny kernels on one device: y_k = y_{k-1} + x on 16 floats. With
// save_all every y_k is saved, so no two share memory and each node has one dep (the lowering
// adds a node per saved output); otherwise the memory plan reuses two slots and every node also
// waits for every earlier user of the slot it overwrites (about k deps for node k).
ir::Graph tiny_chain(int nodes, bool save_all) {
    ir::Graph graph;
    absl::StatusOr<ir::TensorId> x = graph.add_input("x", ir::DType::f32, {{"i", 16}});
    if (!x.ok()) {
        die("tiny chain", x.status());
    }
    ir::TensorId y = *x;
    for (int k = 0; k < nodes; ++k) {
        absl::StatusOr<ir::TensorId> next = graph.add(
            absl::StrCat("add", k), "einsum",
            ir::Attributes{{"equation", std::string("i,i->i")}, {"join", std::string("add")}},
            {y, *x});
        if (!next.ok()) {
            die("tiny chain", next.status());
        }
        y = *next;
        if (save_all || k + 1 == nodes) {
            if (absl::Status status = graph.save(y); !status.ok()) {
                die("tiny chain", status);
            }
        }
    }
    return graph;
}

// An ExecGraph of `copies` copy nodes ping-ponging one buffer of `elements` f32 between devices
// 0 and 1, each copy after the previous: the backend's copy path with nothing else in it.
physical::ExecGraph copy_chain(int copies, int64_t elements) {
    physical::ExecGraph graph;
    graph.devices = 2;
    for (int d = 0; d < 2; ++d) {
        physical::Buffer buffer;
        buffer.device = d;
        buffer.dtype = ir::DType::f32;
        buffer.box = ir::Box::from_shape({elements});
        buffer.tensor = absl::StrCat("x", d);
        buffer.persistent = true;
        buffer.offset = 0;
        graph.buffers.push_back(buffer);
    }
    const int64_t arena = (elements * 4 + 63) / 64 * 64;
    graph.arena_bytes = {arena, arena};
    for (int i = 0; i < copies; ++i) {
        physical::ExecNode node;
        node.kind = physical::NodeKind::copy;
        const int src = i % 2;
        node.device = 1 - src;
        node.inputs = {src};
        node.outputs = {1 - src};
        if (i > 0) {
            node.deps = {i - 1};
        }
        node.label = absl::StrCat("copy", i);
        graph.nodes.push_back(std::move(node));
    }
    return graph;
}

// Median seconds of one run() of a copy chain.
double time_copy_chain(runtime::Backend& backend, int copies, int64_t elements, int repeat) {
    const physical::ExecGraph graph = copy_chain(copies, elements);
    absl::StatusOr<std::unique_ptr<runtime::Executable>> exe = backend.prepare(graph);
    if (!exe.ok()) {
        die("copy chain", exe.status());
    }
    return median_time(
        [&] {
            if (absl::Status status = (*exe)->run(); !status.ok()) {
                die("copy chain", status);
            }
        },
        repeat);
}

// One node `kind` on f32 inputs of `shapes` (dimension names d0, d1, ...), in a graph.
ir::Graph one_node(const std::string& kind, const ir::Attributes& attributes,
                   const std::vector<std::vector<int64_t>>& shapes) {
    ir::Graph graph;
    std::vector<ir::TensorId> inputs;
    for (size_t i = 0; i < shapes.size(); ++i) {
        std::vector<ir::Dim> dims;
        for (size_t d = 0; d < shapes[i].size(); ++d) {
            dims.push_back({absl::StrCat("d", d), shapes[i][d]});
        }
        absl::StatusOr<ir::TensorId> input =
            graph.add_input(absl::StrCat("x", i), ir::DType::f32, dims);
        if (!input.ok()) {
            die(kind, input.status());
        }
        inputs.push_back(*input);
    }
    absl::StatusOr<ir::TensorId> out = graph.add(kind, kind, attributes, inputs);
    if (!out.ok()) {
        die(kind, out.status());
    }
    return graph;
}

// A class's measured rate over the model's rate for it, at most 1 (the model's rates are the
// fastest kernels').
double fraction(double measured, double model) {
    return std::min(1.0, measured / model);
}

std::string hostname() {
    char name[256] = {};
    if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') {
        return "calibrated";
    }
    std::string host(name);
    // A topology name is free text, but keep it one plain word.
    for (char& c : host) {
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) {
            c = '-';
        }
    }
    return host;
}

std::string utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    gmtime_r(&now, &tm);
    char text[64];
    std::strftime(text, sizeof(text), "%Y-%m-%d %H:%M UTC", &tm);
    return text;
}

std::string cpu_model() {
    std::ifstream info("/proc/cpuinfo");
    std::string line;
    while (std::getline(info, line)) {
        if (line.rfind("model name", 0) == 0) {
            const size_t colon = line.find(':');
            if (colon != std::string::npos) {
                return line.substr(line.find_first_not_of(' ', colon + 1));
            }
        }
    }
    return "unknown CPU";
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    using namespace einsummable;
    std::string out;
    int devices = 8;
    bool quick = false;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "--out" && i + 1 < argc) {
            out = argv[++i];
        } else if (arg == "--devices" && i + 1 < argc) {
            devices = std::atoi(argv[++i]);
            if (devices < 1 || devices > 1024) {
                usage("--devices: expected a count from 1 to 1024");
            }
        } else if (arg == "--quick") {
            quick = true;
        } else {
            usage(absl::StrCat("unexpected argument '", arg, "'"));
        }
    }
    if (out.empty()) {
        usage("--out FILE is required");
    }
    const auto started = std::chrono::steady_clock::now();
    const int repeat = quick ? 3 : 5;
    // The backends first (the direct calls below run single-threaded like a worker's: the gemm
    // library runs on its caller's thread, kernels/cpu/gemm.h).
    std::shared_ptr<runtime::Backend> one = runtime::cpu::make_cpu_backend({1, 1});
    std::shared_ptr<runtime::Backend> two = runtime::cpu::make_cpu_backend({2, 1});
    std::vector<std::string> notes;

    // GEMM: f32 directly through run_f32; f32, f16 and bf16 as a p = 1 plan runs them.
    const std::vector<int> sizes =
        quick ? std::vector<int>{128, 256} : std::vector<int>{256, 512, 1024, 1280, 1536};
    const int large_from = quick ? 256 : 1024;
    const char* dtypes[] = {"f32", "f16", "bf16"};
    std::vector<double> large_direct, large_plan[3];
    std::string direct_line = "#   f32 run_f32:", plan_lines[3];
    for (int d = 0; d < 3; ++d) {
        plan_lines[d] = absl::StrCat("#   ", dtypes[d], " p=1 plan:");
    }
    for (int n : sizes) {
        double flops = 0.0, bytes = 0.0;
        const double t =
            time_direct(build(absl::StrCat("matmul:", n, ",dtype=f32")), repeat, &flops, &bytes);
        absl::StrAppend(&direct_line, absl::StrFormat(" %d: %.1f", n, flops / t / 1e9));
        if (n >= large_from) {
            large_direct.push_back(flops / t);
        }
        for (int d = 0; d < 3; ++d) {
            ir::Graph graph = build(absl::StrCat("matmul:", n, ",dtype=", dtypes[d]));
            const double work =
                graph.nodes()[0].op->flops(graph.nodes()[0].op->whole_spec().functions[0]);
            std::unique_ptr<runtime::Plan> plan = one_device_plan(std::move(graph), one);
            const double tp = time_execute(*plan, repeat);
            absl::StrAppend(&plan_lines[d], absl::StrFormat(" %d: %.1f", n, work / tp / 1e9));
            if (n >= large_from) {
                large_plan[d].push_back(work / tp);
            }
        }
    }
    const double peak_f32 = median(large_direct);
    const double peak_f16 = median(large_plan[1]);
    const double peak_bf16 = median(large_plan[2]);
    const double peak_f32_plan = median(large_plan[0]);

    // The same f32 GEMM on every core at once (each thread one device's worst case: the others
    // busy too), for the comment: where it is far below peak_f32, devices slow each other down
    // (shared caches, memory, a host's other tenants) and p-device plans run slower than
    // predicted.
    const unsigned busy = std::max(1u, std::min<unsigned>(std::thread::hardware_concurrency(),
                                                          static_cast<unsigned>(devices)));
    std::vector<double> together;
    {
        const ir::Graph graph = build(absl::StrCat("matmul:", sizes.back(), ",dtype=f32"));
        std::vector<double> rates(busy);
        std::vector<std::thread> threads;
        for (unsigned t = 0; t < busy; ++t) {
            threads.emplace_back([&, t] {
                double work = 0.0, bytes = 0.0;
                const double seconds = time_direct(graph, repeat, &work, &bytes);
                rates[t] = work / seconds;
            });
        }
        for (std::thread& thread : threads) {
            thread.join();
        }
        together = rates;
    }

    // Memory: an element-wise add far larger than the caches, and one that fits in them.
    const int64_t big = quick ? 1024 : 4096;
    double flops = 0.0, bytes = 0.0;
    auto add_graph = [](int64_t rows) {
        ir::Graph graph;
        const std::vector<ir::Dim> dims = {{"i", rows}, {"j", 4096}};
        absl::StatusOr<ir::TensorId> a = graph.add_input("a", ir::DType::f32, dims);
        absl::StatusOr<ir::TensorId> b = graph.add_input("b", ir::DType::f32, dims);
        absl::StatusOr<ir::TensorId> c = graph.add(
            "add", "einsum",
            ir::Attributes{{"equation", std::string("ij,ij->ij")}, {"join", std::string("add")}},
            {*a, *b});
        if (!c.ok()) {
            die("add", c.status());
        }
        return graph;
    };
    const double t_big = time_direct(add_graph(big), repeat, &flops, &bytes);
    const double hbm = bytes / t_big;
    const double big_bytes = bytes;
    const double t_small = time_direct(add_graph(16), quick ? 20 : 200, &flops, &bytes);
    const double cached = bytes / t_small;
    const double small_bytes = bytes;

    // Per kernel class: attention's FLOP/s against peak_f32 (the shape of the sim_check LLaMA
    // block's, causal, 8 query heads on 2 kv heads), rmsnorm's and softmax's bytes/s against
    // hbm_bandwidth (rows of 4096 far past the caches).
    const int64_t tokens = quick ? 256 : 1024;
    double attention_flops = 0.0, attention_bytes = 0.0;
    const double t_attention =
        time_direct(one_node("attention", ir::Attributes{{"causal", true}},
                             {{tokens, 8, 32}, {tokens, 2, 32}, {tokens, 2, 32}}),
                    repeat, &attention_flops, &attention_bytes);
    const double attention_rate = attention_flops / t_attention;
    const double attention_compute = fraction(attention_rate, peak_f32);
    double norm_flops = 0.0, norm_bytes = 0.0;
    const double t_norm = time_direct(one_node("rmsnorm", {}, {{big, 4096}, {4096}}), repeat,
                                      &norm_flops, &norm_bytes);
    const double norm_rate = norm_bytes / t_norm;
    const double norm_memory = fraction(norm_rate, hbm);
    double softmax_flops = 0.0, softmax_bytes = 0.0;
    const double t_softmax =
        time_direct(one_node("softmax", {}, {{big, 4096}}), repeat, &softmax_flops, &softmax_bytes);
    const double softmax_rate = softmax_bytes / t_softmax;

    // Copies between two virtual devices: fixed cost from tiny copies, bandwidth from large ones.
    const int short_chain = quick ? 50 : 200, long_chain = quick ? 500 : 2000;
    const double t_short = time_copy_chain(*two, short_chain, 16, repeat);
    const double t_long = time_copy_chain(*two, long_chain, 16, repeat);
    const double latency = std::max(0.0, (t_long - t_short) / (long_chain - short_chain));
    const int64_t copy_elements = quick ? (4 << 20) / 4 : (64 << 20) / 4; // 4 MiB / 64 MiB
    const int few = 2, many = quick ? 4 : 8;
    const double t_few = time_copy_chain(*two, few, copy_elements, repeat);
    const double t_many = time_copy_chain(*two, many, copy_elements, repeat);
    const double per_copy = (t_many - t_few) / (many - few);
    const double copy_bytes = 4.0 * static_cast<double>(copy_elements);
    const double link = copy_bytes / std::max(per_copy - latency, 1e-9);

    // Per-node overhead: tiny kernels in a chain on one device (one dep each), less what the
    // model already charges them for their bytes. Then the same chain with the memory plan's
    // reuse deps, for the cost of a dep, which the simulator does not model.
    struct Chain {
        double seconds = 0, nodes = 0, deps = 0, bytes = 0;
    };
    auto time_chain = [&](int nodes, bool save_all) {
        std::unique_ptr<runtime::Plan> plan = one_device_plan(tiny_chain(nodes, save_all), one);
        Chain chain;
        chain.seconds = time_execute(*plan, repeat);
        const physical::ExecGraph& exec = plan->exec_graph();
        chain.nodes = static_cast<double>(exec.nodes.size());
        for (const physical::ExecNode& node : exec.nodes) {
            chain.deps += static_cast<double>(node.deps.size());
            for (const std::vector<physical::BufferId>* ids : {&node.inputs, &node.outputs}) {
                for (physical::BufferId id : *ids) {
                    chain.bytes += static_cast<double>(exec.buffers[id].bytes());
                }
            }
        }
        return chain;
    };
    const int short_nodes = quick ? 50 : 200, long_nodes = quick ? 500 : 2000;
    const Chain short_saved = time_chain(short_nodes, true),
                long_saved = time_chain(long_nodes, true);
    const double launch = std::max(0.0, ((long_saved.seconds - short_saved.seconds) -
                                         (long_saved.bytes - short_saved.bytes) / hbm) /
                                            (long_saved.nodes - short_saved.nodes));
    const int reuse_nodes = quick ? 200 : 1000;
    const Chain short_reuse = time_chain(short_nodes, false),
                long_reuse = time_chain(reuse_nodes, false);
    const double per_dep = std::max(0.0, ((long_reuse.seconds - short_reuse.seconds) -
                                          (long_reuse.nodes - short_reuse.nodes) * launch) /
                                             (long_reuse.deps - short_reuse.deps));

    const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
    const double ram = static_cast<double>(pages) * static_cast<double>(page_size);
    const unsigned cores = std::thread::hardware_concurrency();
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

    std::string text = absl::StrCat(
        "# The CPU backend's virtual devices, calibrated by bench/cpu_calibrate",
        quick ? " --quick" : "", "\n# (docs/simulation.md, \"Is the simulator true?\").\n",
        "# Measured ", utc_now(), " on ", cpu_model(), ", ", cores, " cores, ",
        absl::StrFormat("%.1f", ram / 1e9), " GB RAM; took ", absl::StrFormat("%.1f", took),
        " s.\n", "# Every number is the median of ", repeat,
        " timed runs after one warm-up, single-threaded\n"
        "# (BLAS in the calling thread, as in a worker).\n",
        "# Predictions assume every virtual device has a core of its own: with more devices than\n"
        "# the ",
        cores, " cores here they share them and the plan runs slower than predicted.\n",
        "# GEMM GFLOP/s by square size N (N x N times N x N):\n", direct_line, "\n", plan_lines[0],
        "\n", plan_lines[1], "\n", plan_lines[2], "\n",
        absl::StrFormat(
            "# peak_* = the median over N >= %d; f16/bf16 through a p=1 plan (converted\n"
            "# to f32 at the kernel boundary); f32 through a plan: %.1f GFLOP/s.\n",
            large_from, peak_f32_plan / 1e9),
        absl::StrFormat("# f32 N = %d on %u threads at once: %s GFLOP/s each.\n", sizes.back(),
                        busy,
                        [&] {
                            std::string rates;
                            for (double rate : together) {
                                absl::StrAppend(&rates, rates.empty() ? "" : ", ",
                                                absl::StrFormat("%.1f", rate / 1e9));
                            }
                            return rates;
                        }()),
        absl::StrFormat("# hbm_bandwidth: einsum ij,ij->ij (add) through run_f32, %.0f MB read + "
                        "written;\n#   at %.0f kB (in cache) it reaches %.1f GB/s.\n",
                        big_bytes / 1e6, small_bytes / 1e3, cached / 1e9),
        absl::StrFormat("# latency: copy nodes of 64 B ping-ponging between two virtual devices, "
                        "slope %d -> %d copies.\n",
                        short_chain, long_chain),
        absl::StrFormat("# link_bandwidth: copy nodes of %.0f MiB between two virtual devices "
                        "(memcpy on the\n#   destination's worker), slope %d -> %d copies, less "
                        "the latency.\n",
                        copy_bytes / (1 << 20), few, many),
        absl::StrFormat("# launch_overhead: a p=1 plan of tiny kernels (add on 16 floats) in a "
                        "chain, every\n#   output saved (one dep per node), slope %.0f -> %.0f "
                        "nodes, less their bytes at hbm_bandwidth.\n",
                        short_saved.nodes, long_saved.nodes),
        absl::StrFormat("# Not in the model: each dep of a node costs %.1f ns more (the same chain "
                        "with the memory\n#   plan's reuse deps, %.0f -> %.0f deps).\n",
                        per_dep * 1e9, short_reuse.deps, long_reuse.deps),
        absl::StrFormat(
            "# Kernel classes (docs/topologies.md \"Kernel classes\"): gemm 1 (peak_f32 is its "
            "rate),\n#   elementwise memory 1 (hbm_bandwidth is its rate); attention "
            "%dx8x32 causal (GQA 8/2):\n#   %.1f GFLOP/s; rmsnorm %.0f MB: %.1f GB/s; "
            "softmax %.0f MB: %.1f GB/s\n#   (element-wise class, not fitted).\n",
            tokens, attention_rate / 1e9, norm_bytes / 1e6, norm_rate / 1e9, softmax_bytes / 1e6,
            softmax_rate / 1e9),
        "name: cpu-", hostname(), "\n", "gpus: ", devices, "\n", "kind: switch\n",
        absl::StrFormat("link_bandwidth: %.4g GB/s\n", link / 1e9),
        absl::StrFormat("hbm_bandwidth: %.4g GB/s\n", hbm / 1e9),
        absl::StrFormat("latency: %.4g us\n", latency * 1e6),
        absl::StrFormat("peak_f32: %.4g GFLOP/s\n", peak_f32 / 1e9),
        absl::StrFormat("peak_f16: %.4g GFLOP/s\n", peak_f16 / 1e9),
        absl::StrFormat("peak_bf16: %.4g GFLOP/s\n", peak_bf16 / 1e9),
        absl::StrFormat("memory: %.0f MiB           # physical RAM / %d\n",
                        ram / devices / (1 << 20), devices),
        "compute_efficiency: 1     # the peaks are measured rates\n",
        "memory_efficiency: 1      # hbm_bandwidth is a measured rate\n",
        absl::StrFormat("launch_overhead: %.4g us\n", launch * 1e6),
        "gemm_compute_efficiency: 1        # peak_f32 is the GEMM's rate\n",
        absl::StrFormat("attention_compute_efficiency: %-6.4g # attention FLOP/s / peak_f32\n",
                        attention_compute),
        "elementwise_memory_efficiency: 1  # hbm_bandwidth is the add's rate\n",
        absl::StrFormat("norm_memory_efficiency: %-6.4g       # rmsnorm bytes/s / hbm_bandwidth\n",
                        norm_memory));

    // The file must parse back (and sim_check reads it the same way).
    absl::StatusOr<exprog::Topology> parsed = exprog::parse_topology(text);
    if (!parsed.ok()) {
        die("the topology written does not parse", parsed.status());
    }
    std::ofstream file(out);
    file << text;
    file.close();
    if (!file) {
        usage(absl::StrCat("cannot write '", out, "'"));
    }
    std::printf("%s", text.c_str());
    std::fprintf(stderr, "cpu_calibrate: wrote %s (%.1f s)\n", out.c_str(), took);
    return 0;
}
