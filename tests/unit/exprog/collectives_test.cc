// The standard collectives' preambles (collectives.h) and their synthesis on the built-in
// topologies against the lower bounds of docs/workloads.md.

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/collectives.h"
#include "compiler/exprog/parser.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/simulator.h"
#include "compiler/exprog/synthesis.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

using ::testing::HasSubstr;

constexpr Collective kAll[] = {Collective::all_gather, Collective::reduce_scatter,
                               Collective::all_reduce, Collective::all_to_all};

Topology builtin(const char* name) {
    absl::StatusOr<Topology> topology = builtin_topology(name);
    EXPECT_TRUE(topology.ok()) << topology.status();
    return *topology;
}

std::vector<Site> gpu_sites(std::vector<int> gpus) {
    std::vector<Site> sites;
    for (int g : gpus) {
        sites.push_back(Site::of_gpu(g));
    }
    return sites;
}

const std::vector<Site> kAllEight = gpu_sites({0, 1, 2, 3, 4, 5, 6, 7});

TEST(Collectives, NamesRoundTripAndBothSpellingsParse) {
    for (Collective collective : kAll) {
        absl::StatusOr<Collective> parsed = parse_collective(collective_name(collective));
        ASSERT_TRUE(parsed.ok()) << parsed.status();
        EXPECT_EQ(*parsed, collective);
    }
    EXPECT_EQ(collective_name(Collective::all_gather), "all-gather");
    EXPECT_EQ(*parse_collective("all_gather"), Collective::all_gather);
    EXPECT_EQ(*parse_collective("reduce_scatter"), Collective::reduce_scatter);
    EXPECT_EQ(*parse_collective("all-reduce"), Collective::all_reduce);
    EXPECT_EQ(*parse_collective("all_to_all"), Collective::all_to_all);
}

TEST(Collectives, UnknownNameListsTheKnownOnes) {
    absl::StatusOr<Collective> parsed = parse_collective("broadcast");
    ASSERT_FALSE(parsed.ok());
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(parsed.status().message(), HasSubstr("'broadcast'"));
    for (Collective collective : kAll) {
        EXPECT_THAT(parsed.status().message(), HasSubstr(std::string(collective_name(collective))));
    }
    EXPECT_FALSE(parse_collective("").ok());
    EXPECT_FALSE(parse_collective("All-Gather").ok());
}

// Shared by every collective: GPUs 0..p-1, no partitions or actions, atoms X<g>_<c> of equal
// size declared once each at their GPU, g-major.
void expect_common_shape(const Program& program, int gpus, int atoms_per_gpu, double atom_bytes) {
    std::vector<int> expected_gpus;
    for (int g = 0; g < gpus; ++g) {
        expected_gpus.push_back(g);
    }
    EXPECT_EQ(program.gpus, expected_gpus);
    EXPECT_TRUE(program.partitions.empty());
    EXPECT_TRUE(program.actions.empty());
    ASSERT_EQ(program.ins.size(), static_cast<size_t>(gpus * atoms_per_gpu));
    for (int g = 0; g < gpus; ++g) {
        for (int c = 0; c < atoms_per_gpu; ++c) {
            const InDecl& in = program.ins[g * atoms_per_gpu + c];
            EXPECT_EQ(in.atom, absl::StrCat("X", g, "_", c));
            EXPECT_EQ(in.gpu, g);
            EXPECT_DOUBLE_EQ(in.bytes, atom_bytes);
        }
    }
    EXPECT_TRUE(check_well_formed(program).ok()) << check_well_formed(program);
}

TEST(Collectives, AllGatherNeedsEveryChunkEverywhere) {
    const Program program = collective_preamble(Collective::all_gather, 8, 1e9, 8);
    expect_common_shape(program, 8, 8, 1e9 / 64);
    ASSERT_EQ(program.outs.size(), 64u);
    for (int g = 0; g < 8; ++g) {
        for (int c = 0; c < 8; ++c) {
            const OutDecl& out = program.outs[g * 8 + c];
            EXPECT_EQ(out.aggregate, Aggregate{absl::StrCat("X", g, "_", c)});
            EXPECT_EQ(out.sites, kAllEight);
        }
    }
}

TEST(Collectives, ReduceScatterSumsChunkSetsRoundRobin) {
    // 16 chunks over 8 GPUs: chunks c and c + 8 go to GPU c.
    const Program program = collective_preamble(Collective::reduce_scatter, 8, 1e9, 16);
    expect_common_shape(program, 8, 16, 1e9 / 16);
    ASSERT_EQ(program.outs.size(), 16u);
    for (int c = 0; c < 16; ++c) {
        const OutDecl& out = program.outs[c];
        Aggregate sum;
        for (int g = 0; g < 8; ++g) {
            sum.insert(absl::StrCat("X", g, "_", c));
        }
        EXPECT_EQ(out.aggregate, sum);
        EXPECT_EQ(out.sites, gpu_sites({c % 8}));
    }
}

TEST(Collectives, AllReduceNeedsEveryChunkSumEverywhere) {
    const Program program = collective_preamble(Collective::all_reduce, 4, 2e9, 3);
    expect_common_shape(program, 4, 3, 2e9 / 3);
    ASSERT_EQ(program.outs.size(), 3u);
    for (int c = 0; c < 3; ++c) {
        EXPECT_EQ(program.outs[c].aggregate,
                  (Aggregate{absl::StrCat("X0_", c), absl::StrCat("X1_", c), absl::StrCat("X2_", c),
                             absl::StrCat("X3_", c)}));
        EXPECT_EQ(program.outs[c].sites, gpu_sites({0, 1, 2, 3}));
    }
}

TEST(Collectives, AllToAllSendsChunkCToGpuCModP) {
    const Program program = collective_preamble(Collective::all_to_all, 8, 1e9, 8);
    expect_common_shape(program, 8, 8, 1e9 / 8);
    ASSERT_EQ(program.outs.size(), 64u);
    for (int g = 0; g < 8; ++g) {
        for (int c = 0; c < 8; ++c) {
            const OutDecl& out = program.outs[g * 8 + c];
            EXPECT_EQ(out.aggregate, Aggregate{absl::StrCat("X", g, "_", c)});
            EXPECT_EQ(out.sites, gpu_sites({c}));
        }
    }
}

TEST(Collectives, PreamblesRoundTripThroughThePrinter) {
    for (Collective collective : kAll) {
        for (int gpus : {1, 3, 8}) {
            SCOPED_TRACE(absl::StrCat(collective_name(collective), " gpus=", gpus));
            const Program program = collective_preamble(collective, gpus, 1e9, 4);
            const std::string printed = print_program(program);
            absl::StatusOr<Program> parsed = parse_program(printed);
            ASSERT_TRUE(parsed.ok()) << parsed.status() << "\n" << printed;
            EXPECT_EQ(*parsed, program);
            EXPECT_EQ(print_program(*parsed), printed);
        }
    }
}

TEST(Collectives, SmallPreambleIsPrintedAsDocumented) {
    EXPECT_EQ(print_program(collective_preamble(Collective::all_reduce, 2, 1e9, 2)),
              "GPUS: 0, 1\n"
              "IN: X0_0 @ 0 (size: 500 MB)\n"
              "IN: X0_1 @ 0 (size: 500 MB)\n"
              "IN: X1_0 @ 1 (size: 500 MB)\n"
              "IN: X1_1 @ 1 (size: 500 MB)\n"
              "OUT: X0_0+X1_0 @ 0, 1\n"
              "OUT: X0_1+X1_1 @ 0, 1\n");
}

TEST(Collectives, LowerBoundFormulas) {
    const double n = 1e9;
    const double b = 300e9;
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_gather, 8, n, b), 7.0 / 8 * n / b);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::reduce_scatter, 8, n, b), 7.0 / 8 * n / b);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_to_all, 8, n, b), 7.0 / 8 * n / b);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_reduce, 8, n, b),
                     2.0 * 7.0 / 8 * n / b);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_reduce, 4, 2e9, 450e9),
                     2.0 * 3.0 / 4 * 2e9 / 450e9);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_gather, 1, n, b), 0.0);
}

TEST(Collectives, LowerBoundOnATopologyAddsTheCuts) {
    const double n = 1e9;
    // A non-blocking switch has no cut tighter than one GPU's port.
    for (const char* name : {"dgx-a100", "dgx-h100"}) {
        const Topology topology = builtin(name);
        for (Collective collective : kAll) {
            SCOPED_TRACE(absl::StrCat(name, " ", collective_name(collective)));
            EXPECT_DOUBLE_EQ(collective_lower_bound(collective, 8, n, topology),
                             collective_lower_bound(collective, 8, n, topology.link_bandwidth()));
        }
    }
    // DGX-1: one GPU moves at most 6 x 25 GB/s of NVLink plus the 15.75 GB/s bridge. For
    // all-to-all the bisection {0,1,2,3} | {4,5,6,7} binds instead: 16 chunks of N/8 cross it
    // over the links (0,4), (1,5) (double), (2,6), (3,7) (single) and the bridge.
    const Topology v100 = builtin("dgx-v100");
    const double one_gpu = 150e9 + 15.75e9;
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_gather, 8, n, v100),
                     7.0 / 8 * n / one_gpu);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_reduce, 8, n, v100),
                     2.0 * 7.0 / 8 * n / one_gpu);
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_to_all, 8, n, v100),
                     16.0 * n / 8 / (2 * 50e9 + 2 * 25e9 + 15.75e9));
    // Fewer GPUs than the topology: only their links count. GPUs 0 and 1 share one link, and
    // an all-gather of N over them moves N/2 each way across it.
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_gather, 2, n, v100), 0.5 * n / 25e9);
    // Too many GPUs to enumerate the cuts: the per-GPU term alone; no GPUs to exchange: 0.
    absl::StatusOr<Topology> big = Topology::make_switch("big", 24, 300e9, 1555e9, 0.0);
    ASSERT_TRUE(big.ok()) << big.status();
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_to_all, 24, n, *big),
                     23.0 / 24 * n / 300e9);
    EXPECT_EQ(collective_lower_bound(Collective::all_reduce, 1, n, v100), 0.0);
    // Two DGX H100 nodes: one GPU moves at most its NVLink and its NIC; the cut between the
    // nodes (8 NICs each way) binds all-to-all: 64 pairs of N/16 cross it.
    const Topology two = builtin("dgx-h100-2nodes");
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_gather, 16, n, two),
                     15.0 / 16 * n / (450e9 + 50e9));
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_to_all, 16, n, two),
                     64.0 * n / 16 / (8 * 50e9));
    // Four nodes, 32 GPUs: too many for every cut, so the cuts along nodes: one node against
    // three moves 8·24 pairs of N/32 over its 8 NICs.
    const Topology four = builtin("dgx-h100-4nodes");
    EXPECT_DOUBLE_EQ(collective_lower_bound(Collective::all_to_all, 32, n, four),
                     std::max(8.0 * 24 * n / 32 / (8 * 50e9), 16.0 * 16 * n / 32 / (16 * 50e9)));
}

// Without synthesis: the all-gather as direct multicasts is valid and meets the lower bound
// (plus one latency) on the non-blocking switch, so the preamble's sizes are the ones the bound
// is stated for.
TEST(Collectives, DirectAllGatherMeetsTheLowerBoundOnTheSwitch) {
    const Topology a100 = builtin("dgx-a100");
    Program program = collective_preamble(Collective::all_gather, 8, 1e9, 8);
    for (int g = 0; g < 8; ++g) {
        std::vector<Site> others;
        for (int d = 0; d < 8; ++d) {
            if (d != g) {
                others.push_back(Site::of_gpu(d));
            }
        }
        for (int c = 0; c < 8; ++c) {
            program.actions.push_back(
                Action{{absl::StrCat("X", g, "_", c)}, Site::of_gpu(g), {others}, {}});
        }
    }
    ASSERT_TRUE(check_program(program).ok()) << check_program(program).status();
    absl::StatusOr<ProgramSimulation> simulation = simulate_program(program, {}, a100);
    ASSERT_TRUE(simulation.ok()) << simulation.status();
    const double bound =
        collective_lower_bound(Collective::all_gather, 8, 1e9, a100.link_bandwidth());
    EXPECT_NEAR(simulation->result.makespan_s, bound + a100.latency_s(), 1e-9 * bound);
}

// Synthesis of every collective, 8 GPUs with 8 atoms each. The simulator is fluid, so the size
// only scales time; a small search budget keeps the test fast under the sanitizers (the full
// budget is bench/exprog_bench.cc's).
// Under ASan+UBSan (scripts/test, Debug) the search is about 20x slower, and its initial sweep
// (one candidate per OUT group and GPU) does not shrink with `iterations`, so the sanitized
// build uses 2 atoms per GPU instead of 8 (the same schedules, coarser chunks).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif
constexpr int kTestAtomsPerGpu = kSanitized ? 2 : 8;
constexpr int kTestIterations = 16;
constexpr double kTestBytes = 1e9;

struct SynthesisCase {
    Collective collective;
    const char* topology;
};

std::string case_name(const testing::TestParamInfo<SynthesisCase>& info) {
    std::string name =
        absl::StrCat(collective_name(info.param.collective), "_", info.param.topology);
    for (char& c : name) {
        if (c == '-') {
            c = '_';
        }
    }
    return name;
}

SynthesisResult synthesize_ok(const Program& preamble, const Topology& topology, SynthesisMode mode,
                              uint64_t seed = 0) {
    SynthesisOptions options;
    options.mode = mode;
    options.seed = seed;
    options.iterations = kTestIterations;
    // Pipelined candidates in up to 2 chunks: enough to check they stay valid and never slower
    // (exprog_bench measures the default's results; more chunks only cost test time).
    options.max_chunks = 2;
    absl::StatusOr<SynthesisResult> result = synthesize(preamble, topology, options);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *std::move(result) : SynthesisResult{};
}

// The result is valid, keeps the preamble, and its simulated time is what the simulator says.
void expect_valid(const Program& preamble, const Topology& topology,
                  const SynthesisResult& result) {
    Program declarations = result.program;
    declarations.actions.clear();
    declarations.orders.clear();
    EXPECT_EQ(declarations, preamble);
    EXPECT_FALSE(result.program.actions.empty());
    absl::StatusOr<CheckResult> check = check_program(result.program);
    EXPECT_TRUE(check.ok()) << check.status() << "\n" << print_program(result.program);
    absl::StatusOr<ProgramSimulation> simulation =
        simulate_program(result.program, result.membership, topology);
    ASSERT_TRUE(simulation.ok()) << simulation.status();
    EXPECT_NEAR(simulation->result.makespan_s, result.simulated_s, 1e-12 * result.simulated_s);
}

class CollectiveSynthesis : public testing::TestWithParam<SynthesisCase> {};

TEST_P(CollectiveSynthesis, NaiveAndOptimizedAreValidAndOptimizedIsNoSlower) {
    const SynthesisCase& param = GetParam();
    const Topology topology = builtin(param.topology);
    const Program preamble = collective_preamble(param.collective, 8, kTestBytes, kTestAtomsPerGpu);

    const SynthesisResult naive = synthesize_ok(preamble, topology, SynthesisMode::naive);
    expect_valid(preamble, topology, naive);
    const SynthesisResult optimized = synthesize_ok(preamble, topology, SynthesisMode::optimized);
    expect_valid(preamble, topology, optimized);

    EXPECT_GT(optimized.simulated_s, 0.0);
    EXPECT_DOUBLE_EQ(optimized.naive_simulated_s, naive.simulated_s);
    EXPECT_LE(optimized.simulated_s, naive.simulated_s);

    // No program beats the physical limit; latency only adds to it.
    const double bound = collective_lower_bound(param.collective, 8, kTestBytes, topology);
    EXPECT_GT(bound, 0.0);
    EXPECT_GE(optimized.simulated_s, bound * (1.0 - 1e-9));
    EXPECT_GE(naive.simulated_s, bound * (1.0 - 1e-9));
}

INSTANTIATE_TEST_SUITE_P(Switches, CollectiveSynthesis,
                         testing::Values(SynthesisCase{Collective::all_gather, "dgx-a100"},
                                         SynthesisCase{Collective::reduce_scatter, "dgx-a100"},
                                         SynthesisCase{Collective::all_reduce, "dgx-a100"},
                                         SynthesisCase{Collective::all_to_all, "dgx-a100"},
                                         SynthesisCase{Collective::all_gather, "dgx-h100"},
                                         SynthesisCase{Collective::reduce_scatter, "dgx-h100"},
                                         SynthesisCase{Collective::all_reduce, "dgx-h100"},
                                         SynthesisCase{Collective::all_to_all, "dgx-h100"}),
                         case_name);

INSTANTIATE_TEST_SUITE_P(Links, CollectiveSynthesis,
                         testing::Values(SynthesisCase{Collective::all_gather, "dgx-v100"},
                                         SynthesisCase{Collective::reduce_scatter, "dgx-v100"},
                                         SynthesisCase{Collective::all_reduce, "dgx-v100"},
                                         SynthesisCase{Collective::all_to_all, "dgx-v100"}),
                         case_name);

TEST(CollectiveSynthesisDeterminism, SameSeedGivesTheSameProgram) {
    for (const SynthesisCase& param : {SynthesisCase{Collective::all_reduce, "dgx-a100"},
                                       SynthesisCase{Collective::all_to_all, "dgx-v100"}}) {
        SCOPED_TRACE(absl::StrCat(collective_name(param.collective), " on ", param.topology));
        const Topology topology = builtin(param.topology);
        const Program preamble =
            collective_preamble(param.collective, 8, kTestBytes, kTestAtomsPerGpu);
        const SynthesisResult first =
            synthesize_ok(preamble, topology, SynthesisMode::optimized, 7);
        const SynthesisResult second =
            synthesize_ok(preamble, topology, SynthesisMode::optimized, 7);
        EXPECT_EQ(print_program(first.program), print_program(second.program));
        EXPECT_EQ(first.membership, second.membership);
        EXPECT_EQ(first.simulated_s, second.simulated_s);
        EXPECT_EQ(first.candidates, second.candidates);
    }
}

TEST(CollectiveSynthesisErrors, PreambleWithActionsIsRejected) {
    const Topology topology = builtin("dgx-a100");
    Program program = collective_preamble(Collective::all_gather, 2, kTestBytes, 1);
    program.actions.push_back(Action{{"X0_0"}, Site::of_gpu(0), {{Site::of_gpu(1)}}, {}});
    absl::StatusOr<SynthesisResult> result = synthesize(program, topology, {});
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CollectiveSynthesisErrors, GpuTheTopologyLacksIsRejected) {
    const Topology topology = builtin("dgx-a100");
    const Program program = collective_preamble(Collective::all_gather, 9, kTestBytes, 1);
    absl::StatusOr<SynthesisResult> result = synthesize(program, topology, {});
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
}

// The ordered progressive star, an exchange program with ORDER (collectives.h), against its
// closed form: with 3a/H < a/B + latency every running sum keeps up with the arrivals, so
// reduce-scatter ends at p-1 sends of one chunk plus one 2-part aggregation, and all-reduce adds
// p-1 sends. In k chunks each send is a k-th and costs its own latency; the running sums of a
// chunk hide behind the next chunk's transfer.
TEST(OrderedStar, MatchesItsClosedFormOnBothSwitches) {
    for (const char* name : {"dgx-a100", "dgx-h100"}) {
        for (int k : {1, 2, 4}) {
            SCOPED_TRACE(absl::StrCat(name, ", ", k, " chunks"));
            const Topology topology = builtin(name);
            const double piece = 1e9 / 8 / k;
            const double send = topology.latency_s() + piece / topology.link_bandwidth();
            const double add = 3.0 * piece / topology.hbm_bandwidth();
            ASSERT_LT(add, send);
            const Program rs = ordered_star_program(Collective::reduce_scatter, 8, 1e9, k);
            const Program ar = ordered_star_program(Collective::all_reduce, 8, 1e9, k);
            EXPECT_EQ(rs.orders.size(), 8u * (7 * k - 1));
            absl::StatusOr<ProgramSimulation> rs_run = simulate_program(rs, {}, topology);
            absl::StatusOr<ProgramSimulation> ar_run = simulate_program(ar, {}, topology);
            ASSERT_TRUE(rs_run.ok()) << rs_run.status();
            ASSERT_TRUE(ar_run.ok()) << ar_run.status();
            const double rs_time = rs_run->result.makespan_s;
            const double ar_time = ar_run->result.makespan_s;
            EXPECT_NEAR(rs_time, 7 * k * send + add, 1e-12);
            // With one chunk the root's first sum of all-reduce waits for its last addition;
            // with more, that addition hides behind the sends of the chunks before it.
            EXPECT_NEAR(ar_time, 14 * k * send + (k == 1 ? add : 0.0), 1e-12);
            if (k == 1) {
                // bench/README.md: all-reduce so ordered is within 1.05x of the bound on both
                // switches; reduce-scatter needs chunks for that.
                const double bandwidth = topology.link_bandwidth();
                EXPECT_LT(ar_time /
                              collective_lower_bound(Collective::all_reduce, 8, 1e9, bandwidth),
                          1.05);
                EXPECT_GT(rs_time /
                              collective_lower_bound(Collective::reduce_scatter, 8, 1e9, bandwidth),
                          1.05);
            }
        }
    }
}

TEST(OrderedStar, OnlyForReductions) {
    EXPECT_TRUE(ordered_star_program(Collective::all_gather, 8, 1e9, 1).actions.empty());
    EXPECT_TRUE(ordered_star_program(Collective::all_to_all, 8, 1e9, 1).actions.empty());
    EXPECT_TRUE(ordered_star_program(Collective::all_reduce, 1, 1e9, 1).actions.empty());
}

} // namespace
} // namespace einsummable::exprog
