// Synthesis of exchange programs from preambles: valid, never slower than naive in the
// simulator, deterministic per seed.

#include <algorithm>
#include <iostream>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/collectives.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/exprog/synthesis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/cancel_after.h"
#include "tests/unit/exprog/parse_or_fail.h"

namespace einsummable::exprog {
namespace {

using ::testing::HasSubstr;

Program parse(const std::string& text) {
    return testing::parse_or_fail(text);
}

Topology builtin(const char* name) {
    return *builtin_topology(name);
}

const char* kFourGpusTotal = R"(
GPUS: 0, 1, 2, 3
IN: A @ 0
IN: B @ 1
IN: C @ 2
IN: D @ 3
OUT: A+B+C+D @ 0, 1, 2, 3
)";

const char* kSizePartitions = R"(
GPUS: 0, 1, 2, 3, 4, 5, 6, 7
PARTITIONS: G1 {size 4}, G2 {size 4}
IN: A @ 1
IN: A @ 5
IN: B @ 2
IN: B @ 6
OUT: A @ G1
OUT: B @ G2
)";

// The synthesised program is valid under the membership found, and simulating it again gives
// the reported time.
void expect_consistent(const SynthesisResult& result, const Topology& topology) {
    EXPECT_TRUE(check_with_membership(result.program, result.membership).ok())
        << print_program(result.program);
    absl::StatusOr<ProgramSimulation> simulation =
        simulate_program(result.program, result.membership, topology);
    ASSERT_TRUE(simulation.ok()) << simulation.status();
    EXPECT_DOUBLE_EQ(simulation->result.makespan_s, result.simulated_s);
    // It prints and parses back to the same program.
    EXPECT_EQ(parse(print_program(result.program)), result.program);
}

TEST(Synthesis, NaiveGathersEveryAtomAtEveryConsumer) {
    const Topology a100 = builtin("dgx-a100");
    absl::StatusOr<SynthesisResult> naive =
        synthesize(parse(kFourGpusTotal), a100, {SynthesisMode::naive, 0, 0});
    ASSERT_TRUE(naive.ok()) << naive.status();
    expect_consistent(*naive, a100);
    // Each atom multicast to the three GPUs lacking it, then a local aggregation at each GPU.
    EXPECT_EQ(naive->program.actions.size(), 8u) << print_program(naive->program);
    EXPECT_EQ(naive->simulated_s, naive->naive_simulated_s);
}

TEST(Synthesis, OptimizedIsValidAndNeverSlowerThanNaive) {
    for (const char* topology_name : {"dgx-a100", "dgx-h100", "dgx-v100"}) {
        const Topology topology = builtin(topology_name);
        for (const char* text : {kFourGpusTotal, kSizePartitions}) {
            SCOPED_TRACE(std::string(topology_name) + text);
            absl::StatusOr<SynthesisResult> optimized =
                synthesize(parse(text), topology, {SynthesisMode::optimized, 1, 150});
            ASSERT_TRUE(optimized.ok()) << optimized.status();
            expect_consistent(*optimized, topology);
            EXPECT_LE(optimized->simulated_s, optimized->naive_simulated_s);
            EXPECT_GT(optimized->candidates, 1);
        }
    }
}

// The checks of one synthesis of `preamble`: exchange_lower_bound is below naive and
// optimized, optimized is never slower than naive, a skipped search returns naive after one
// candidate, a search that reached the bound stopped there, and without the skip the search
// finds nothing better than skip_margin below what the skip gave.
void expect_bounded_and_never_slower(const Program& preamble, const Topology& topology,
                                     const SynthesisOptions& options) {
    constexpr double kEpsilon = 1e-9;
    const double bound = exchange_lower_bound(preamble, topology);
    absl::StatusOr<SynthesisResult> optimized = synthesize(preamble, topology, options);
    ASSERT_TRUE(optimized.ok()) << optimized.status();
    expect_consistent(*optimized, topology);
    EXPECT_EQ(optimized->lower_bound_s, bound);
    EXPECT_GT(bound, 0.0);
    EXPECT_GE(optimized->naive_simulated_s, bound * (1.0 - kEpsilon));
    EXPECT_GE(optimized->simulated_s, bound * (1.0 - kEpsilon));
    EXPECT_LE(optimized->simulated_s, optimized->naive_simulated_s);
    if (optimized->skipped) {
        EXPECT_EQ(optimized->candidates, 1);
        EXPECT_LE(optimized->naive_simulated_s, bound * (1.0 + options.skip_margin));
    }
    if (optimized->reached_bound) {
        EXPECT_LE(optimized->simulated_s, bound * (1.0 + kEpsilon));
    }
    SynthesisOptions full = options;
    full.skip_margin = -1.0;
    absl::StatusOr<SynthesisResult> searched = synthesize(preamble, topology, full);
    ASSERT_TRUE(searched.ok()) << searched.status();
    EXPECT_FALSE(searched->skipped);
    EXPECT_LE(searched->simulated_s, searched->naive_simulated_s);
    EXPECT_GE(searched->simulated_s * (1.0 + options.skip_margin), optimized->simulated_s);
}

// `preamble` as the physical compiler declares an operator's exchange: each destination GPU g
// a partition F<g> of size 1, whose GPU the search chooses (exclusive: one partition a GPU).
Program with_placed_destinations(Program preamble) {
    std::set<int> destinations;
    for (OutDecl& out : preamble.outs) {
        for (Site& site : out.sites) {
            destinations.insert(site.gpu);
            site = Site::of_partition(absl::StrCat("F", site.gpu));
        }
    }
    for (int gpu : destinations) {
        Partition partition;
        partition.name = absl::StrCat("F", gpu);
        partition.size = 1;
        preamble.partitions.push_back(std::move(partition));
    }
    return preamble;
}

// On two DGX H100 nodes the naive all-gather sends every GPU's part across to each GPU of the
// other node, eight flows into each NIC; the rail trees (rail_tree) cross once per part on the
// source's rail and fan out over the switch, which the search must find: at least 3x faster than
// naive and within 1.25x of the bound (simulated).
TEST(Synthesis, ClusterAllGatherCrossesOncePerPartOnItsRail) {
    const Topology topology = builtin("dgx-h100-2nodes");
    const Program preamble = collective_preamble(Collective::all_gather, 16, 1e8, 1);
    SynthesisOptions options{SynthesisMode::optimized, 5, 20};
    options.max_chunks = 0;
    absl::StatusOr<SynthesisResult> result = synthesize(preamble, topology, options);
    ASSERT_TRUE(result.ok()) << result.status();
    const double bound = collective_lower_bound(Collective::all_gather, 16, 1e8, topology);
    EXPECT_LE(result->simulated_s * 3.0, result->naive_simulated_s);
    EXPECT_LE(result->simulated_s, 1.25 * bound) << result->simulated_s / bound;
}

// Pipelined on two DGX H100 nodes, with the NIC's sends ordered apart from the switch's
// (order_sends): the all-gather, the all-reduce and the reduce-scatter (its root's last hops
// refined 2 times) come within 1.10x of their bounds (bench/README.md "Clusters" has them at
// 1 GB).
TEST(Synthesis, ClusterCollectivesPipelineTheirNicSends) {
    const Topology topology = builtin("dgx-h100-2nodes");
    for (const auto& [collective, within] :
         std::vector<std::pair<Collective, double>>{{Collective::all_gather, 1.10},
                                                    {Collective::all_reduce, 1.10},
                                                    {Collective::reduce_scatter, 1.10}}) {
        SCOPED_TRACE(collective_name(collective));
        const int atoms = collective == Collective::all_gather ? 8 : 16;
        const Program preamble = collective_preamble(collective, 16, 1e9, atoms);
        SynthesisOptions options{SynthesisMode::optimized, 5, 20};
        options.max_chunks = 8;
        absl::StatusOr<SynthesisResult> result = synthesize(preamble, topology, options);
        ASSERT_TRUE(result.ok()) << result.status();
        const double bound = collective_lower_bound(collective, 16, 1e9, topology);
        EXPECT_LE(result->simulated_s, within * bound) << result->simulated_s / bound;
    }
}

// On every built-in topology, for the four collectives: chunked (max_chunks 4) with the
// destinations fixed, and as the physical compiler synthesises operator exchanges (whole atoms,
// destinations placed by the search on distinct GPUs).
TEST(Synthesis, TheBoundHoldsAndOptimizedIsNeverSlowerThanNaive) {
    for (const std::string& name : builtin_topology_names()) {
        const Topology topology = builtin(name.c_str());
        const int gpus = std::min(8, topology.num_gpus());
        for (Collective collective : {Collective::all_gather, Collective::reduce_scatter,
                                      Collective::all_reduce, Collective::all_to_all}) {
            const Program preamble = collective_preamble(collective, gpus, 1e8, 2);
            {
                SCOPED_TRACE(absl::StrCat(name, " ", collective_name(collective), ", chunks"));
                SynthesisOptions chunked{SynthesisMode::optimized, 5, 60};
                chunked.max_chunks = 4;
                expect_bounded_and_never_slower(preamble, topology, chunked);
            }
            {
                SCOPED_TRACE(absl::StrCat(name, " ", collective_name(collective), ", placed"));
                SynthesisOptions operator_exchange{SynthesisMode::optimized, 5, 60};
                operator_exchange.max_chunks = 0;
                operator_exchange.exclusive_partitions = true;
                const Program placed = with_placed_destinations(preamble);
                expect_bounded_and_never_slower(placed, topology, operator_exchange);
                absl::StatusOr<SynthesisResult> result =
                    synthesize(placed, topology, operator_exchange);
                ASSERT_TRUE(result.ok()) << result.status();
                std::set<int> used;
                for (const auto& [partition, members] : result->membership) {
                    ASSERT_EQ(members.size(), 1u) << partition;
                    EXPECT_TRUE(used.insert(members.front()).second) << partition;
                }
            }
        }
    }
}

// On a switch an all-gather's naive program (every GPU multicasts its part) is at the bound: no
// search. On dgx-v100 naive sends cross the shared bridge: the search runs and wins.
TEST(Synthesis, SkippedWhereNaiveIsAtTheBound) {
    const Program preamble = collective_preamble(Collective::all_gather, 8, 1e9, 1);
    absl::StatusOr<SynthesisResult> a100 =
        synthesize(preamble, builtin("dgx-a100"), {SynthesisMode::optimized, 0, 600});
    ASSERT_TRUE(a100.ok()) << a100.status();
    EXPECT_TRUE(a100->skipped);
    EXPECT_EQ(a100->candidates, 1);
    EXPECT_EQ(a100->simulated_s, a100->naive_simulated_s);
    absl::StatusOr<SynthesisResult> v100 =
        synthesize(preamble, builtin("dgx-v100"), {SynthesisMode::optimized, 0, 600});
    ASSERT_TRUE(v100.ok()) << v100.status();
    EXPECT_FALSE(v100->skipped);
    EXPECT_LT(v100->simulated_s, v100->naive_simulated_s / 1.5);
    // Relays may pass through GPUs the preamble does not list: two unlinked GPUs of dgx-v100
    // alone still search, and route around the bridge.
    const Program pair = parse("GPUS: 0, 5\nIN: A @ 0 (size: 100 MB)\nOUT: A @ 5\n");
    absl::StatusOr<SynthesisResult> relayed =
        synthesize(pair, builtin("dgx-v100"), {SynthesisMode::optimized, 0, 200});
    ASSERT_TRUE(relayed.ok()) << relayed.status();
    EXPECT_FALSE(relayed->skipped);
    EXPECT_LT(relayed->simulated_s, relayed->naive_simulated_s);
}

// The budget follows the gap between naive and the bound. The dgx-v100 all-gather is far from
// its bound (naive crosses the shared bridge): all of iterations. The same exchange, searched as
// if full_budget_gap were twice its gap, gets half of it, and at eight times its gap the floor
// (a quarter); each tries fewer candidates than the wider budget, and is still never slower than
// naive. On a switch the all-reduce (whose bound ignores the sums: far below) gets it all too.
TEST(Synthesis, TheBudgetFollowsTheGap) {
    const Program preamble = collective_preamble(Collective::all_gather, 8, 1e9, 1);
    const Topology v100 = builtin("dgx-v100");
    SynthesisOptions options{SynthesisMode::optimized, 0, 400};
    options.max_chunks = 0; // candidates: naive, at most four starting points, at most the budget
    absl::StatusOr<SynthesisResult> wide = synthesize(preamble, v100, options);
    ASSERT_TRUE(wide.ok()) << wide.status();
    const double gap = (wide->naive_simulated_s - wide->lower_bound_s) / wide->lower_bound_s;
    EXPECT_GT(gap, options.full_budget_gap);
    EXPECT_EQ(wide->budget, 400);
    ASSERT_FALSE(wide->reached_bound);
    // A rewrite that does not apply spends budget without a simulation.
    EXPECT_LE(wide->candidates, 1 + 4 + 400);
    int previous_candidates = wide->candidates;
    for (const auto& [full_over_gap, expected_budget] :
         std::vector<std::pair<double, int>>{{2.0, 200}, {8.0, 100}}) {
        SCOPED_TRACE(absl::StrCat("full_budget_gap = ", full_over_gap, " x gap"));
        SynthesisOptions narrow = options;
        narrow.full_budget_gap = full_over_gap * gap;
        absl::StatusOr<SynthesisResult> result = synthesize(preamble, v100, narrow);
        ASSERT_TRUE(result.ok()) << result.status();
        EXPECT_EQ(result->budget, expected_budget);
        EXPECT_LE(result->candidates, 1 + 4 + expected_budget);
        EXPECT_LT(result->candidates, previous_candidates);
        EXPECT_LE(result->simulated_s, result->naive_simulated_s);
        previous_candidates = result->candidates;
    }
    // 0: every search gets all of iterations, whatever its gap.
    SynthesisOptions flat = options;
    flat.full_budget_gap = 0.0;
    absl::StatusOr<SynthesisResult> all = synthesize(preamble, v100, flat);
    ASSERT_TRUE(all.ok()) << all.status();
    EXPECT_EQ(all->budget, 400);
    const Program all_reduce = collective_preamble(Collective::all_reduce, 8, 1e9, 1);
    absl::StatusOr<SynthesisResult> a100 = synthesize(all_reduce, builtin("dgx-a100"), options);
    ASSERT_TRUE(a100.ok()) << a100.status();
    EXPECT_GT(a100->naive_simulated_s, a100->lower_bound_s * (1.0 + options.full_budget_gap));
    EXPECT_EQ(a100->budget, 400);
}

TEST(Synthesis, SizePartitionsFindABetterMembership) {
    const Topology a100 = builtin("dgx-a100");
    absl::StatusOr<SynthesisResult> naive =
        synthesize(parse(kSizePartitions), a100, {SynthesisMode::naive, 0, 0});
    ASSERT_TRUE(naive.ok()) << naive.status();
    EXPECT_EQ(naive->membership.at("G1"), (std::vector<int>{0, 1, 2, 3})) << "identity placement";
    absl::StatusOr<SynthesisResult> optimized =
        synthesize(parse(kSizePartitions), a100, {SynthesisMode::optimized, 3, 400});
    ASSERT_TRUE(optimized.ok()) << optimized.status();
    EXPECT_LT(optimized->simulated_s, naive->simulated_s);
}

TEST(Synthesis, DeterministicForASeed) {
    const Topology v100 = builtin("dgx-v100");
    const Program preamble = parse(kFourGpusTotal);
    absl::StatusOr<SynthesisResult> a =
        synthesize(preamble, v100, {SynthesisMode::optimized, 9, 100});
    absl::StatusOr<SynthesisResult> b =
        synthesize(preamble, v100, {SynthesisMode::optimized, 9, 100});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(print_program(a->program), print_program(b->program));
    EXPECT_EQ(a->simulated_s, b->simulated_s);
}

// The whole-program starting points: a chunked all-reduce becomes reduce-scatter + all-gather
// (each chunk summed at its own root), and on the DGX-1 trees over NVLink avoid the bridge.
TEST(Synthesis, ChunkedAllReduceNearsTheBoundOnASwitch) {
    const Topology a100 = builtin("dgx-a100");
    const Program preamble = collective_preamble(Collective::all_reduce, 8, 1e9, 8);
    absl::StatusOr<SynthesisResult> result =
        synthesize(preamble, a100, {SynthesisMode::optimized, 0, 0});
    ASSERT_TRUE(result.ok()) << result.status();
    const double bound =
        collective_lower_bound(Collective::all_reduce, 8, 1e9, a100.link_bandwidth());
    EXPECT_GE(result->simulated_s, bound);
    EXPECT_LE(result->simulated_s, 1.15 * bound) << "naive: " << result->naive_simulated_s;
}

TEST(Synthesis, LinkTreesKeepTheDgx1AllGatherOffTheBridge) {
    const Topology v100 = builtin("dgx-v100");
    const Program preamble = collective_preamble(Collective::all_gather, 8, 1e9, 1);
    absl::StatusOr<SynthesisResult> result =
        synthesize(preamble, v100, {SynthesisMode::optimized, 0, 0});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LT(result->simulated_s, 0.2 * result->naive_simulated_s);
    absl::StatusOr<ProgramSimulation> simulation =
        simulate_program(result->program, result->membership, v100);
    ASSERT_TRUE(simulation.ok());
    for (const TaskTrace& trace : simulation->result.trace) {
        for (const std::string& resource : trace.resources) {
            EXPECT_NE(resource, "pcie-bridge") << simulation->tasks[trace.task].label;
        }
    }
}

TEST(Synthesis, ModesAndErrors) {
    EXPECT_EQ(*parse_synthesis_mode("ai"), SynthesisMode::optimized);
    EXPECT_THAT(std::string(parse_synthesis_mode("clever").status().message()),
                HasSubstr("unknown synthesis mode 'clever'"));
    const Topology a100 = builtin("dgx-a100");
    EXPECT_THAT(std::string(synthesize(parse(R"(
GPUS: 0, 1
IN: A @ 0
OUT: A @ 1
A @ 0 -> 1
)"),
                                       a100, {})
                                .status()
                                .message()),
                HasSubstr("without actions"));
    EXPECT_THAT(std::string(synthesize(parse(R"(
GPUS: 0, 12
IN: A @ 0
OUT: A @ 12
)"),
                                       a100, {})
                                .status()
                                .message()),
                HasSubstr("uses GPU 12"));
}

// Cancellation (compiler/support/cancellation.h): polled before every candidate.
TEST(Synthesis, CancelledBeforeItStartsDoesNoWork) {
    support::Cancellation cancellation;
    cancellation.cancel();
    SynthesisOptions options{SynthesisMode::optimized, 0, 100};
    options.cancellation = &cancellation;
    for (SynthesisMode mode : {SynthesisMode::naive, SynthesisMode::optimized}) {
        options.mode = mode;
        absl::StatusOr<SynthesisResult> result =
            synthesize(parse(kFourGpusTotal), builtin("dgx-a100"), options);
        EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
        EXPECT_THAT(std::string(result.status().message()), HasSubstr("synthesis"));
    }
}

TEST(Synthesis, CancelledFromAnotherThreadStopsALongSearch) {
    // A budget that would take minutes: only the cancellation makes it return this soon.
    const Program preamble = collective_preamble(Collective::all_reduce, 8, 1e9, 8);
    support::Cancellation cancellation;
    SynthesisOptions options{SynthesisMode::optimized, 0, 100'000'000};
    options.cancellation = &cancellation;
    auto [result, timing] = einsummable::testing::run_cancelled_after(
        cancellation, einsummable::testing::kCancelDelay,
        [&] { return synthesize(preamble, builtin("dgx-a100"), options); });
    EXPECT_TRUE(absl::IsCancelled(result.status())) << result.status();
    EXPECT_LT(timing.after_cancel_s, einsummable::testing::kCancelBoundS);
    std::cout << "synthesis returned " << timing.after_cancel_s * 1e3 << " ms after cancel()\n";
}

TEST(Synthesis, AnUnsetCancellationChangesNothing) {
    const Topology v100 = builtin("dgx-v100");
    for (const char* text : {kFourGpusTotal, kSizePartitions}) {
        const Program preamble = parse(text);
        const SynthesisOptions plain{SynthesisMode::optimized, 5, 200};
        SynthesisOptions with = plain;
        support::Cancellation cancellation;
        with.cancellation = &cancellation;
        absl::StatusOr<SynthesisResult> a = synthesize(preamble, v100, plain);
        absl::StatusOr<SynthesisResult> b = synthesize(preamble, v100, with);
        ASSERT_TRUE(a.ok() && b.ok());
        EXPECT_EQ(print_program(a->program), print_program(b->program));
        EXPECT_EQ(a->membership, b->membership);
        EXPECT_EQ(a->simulated_s, b->simulated_s);
        EXPECT_EQ(a->candidates, b->candidates);
    }
}

} // namespace
} // namespace einsummable::exprog
