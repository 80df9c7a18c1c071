// Planning time of the logical optimiser: the bytes programme (objective bytes; target: 80 LLaMA
// blocks at p = 8 in under 2 s on one core) and the time programme (objective time, the default,
// on dgx-h100-like switches of `devices` GPUs; target: 80 blocks at p = 8 under 0.5 s). The
// graph is built outside the timed region; candidates, the programme and the plan's costs are
// inside. Run: build/bin/plan_bench (medians of 3 repetitions).

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_dp.h"
#include "compiler/workloads/workloads.h"

namespace einsummable {
namespace {

void plan_llama_stack(benchmark::State& state) {
    const int blocks = static_cast<int>(state.range(0));
    const int64_t devices = state.range(1);
    absl::StatusOr<ir::Graph> graph =
        workloads::by_name(absl::StrCat("llama-stack:blocks=", blocks, ",tokens=8192"));
    if (!graph.ok()) {
        state.SkipWithError(std::string(graph.status().message()).c_str());
        return;
    }
    for (auto _ : state) {
        absl::StatusOr<logical::LogicalPlan> plan =
            logical::optimize(*graph, {devices, logical::Planner::dp, 0});
        if (!plan.ok()) {
            state.SkipWithError(std::string(plan.status().message()).c_str());
            return;
        }
        benchmark::DoNotOptimize(plan->total);
    }
    state.counters["operators"] = static_cast<double>(graph->nodes().size());
}

void plan_llama_stack_by_time(benchmark::State& state) {
    const int blocks = static_cast<int>(state.range(0));
    const int64_t devices = state.range(1);
    absl::StatusOr<ir::Graph> graph =
        workloads::by_name(absl::StrCat("llama-stack:blocks=", blocks, ",tokens=8192"));
    absl::StatusOr<exprog::Topology> h100 = exprog::builtin_topology("dgx-h100");
    absl::StatusOr<exprog::Topology> topology =
        !h100.ok() || devices <= h100->num_gpus()
            ? h100
            : exprog::resized_switch(*h100, static_cast<int>(devices));
    if (!graph.ok() || !topology.ok()) {
        state.SkipWithError(
            std::string((graph.ok() ? topology.status() : graph.status()).message()).c_str());
        return;
    }
    for (auto _ : state) {
        absl::StatusOr<logical::LogicalPlan> plan =
            logical::optimize_by_time(*graph, {devices, logical::Planner::dp, 0}, *topology);
        if (!plan.ok()) {
            state.SkipWithError(std::string(plan.status().message()).c_str());
            return;
        }
        benchmark::DoNotOptimize(plan->total);
    }
    state.counters["operators"] = static_cast<double>(graph->nodes().size());
}

BENCHMARK(plan_llama_stack_by_time)
    ->ArgNames({"blocks", "devices"})
    ->Args({32, 8})
    ->Args({80, 8})
    ->Args({80, 64})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

BENCHMARK(plan_llama_stack)
    ->ArgNames({"blocks", "devices"})
    ->Args({32, 8})
    ->Args({32, 64})
    ->Args({80, 8})
    ->Args({80, 64})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1)
    ->Repetitions(3)
    ->ReportAggregatesOnly(true);

} // namespace
} // namespace einsummable

BENCHMARK_MAIN();
