// runtime_bench: the CPU runtime against the same computation without it, side by side in one
// run (bench/README.md, "runtime_bench").
//
//   overhead — a p = 1 plan's execute() against "direct": the graph's operators called one
//              after another on whole tensors with the same kernels (kernels/cpu run_f32,
//              the gemm library single-threaded), buffers allocated once. Target: ratio <= 1.1.
//   speedup  — a compute-heavy matrix chain at p = 2 against p = 1 on this 2-core machine.
//              Target: >= 1.7.
// Runs alternate between the two sides (A B A B ...) so that noise hits both alike; medians are
// reported. Usage: runtime_bench [--repeat N] (default 15).

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "compiler/support/statistics.h"
#include "compiler/workloads/by_name.h"
#include "kernels/cpu/kernels.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"

namespace einsummable {
namespace {

using support::median;

constexpr uint64_t kSeed = 20261130;

[[noreturn]] void die(const std::string& what, const absl::Status& status) {
    std::fprintf(stderr, "runtime_bench: %s: %s\n", what.c_str(),
                 std::string(status.message()).c_str());
    std::exit(1);
}

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    if (!graph.ok()) {
        die(name, graph.status());
    }
    return *std::move(graph);
}

std::map<std::string, std::vector<float>> random_inputs(const ir::Graph& graph) {
    std::mt19937_64 rng(kSeed);
    std::map<std::string, std::vector<float>> inputs;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        std::uniform_real_distribution<float> uniform(-0.1f, 0.1f);
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = uniform(rng);
        }
        inputs.emplace(tensor.name, std::move(values));
    }
    return inputs;
}

std::unique_ptr<runtime::Plan> compile(const std::string& name, int devices,
                                       const std::map<std::string, std::vector<float>>& inputs) {
    runtime::CompileOptions options;
    options.devices = devices;
    options.seed = kSeed;
    options.synthesis_iterations = 100;
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan = runtime::Plan::compile(
        build(name), options, runtime::cpu::make_cpu_backend({options.devices, 1}));
    if (!plan.ok()) {
        die(name, plan.status());
    }
    for (const auto& [tensor, values] : inputs) {
        if (absl::Status status = (*plan)->load(tensor, values); !status.ok()) {
            die(tensor, status);
        }
    }
    return *std::move(plan);
}

// The graph's operators on whole f32 tensors, one after another, with the runtime's kernels.
class Direct {
public:
    Direct(const std::string& name, const std::map<std::string, std::vector<float>>& inputs)
        : graph_(build(name)) {
        values_.resize(graph_.tensors().size());
        for (size_t t = 0; t < graph_.tensors().size(); ++t) {
            const ir::GraphTensor& tensor = graph_.tensor(static_cast<ir::TensorId>(t));
            auto it = inputs.find(tensor.name);
            values_[t] =
                it != inputs.end() ? it->second : std::vector<float>(tensor.type.elements());
        }
    }

    void run() {
        for (const ir::GraphNode& node : graph_.nodes()) {
            const ir::JoinAggSpec spec = node.op->whole_spec();
            std::vector<const float*> in;
            std::vector<float*> out;
            for (ir::TensorId t : node.inputs) {
                in.push_back(values_[t].data());
            }
            for (ir::TensorId t : node.outputs) {
                out.push_back(values_[t].data());
            }
            if (absl::Status status = kernels::cpu::run_f32(*node.op, spec.functions[0], in, out);
                !status.ok()) {
                die(node.name, status);
            }
        }
    }

private:
    ir::Graph graph_;
    std::vector<std::vector<float>> values_;
};

double seconds(const std::function<void()>& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Alternates a and b `repeat` times after one warm-up each; returns their medians.
std::pair<double, double> side_by_side(const std::function<void()>& a,
                                       const std::function<void()>& b, int repeat) {
    a();
    b();
    std::vector<double> ta, tb;
    for (int r = 0; r < repeat; ++r) {
        ta.push_back(seconds(a));
        tb.push_back(seconds(b));
    }
    return {median(ta), median(tb)};
}

void execute(runtime::Plan& plan) {
    if (absl::Status status = plan.execute(); !status.ok()) {
        die("execute", status);
    }
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    using namespace einsummable;
    int repeat = 15;
    if (argc == 3 && std::strcmp(argv[1], "--repeat") == 0) {
        repeat = std::max(1, std::atoi(argv[2]));
    }
    std::printf("| comparison | workload | A (ms) | B (ms) | ratio |\n|---|---|---|---|---|\n");
    for (const std::string name :
         {"ffn:tokens=1024,d_model=512,d_ff=2048",
          "llama-block:seqs=4x128,d_model=256,heads_q=8,heads_kv=2,d_head=32,d_ff=768,"
          "dtype=f32"}) {
        const auto inputs = random_inputs(build(name));
        std::unique_ptr<runtime::Plan> plan = compile(name, 1, inputs);
        Direct direct(name, inputs);
        const auto [with, without] =
            side_by_side([&] { execute(*plan); }, [&] { direct.run(); }, repeat);
        std::printf("| overhead: p=1 plan (A) / direct (B) | %s | %.3f | %.3f | %.3f |\n",
                    name.c_str(), with * 1e3, without * 1e3, with / without);
    }
    const std::string chain = "chain:B,scale=8,dtype=f32";
    const auto inputs = random_inputs(build(chain));
    std::unique_ptr<runtime::Plan> one = compile(chain, 1, inputs);
    std::unique_ptr<runtime::Plan> two = compile(chain, 2, inputs);
    const auto [t1, t2] = side_by_side([&] { execute(*one); }, [&] { execute(*two); }, repeat);
    std::printf("| speedup: p=1 (A) / p=2 (B) | %s | %.3f | %.3f | %.3f |\n", chain.c_str(),
                t1 * 1e3, t2 * 1e3, t1 / t2);
    return 0;
}
