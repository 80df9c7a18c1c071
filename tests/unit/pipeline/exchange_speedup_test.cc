// What optimized exchange programs buy on the paper's dgx-v100 chains (bench/README.md "paper",
// "Optimized exchange helps on dgx-v100 chains"): chains A and B at their reference size, the
// bytes objective's DP plan on 8 dgx-v100 GPUs, whole atoms, synthesis seed 0 and the default
// budget — paper_bench --machines dgx-v100 --devices 8 --random 0 --max_chunks 0, its dp rows —
// compiled with naive and with optimized exchanges and simulated whole. Naive over optimized
// was 1.589x (A) and 2.089x (B) on 2026-12-06 (simulated); the test fails if either falls
// below 1.55x / 2.05x, e.g. because the search's skip, early stop, seeds or budget start to
// cost these plans. Chain A is sensitive to the seed (which of equally fast programs and
// placements its exchanges keep): seeds 1-7 give 1.40-1.46x, so a change of how seeds are
// derived can fail it as well. No exchange's search is skipped here (naive crosses the shared
// bridge, far from the lower bound), and no exchange is slower optimized than naive.

#include <string>

#include "compiler/physical/plan_simulation.h"
#include "compiler/physical/synthesis_cache.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::pipeline {
namespace {

constexpr int kDevices = 8;

Machine v100() {
    Machine machine;
    machine.backend = "test";
    machine.devices = kDevices;
    machine.topology = *exprog::builtin_topology("dgx-v100");
    return machine;
}

struct Simulated {
    double seconds = 0.0;
    physical::PhysicalPlan plan;
};

Simulated compile_and_simulate(const ir::Graph& graph, exprog::SynthesisMode schedule,
                               physical::SynthesisCache& cache) {
    Options options;
    options.devices = kDevices;
    options.objective = logical::Objective::bytes;
    options.schedule = schedule;
    options.synthesis_seed = 0;
    options.max_chunks = 0;
    options.cache = &cache;
    absl::StatusOr<CompiledPlan> compiled = compile(graph, options, v100());
    EXPECT_TRUE(compiled.ok()) << compiled.status();
    if (!compiled.ok()) {
        return {};
    }
    absl::StatusOr<physical::PlanSimulation> simulation =
        physical::simulate_plan(compiled->exec, *v100().topology);
    EXPECT_TRUE(simulation.ok()) << simulation.status();
    return {simulation.ok() ? simulation->predicted_s : 0.0, std::move(compiled->physical)};
}

TEST(ExchangeSpeedup, OptimizedKeepsItsLeadOnTheV100Chains) {
    struct Case {
        const char* workload;
        double least_speedup; // naive / optimized, simulated
    };
    for (const Case& c : {Case{"chain:A", 1.55}, Case{"chain:B", 2.05}}) {
        SCOPED_TRACE(c.workload);
        absl::StatusOr<ir::Graph> graph = workloads::by_name(c.workload);
        ASSERT_TRUE(graph.ok()) << graph.status();
        physical::SynthesisCache naive_cache;
        physical::SynthesisCache optimized_cache;
        const Simulated naive =
            compile_and_simulate(*graph, exprog::SynthesisMode::naive, naive_cache);
        const Simulated optimized =
            compile_and_simulate(*graph, exprog::SynthesisMode::optimized, optimized_cache);
        ASSERT_GT(optimized.seconds, 0.0);
        EXPECT_GE(naive.seconds / optimized.seconds, c.least_speedup)
            << "naive " << naive.seconds * 1e3 << " ms, optimized " << optimized.seconds * 1e3
            << " ms (simulated)";
        // Every operator exchange moves data and was searched; only an exchange with nothing
        // to move (chain B's saved output, held where it was computed) may be skipped.
        const physical::SynthesisCache::Stats stats = optimized_cache.stats();
        EXPECT_GT(stats.misses, 0);
        EXPECT_LE(stats.skipped, 1);
        int searched_and_won = 0;
        for (const physical::OperatorPlacement& op : optimized.plan.operators) {
            for (const physical::Exchange& exchange : op.exchanges) {
                EXPECT_LE(exchange.simulated_s, exchange.naive_simulated_s);
                searched_and_won += exchange.simulated_s < exchange.naive_simulated_s ? 1 : 0;
            }
        }
        EXPECT_GT(searched_and_won, 0);
    }
}

} // namespace
} // namespace einsummable::pipeline
