// The exchange-program cache (physical/synthesis_cache.h): identical exchanges synthesise once,
// a cached body is byte-for-byte what a fresh search gives, the byte bound evicts least recently
// used first; and the search's skip (exprog/synthesis.h) where naive is at the lower bound.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/topology.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/physical/synthesis_cache.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"

namespace einsummable::physical {
namespace {

exprog::Topology builtin(const char* name) {
    return *exprog::builtin_topology(name);
}

std::string stack(int blocks) {
    return absl::StrCat("llama-stack:blocks=", blocks,
                        ",tokens=64,d_model=64,heads_q=8,heads_kv=2,d_head=8,d_ff=224");
}

struct Compiled {
    PhysicalPlan plan;
    SynthesisCache::Stats stats;
};

Compiled compile(const std::string& workload, const exprog::Topology& topology,
                 SynthesisCache& cache, int iterations = 60) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<logical::LogicalPlan> logical =
        logical::optimize(*graph, {8, logical::Planner::dp, 0});
    EXPECT_TRUE(logical.ok()) << logical.status();
    PhysicalOptions options;
    options.synthesis.iterations = iterations;
    options.cache = &cache;
    absl::StatusOr<PhysicalPlan> plan = compile_physical(*graph, *logical, topology, options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return {*std::move(plan), cache.stats()};
}

// Every exchange's program and membership as text, in plan order.
std::vector<std::string> programs(const PhysicalPlan& plan) {
    std::vector<std::string> out;
    auto add = [&](const Exchange& exchange) {
        std::string text = exprog::print_program(exchange.program);
        for (const auto& [partition, members] : exchange.membership) {
            absl::StrAppend(&text, partition, ":", absl::StrJoin(members, ","), "\n");
        }
        out.push_back(std::move(text));
    };
    for (const OperatorPlacement& op : plan.operators) {
        for (const Exchange& exchange : op.exchanges) {
            add(exchange);
        }
    }
    for (const Exchange& exchange : plan.saved) {
        add(exchange);
    }
    return out;
}

// Blocks after the second add no new exchange: each of their exchanges is one an earlier block
// synthesised (the first block reads graph inputs, the second the first block's output).
TEST(SynthesisCache, IdenticalLayersSynthesiseOnce) {
    const exprog::Topology v100 = builtin("dgx-v100");
    SynthesisCache two_cache;
    const Compiled two = compile(stack(2), v100, two_cache);
    SynthesisCache four_cache;
    const Compiled four = compile(stack(4), v100, four_cache);
    EXPECT_GT(two.stats.misses, 0);
    EXPECT_EQ(four.stats.misses, two.stats.misses);
    EXPECT_GT(four.stats.hits, two.stats.hits);
    // A later compile of the same graph searches nothing.
    const Compiled again = compile(stack(4), v100, four_cache);
    EXPECT_EQ(again.stats.misses, four.stats.misses);
    // Without a cache, compile_physical uses one of its own: the same plan.
    absl::StatusOr<ir::Graph> graph = workloads::by_name(stack(4));
    ASSERT_TRUE(graph.ok());
    absl::StatusOr<logical::LogicalPlan> logical =
        logical::optimize(*graph, {8, logical::Planner::dp, 0});
    ASSERT_TRUE(logical.ok());
    PhysicalOptions options;
    options.synthesis.iterations = 60;
    absl::StatusOr<PhysicalPlan> own = compile_physical(*graph, *logical, v100, options);
    ASSERT_TRUE(own.ok()) << own.status();
    EXPECT_EQ(programs(*own), programs(four.plan));
}

// A cache that keeps nothing (a byte bound of 0) makes every exchange a fresh search: the
// programs are byte-for-byte those a full cache gives, hits included.
TEST(SynthesisCache, CachedProgramsAreThoseAFreshSearchGives) {
    for (const char* machine : {"dgx-v100", "dgx-a100"}) {
        const exprog::Topology topology = builtin(machine);
        SynthesisCache cached;
        const Compiled with = compile(stack(3), topology, cached);
        SynthesisCache nothing(0);
        const Compiled fresh = compile(stack(3), topology, nothing);
        EXPECT_GT(with.stats.hits, 0) << machine;
        EXPECT_EQ(fresh.stats.hits, 0) << machine;
        EXPECT_EQ(fresh.stats.entries, 0) << machine;
        EXPECT_EQ(fresh.stats.evictions, fresh.stats.misses) << machine;
        EXPECT_EQ(programs(with.plan), programs(fresh.plan)) << machine;
    }
}

SynthesisCache::Body body_with_actions(int actions) {
    SynthesisCache::Body body;
    body.program.gpus = {0, 1};
    for (int i = 0; i < actions; ++i) {
        body.program.actions.push_back(
            {{"a0_0"}, exprog::Site::of_gpu(0), {{exprog::Site::of_gpu(1)}}, {}});
    }
    return body;
}

TEST(SynthesisCache, TheByteBoundEvictsTheLeastRecentlyUsed) {
    const SynthesisCache::Body body = body_with_actions(10);
    const int64_t one = SynthesisCache::entry_bytes("k1", body);
    ASSERT_GT(one, 0);
    SynthesisCache cache(2 * one + one / 2); // room for two entries
    cache.insert("k1", body);
    cache.insert("k2", body);
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_TRUE(cache.find("k1").has_value()); // k1 is now the most recently used
    cache.insert("k3", body);
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_FALSE(cache.find("k2").has_value());
    EXPECT_TRUE(cache.find("k1").has_value());
    EXPECT_TRUE(cache.find("k3").has_value());
    const SynthesisCache::Stats stats = cache.stats();
    EXPECT_EQ(stats.evictions, 1);
    EXPECT_EQ(stats.hits, 3);
    EXPECT_EQ(stats.misses, 1);
    EXPECT_EQ(stats.entries, 2);
    EXPECT_EQ(stats.bytes, 2 * one);
    // An entry larger than the bound is not kept.
    cache.insert("big", body_with_actions(100));
    EXPECT_FALSE(cache.find("big").has_value());
    EXPECT_LE(cache.stats().bytes, cache.max_bytes());
}

// The predicted time of `workload`'s plan on `machine`, exchanges synthesised with `synthesis`.
double predicted(const std::string& workload, const char* machine,
                 exprog::SynthesisOptions synthesis, SynthesisCache& cache) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<logical::LogicalPlan> logical =
        logical::optimize(*graph, {8, logical::Planner::dp, 0});
    EXPECT_TRUE(logical.ok()) << logical.status();
    PhysicalOptions options;
    options.synthesis = synthesis;
    options.cache = &cache;
    absl::StatusOr<SimulatedPlan> simulated =
        compile_and_simulate(*graph, *logical, builtin(machine), options);
    EXPECT_TRUE(simulated.ok()) << simulated.status();
    return simulated.ok() ? simulated->simulation.predicted_s : 0.0;
}

// On a switch the naive program of an operator exchange is often at the lower bound, so its
// search is skipped. On dgx-v100's links naive programs cross the shared bridge, far from the
// bound: chains A and B keep their search, and optimized over naive is what it is without the
// skip (an exchange skipped there gives up at most the skip margin).
TEST(SynthesisCache, TheSearchIsSkippedOnSwitchesNotOnV100Chains) {
    for (const char* machine : {"dgx-a100", "dgx-h100"}) {
        SynthesisCache cache;
        const Compiled compiled = compile(stack(2), builtin(machine), cache);
        EXPECT_GT(compiled.stats.skipped, 0) << machine;
    }
    for (const char* chain : {"chain:A,scale=16", "chain:B,scale=16"}) {
        exprog::SynthesisOptions optimized = default_exchange_synthesis();
        optimized.iterations = 100;
        exprog::SynthesisOptions unskipped = optimized;
        unskipped.skip_margin = -1.0;
        exprog::SynthesisOptions naive = optimized;
        naive.mode = exprog::SynthesisMode::naive;
        SynthesisCache a;
        SynthesisCache b;
        SynthesisCache c;
        const double with_skip = predicted(chain, "dgx-v100", optimized, a);
        const double without = predicted(chain, "dgx-v100", unskipped, b);
        const double naive_s = predicted(chain, "dgx-v100", naive, c);
        EXPECT_LT(a.stats().skipped, a.stats().misses) << chain;
        EXPECT_NEAR(naive_s / with_skip, naive_s / without, 0.01 * naive_s / without) << chain;
        EXPECT_GT(naive_s / with_skip, 1.3) << chain;
    }
}

} // namespace
} // namespace einsummable::physical
