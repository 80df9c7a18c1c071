// decode_step_bench: does a decode step's work grow with the prompt? Measured on the CPU backend,
// side by side in one run (bench/README.md "decode_step").
//
//   in place  — one LLaMA block's decode step (workloads::llama_decode_step) with its key/value
//               caches resident and written in place (docs/runtime.md "Resident state"): one
//               plan, compiled once for a cache of --capacity keys, run with 100 and with 1000
//               keys cached (key_lengths). Only attention reads the cache, so the step should
//               cost little more at 1000 than at 100.
//   recompute — what the generation loop without caches does (docs/generation.md "The loop
//               today"): the whole block over 101 and 1001 tokens.
//
// Runs alternate between the sides (A B C D A B C D ...) so that noise hits all alike; medians
// are reported, and the ratios 1000 / 100. Usage: decode_step_bench [--repeat N] [--devices P]
// [--capacity C] (defaults 15, 1, 1024). Weights and activations are random (seed printed).

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
#include "compiler/workloads/llama.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"

namespace einsummable {
namespace {

using support::median;

constexpr uint64_t kSeed = 20261207;

[[noreturn]] void die(const std::string& what, const absl::Status& status) {
    std::fprintf(stderr, "decode_step_bench: %s: %s\n", what.c_str(),
                 std::string(status.message()).c_str());
    std::exit(1);
}

template <typename T>
T value_or_die(absl::StatusOr<T> value, const std::string& what) {
    if (!value.ok()) {
        die(what, value.status());
    }
    return *std::move(value);
}

// A LLaMA-shaped block small enough for two cores: d_model 512, 8 query and 4 kv heads of 64.
workloads::LlamaConfig config(std::vector<int64_t> sequence_lengths) {
    workloads::LlamaConfig c;
    c.d_model = 512;
    c.heads_q = 8;
    c.heads_kv = 4;
    c.d_head = 64;
    c.d_ff = 1536;
    c.dtype = ir::DType::f32;
    c.sequence_lengths = std::move(sequence_lengths);
    return c;
}

// Loads every floating-point input but the caches with random values (weights small, so the
// block stays finite).
void load_random(runtime::Plan& plan, std::mt19937_64& rng) {
    std::uniform_real_distribution<float> uniform(-0.05f, 0.05f);
    for (ir::TensorId id : plan.graph().inputs()) {
        const ir::GraphTensor& tensor = plan.graph().tensor(id);
        if (ir::is_integer(tensor.type.dtype) || plan.states().count(tensor.name)) {
            continue;
        }
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = uniform(rng);
        }
        const absl::Status loaded = plan.load(tensor.name, values);
        if (!loaded.ok()) {
            die(tensor.name, loaded);
        }
    }
}

// One step of the in-place plan with `cached` keys before it: its token at position `cached`.
void set_fill(runtime::Plan& plan, int64_t cached) {
    const auto at = static_cast<float>(cached);
    for (const auto& [name, value] : std::map<std::string, float>{
             {"positions", at}, {"slots", at}, {"key_lengths", at + 1.0f}}) {
        const absl::Status loaded = plan.load(name, std::vector<float>{value});
        if (!loaded.ok()) {
            die(name, loaded);
        }
    }
}

double seconds(const std::function<void()>& run) {
    const auto start = std::chrono::steady_clock::now();
    run();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void execute(runtime::Plan& plan) {
    const absl::Status status = plan.execute();
    if (!status.ok()) {
        die("execute", status);
    }
}

int main_bench(int argc, char** argv) {
    int repeat = 15;
    int devices = 1;
    int64_t capacity = 1024;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string flag = argv[i];
        if (flag == "--repeat") {
            repeat = std::atoi(argv[i + 1]);
        } else if (flag == "--devices") {
            devices = std::atoi(argv[i + 1]);
        } else if (flag == "--capacity") {
            capacity = std::atoll(argv[i + 1]);
        } else {
            std::fprintf(stderr, "decode_step_bench: unknown flag %s\n", flag.c_str());
            return 2;
        }
    }
    if (capacity < 1001) {
        std::fprintf(stderr, "decode_step_bench: --capacity must hold 1001 keys\n");
        return 2;
    }
    std::printf("seed %llu, %d device(s), capacity %lld, %d repeats\n",
                static_cast<unsigned long long>(kSeed), devices, static_cast<long long>(capacity),
                repeat);
    std::shared_ptr<runtime::Backend> backend = runtime::cpu::make_cpu_backend({devices, 1});
    runtime::CompileOptions options;
    options.devices = devices;
    options.seed = kSeed;
    std::mt19937_64 rng(kSeed);

    runtime::CompileOptions step_options = options;
    step_options.resident_inputs = {"k_cache", "v_cache"};
    std::unique_ptr<runtime::Plan> step = value_or_die(
        runtime::Plan::compile(
            value_or_die(workloads::llama_decode_step(config({1}), capacity), "step graph"),
            step_options, backend),
        "compile the decode step");
    load_random(*step, rng);
    std::map<int64_t, std::unique_ptr<runtime::Plan>> whole;
    for (int64_t tokens : {101, 1001}) {
        whole[tokens] =
            value_or_die(runtime::Plan::compile(
                             value_or_die(workloads::llama_block(config({tokens})), "block graph"),
                             options, backend),
                         "compile the block");
        load_random(*whole[tokens], rng);
    }

    std::map<std::string, std::vector<double>> times;
    for (int r = 0; r < repeat + 1; ++r) { // the first round warms up and is dropped
        std::map<std::string, double> round;
        for (int64_t cached : {100, 1000}) {
            set_fill(*step, cached);
            round["in place " + std::to_string(cached)] = seconds([&] { execute(*step); });
            round["recompute " + std::to_string(cached)] =
                seconds([&] { execute(*whole[cached + 1]); });
        }
        if (r > 0) {
            for (const auto& [name, s] : round) {
                times[name].push_back(s);
            }
        }
    }
    std::printf("| side | 100 cached (ms) | 1000 cached (ms) | 1000 / 100 |\n|---|---|---|---|\n");
    for (const char* side : {"in place", "recompute"}) {
        const double at_100 = median(times[std::string(side) + " 100"]) * 1e3;
        const double at_1000 = median(times[std::string(side) + " 1000"]) * 1e3;
        std::printf("| %s | %.3f | %.3f | %.2f |\n", side, at_100, at_1000, at_1000 / at_100);
    }
    std::printf("recompute / in place at 1000 cached: %.1f\n",
                median(times["recompute 1000"]) / median(times["in place 1000"]));
    return 0;
}

} // namespace
} // namespace einsummable

int main(int argc, char** argv) {
    return einsummable::main_bench(argc, argv);
}
