// Planning time of the logical optimiser (issue: 80 LLaMA blocks at p = 8 in under 2 s on one
// core). The graph is built outside the timed region; candidates, the dynamic programme and the
// plan's costs are inside. Run: build/bin/plan_bench (medians of 3 repetitions).

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "compiler/logical/optimizer.h"
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
