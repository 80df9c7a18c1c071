// Exchange programs run on the simulator: closed forms on the built-in topologies.

#include "compiler/exprog/parser.h"
#include "compiler/exprog/program_simulation.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/exprog/parse_or_fail.h"

namespace einsummable::exprog {
namespace {

Program parse(const std::string& text) {
    return testing::parse_or_fail(text);
}

Topology builtin(const char* name) {
    absl::StatusOr<Topology> topology = builtin_topology(name);
    EXPECT_TRUE(topology.ok()) << topology.status();
    return *topology;
}

TEST(ProgramSimulation, TwoGpuExchangeThenLocalAggregation) {
    const Topology a100 = builtin("dgx-a100");
    const Program program = parse(testing::kPaperTwoGpus);
    absl::StatusOr<ProgramSimulation> simulation = simulate_program(program, {}, a100);
    ASSERT_TRUE(simulation.ok()) << simulation.status();
    // Two 1 GB transfers in opposite directions (no shared endpoint resource), then at each
    // GPU an aggregation reading 2 GB and writing 1 GB at HBM bandwidth.
    ASSERT_EQ(simulation->tasks.size(), 4u);
    const double expected =
        a100.latency_s() + 1e9 / a100.link_bandwidth() + 3e9 / a100.hbm_bandwidth();
    EXPECT_NEAR(simulation->result.makespan_s, expected, 1e-9 * expected);
}

TEST(ProgramSimulation, ReduceThenMulticastSharesTheRootsEgress) {
    const Topology h100 = builtin("dgx-h100");
    const Program program = parse(R"(
GPUS: 0, 1, 2, 3
IN: A @ 0 (size: 1 GB)
IN: B @ 1 (size: 1 GB)
IN: C @ 2 (size: 1 GB)
IN: D @ 3 (size: 1 GB)
OUT: A+B+C+D @ 0, 1, 2, 3
B @ 1 -> 0; C @ 2 -> 0; D @ 3 -> 0
A+B+C+D @ 0 -> 1, 2, 3
)");
    absl::StatusOr<ProgramSimulation> simulation = simulate_program(program, {}, h100);
    ASSERT_TRUE(simulation.ok()) << simulation.status();
    const double bandwidth = h100.link_bandwidth();
    // Three transfers share GPU 0's ingress; the aggregation reads 4 GB and writes 1 GB; the
    // multicast to three GPUs shares GPU 0's egress.
    const double expected = h100.latency_s() + 3e9 / bandwidth + 5e9 / h100.hbm_bandwidth() +
                            h100.latency_s() + 3e9 / bandwidth;
    EXPECT_NEAR(simulation->result.makespan_s, expected, 1e-9 * expected);
}

TEST(ProgramSimulation, InvalidProgramsAreRefused) {
    const Program program = parse(R"(
GPUS: 0, 1
IN: A @ 0
OUT: A @ 1
)");
    absl::StatusOr<ProgramSimulation> simulation =
        simulate_program(program, {}, builtin("dgx-a100"));
    ASSERT_FALSE(simulation.ok());
    EXPECT_THAT(std::string(simulation.status().message()), ::testing::HasSubstr("is not met"));
    const Program wide = parse(R"(
GPUS: 0, 9
IN: A @ 0
OUT: A @ 9
A @ 0 -> 9
)");
    EXPECT_THAT(std::string(simulate_program(wide, {}, builtin("dgx-a100")).status().message()),
                ::testing::HasSubstr("GPU 9"));
}

} // namespace
} // namespace einsummable::exprog
