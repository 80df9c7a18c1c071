// Planning work grows near-linearly in the number of packed sequences: an
// attention operator's sequence index may be cut only at sequence ends, and choosing the cuts
// used to try every last cut for every end, quadratic in the ends (64k ends: 26 s).

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/workloads/workloads.h"
#include "gtest/gtest.h"

namespace einsummable::logical {
namespace {

// Seconds to plan a LLaMA block of `sequences` sequences of 2 tokens on 32 devices
// (more devices, more parts to choose cuts for: the work the old programme multiplied by n²): the
// fastest of three runs, so a run the shared machine preempts does not count.
double plan_seconds(int64_t sequences) {
    absl::StatusOr<ir::Graph> graph =
        workloads::by_name(absl::StrCat("llama-block:seqs=", sequences,
                                        "x2,d_model=64,heads_q=2,heads_kv=1,"
                                        "d_head=32,d_ff=64"));
    EXPECT_TRUE(graph.ok()) << graph.status();
    double fastest = 1e9;
    for (int run = 0; run < 3; ++run) {
        const auto start = std::chrono::steady_clock::now();
        absl::StatusOr<LogicalPlan> plan = optimize(*graph, {32, Planner::dp, 0});
        const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
        EXPECT_TRUE(plan.ok()) << plan.status();
        fastest = std::min(fastest, took.count());
    }
    return fastest;
}

// n doubles until planning takes 50 ms (at most 2^18, where it takes about 0.1 s) (timer noise is
// then small against it); 4n must then take under 8x as long. Linear work gives about 4x and the
// old quadratic programme 16x, so the bound has a factor two of margin each way, and the fastest of
// three runs keeps a scheduler hiccup from deciding it.
TEST(SequenceEndsScaling, FourTimesTheEndsTakeUnderEightTimesTheTime) {
    int64_t sequences = 1024;
    double base = plan_seconds(sequences);
    while (base < 0.05 && sequences < (int64_t{1} << 18)) {
        sequences *= 2;
        base = plan_seconds(sequences);
    }
    const double four_times = plan_seconds(4 * sequences);
    EXPECT_LT(four_times, 8.0 * base) << sequences << " sequences: " << base << " s; "
                                      << 4 * sequences << ": " << four_times << " s";
}

} // namespace
} // namespace einsummable::logical
