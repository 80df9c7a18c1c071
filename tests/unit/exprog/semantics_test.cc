// The semantics of exchange programs (paper section 5.2): closure, validity, membership search
// and the errors that name what is wrong.

#include <algorithm>
#include <random>

#include "compiler/exprog/parser.h"
#include "compiler/exprog/semantics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/unit/exprog/parse_or_fail.h"

namespace einsummable::exprog {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

Program parse(const std::string& text) {
    return testing::parse_or_fail(text);
}

std::string check_error(const std::string& text) {
    absl::StatusOr<CheckResult> result = check_program(parse(text));
    EXPECT_FALSE(result.ok()) << "expected an invalid program";
    return result.ok() ? "" : std::string(result.status().message());
}

using testing::kPaperTwoGpus;

TEST(Semantics, TwoGpusExchangeAndAggregate) {
    absl::StatusOr<CheckResult> result = check_program(parse(kPaperTwoGpus));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(result->closure.count({Aggregate{"A", "B"}, 0}));
    EXPECT_TRUE(result->closure.count({Aggregate{"A", "B"}, 1}));
    EXPECT_TRUE(result->membership.empty());
}

TEST(Semantics, AnActionThatCanNeverFireIsNamed) {
    std::string text = kPaperTwoGpus;
    text.replace(text.find("; B @ 1 -> 0"), 12, "");
    EXPECT_THAT(check_error(text), AllOf(HasSubstr("action 'A+B @ 0' can never fire"),
                                         HasSubstr("A+B cannot be formed at GPU 0"),
                                         HasSubstr("present at the end: A")));
}

TEST(Semantics, AnUnmetOutRequirementIsNamed) {
    const std::string text = R"(
GPUS: 0, 1, 2
IN: A @ 0
IN: B @ 1
OUT: A+B @ 0, 2
B @ 1 -> 0
A+B @ 0
)";
    EXPECT_THAT(check_error(text), AllOf(HasSubstr("line 5: OUT A+B @ 2"), HasSubstr("is not met"),
                                         HasSubstr("never reaches GPU 2")));
}

// Four GPUs each hold one atom; all need the total, through a reduction tree and relays.
const char* kFourGpusTree = R"(
GPUS: 0, 1, 2, 3
IN: A @ 0
IN: B @ 1
IN: C @ 2
IN: D @ 3
OUT: A+B+C+D @ 0, 1, 2, 3
A @ 0 -> 1
C @ 2 -> 3
A+B @ 1 -> 3
A+B+C+D @ 3 -> 2 -> 0
A+B+C+D @ 3 -> 1
)";

// Paper example 2: four GPUs each hold one atom; all need the total. Two programs: reduce to
// one GPU and multicast, or a tree with relays.
TEST(Semantics, FourGpusAllNeedTheTotal) {
    const std::string star = R"(
GPUS: 0, 1, 2, 3
IN: A @ 0
IN: B @ 1
IN: C @ 2
IN: D @ 3
OUT: A+B+C+D @ 0, 1, 2, 3
B @ 1 -> 0; C @ 2 -> 0; D @ 3 -> 0
A+B+C+D @ 0 -> 1, 2, 3
)";
    EXPECT_TRUE(check_program(parse(star)).ok());
    absl::StatusOr<CheckResult> result = check_program(parse(kFourGpusTree));
    ASSERT_TRUE(result.ok()) << result.status();
    for (int gpu = 0; gpu < 4; ++gpu) {
        EXPECT_TRUE(result->closure.count({Aggregate{"A", "B", "C", "D"}, gpu})) << gpu;
    }
}

// Paper example 3: two partitions of size 4 whose members the compiler chooses.
TEST(Semantics, SizeDeclaredPartitionsFindAMembership) {
    const std::string text = R"(
GPUS: 0, 1, 2, 3, 4, 5, 6, 7
PARTITIONS: G1 {size 4}, G2 {size 4}
IN: A @ 1
IN: A @ 3
IN: A @ 5
IN: A @ 7
IN: B @ 0
IN: B @ 2
IN: B @ 4
IN: B @ 6
OUT: A @ G1
OUT: B @ G2
)";
    absl::StatusOr<CheckResult> result = check_program(parse(text));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->membership.at("G1"), (std::vector<int>{1, 3, 5, 7}));
    EXPECT_EQ(result->membership.at("G2"), (std::vector<int>{0, 2, 4, 6}));
}

TEST(Semantics, NoMembershipWorks) {
    const std::string text = R"(
GPUS: 0, 1, 2
PARTITIONS: G {size 2}
IN: A @ 0
OUT: A @ G
)";
    EXPECT_THAT(check_error(text), AllOf(HasSubstr("no membership"), HasSubstr("OUT A @ G")));
}

TEST(Semantics, AggregatesFormOnlyFromDisjointParts) {
    State state = {{Aggregate{"A", "B"}, 0}, {Aggregate{"B", "C"}, 0}};
    EXPECT_FALSE(can_form(state, Aggregate{"A", "B", "C"}, 0)) << "A+B and B+C overlap in B";
    state.insert({Aggregate{"C"}, 0});
    std::vector<Fact> parts;
    EXPECT_TRUE(can_form(state, Aggregate{"A", "B", "C"}, 0, &parts));
    EXPECT_EQ(parts, (std::vector<Fact>{{{"A", "B"}, 0}, {{"C"}, 0}}));
    EXPECT_FALSE(can_form(state, Aggregate{"A", "B", "C"}, 1)) << "nothing at GPU 1";
    EXPECT_TRUE(can_form(state, Aggregate{"B", "C"}, 0)) << "already present";
}

TEST(Semantics, RelayChainsDeliverAlongTheWay) {
    const std::string text = R"(
GPUS: 0, 1, 2, 3
IN: A @ 0
OUT: A @ 1, 2, 3
A @ 0 -> 1 -> 2, 3
)";
    absl::StatusOr<CheckResult> result = check_program(parse(text));
    ASSERT_TRUE(result.ok()) << result.status();
    const std::vector<ActionInstance> instances = instantiate(parse(text), {});
    ASSERT_EQ(instances.size(), 2u);
    EXPECT_EQ(instances[1].source, 1);
    EXPECT_EQ(instances[1].destinations, (std::vector<int>{2, 3}));
}

TEST(Semantics, ActionOrderDoesNotMatter) {
    const Program program = parse(kFourGpusTree);
    const State expected = closure(program, instantiate(program, {}));
    std::mt19937_64 rng(7);
    for (int trial = 0; trial < 20; ++trial) {
        Program shuffled = program;
        std::shuffle(shuffled.actions.begin(), shuffled.actions.end(), rng);
        EXPECT_EQ(closure(shuffled, instantiate(shuffled, {})), expected);
        EXPECT_TRUE(check_program(shuffled).ok());
    }
}

// Well-formedness, checked on programs built in code (the parser rejects most of these too).
TEST(Semantics, IllFormedProgramsAreNamed) {
    Program program;
    program.gpus = {0, 1};
    program.ins = {{"A", 0, 1e9, {2, 1}}};
    program.outs = {{Aggregate{"A"}, {Site::of_gpu(1)}, {3, 1}}};
    program.actions = {{Aggregate{"A"}, Site::of_gpu(0), {{Site::of_gpu(1)}}, {4, 1}}};
    EXPECT_TRUE(check_well_formed(program).ok());

    Program unknown_gpu = program;
    unknown_gpu.actions[0].hops[0][0] = Site::of_gpu(5);
    EXPECT_THAT(std::string(check_well_formed(unknown_gpu).message()),
                HasSubstr("line 4 column 1: undeclared GPU 5"));

    Program unknown_partition = program;
    unknown_partition.outs[0].sites[0] = Site::of_partition("G9");
    EXPECT_THAT(std::string(check_well_formed(unknown_partition).message()),
                HasSubstr("line 3 column 1: undeclared partition 'G9'"));

    Program unknown_atom = program;
    unknown_atom.actions[0].aggregate = {"A", "Z"};
    EXPECT_THAT(std::string(check_well_formed(unknown_atom).message()),
                HasSubstr("undeclared atom 'Z'"));

    Program multicast_relay = program;
    multicast_relay.gpus = {0, 1, 2};
    multicast_relay.actions[0].hops = {{Site::of_gpu(1), Site::of_gpu(2)}, {Site::of_gpu(0)}};
    EXPECT_THAT(std::string(check_well_formed(multicast_relay).message()),
                HasSubstr("multicast in a non-final relay hop"));

    Program oversized = program;
    oversized.partitions = {{"G", {}, 3, {1, 1}}};
    EXPECT_THAT(std::string(check_well_formed(oversized).message()),
                HasSubstr("partition 'G' has size 3 but only 2 GPUs are declared"));

    Program relay_through_partition = program;
    relay_through_partition.gpus = {0, 1, 2};
    relay_through_partition.partitions = {{"G", {1, 2}, std::nullopt, {1, 1}}};
    relay_through_partition.actions[0].hops = {{Site::of_partition("G")}, {Site::of_gpu(0)}};
    EXPECT_THAT(std::string(check_well_formed(relay_through_partition).message()),
                HasSubstr("relay hop 1 is partition 'G' of several GPUs"));

    Program no_gpus;
    EXPECT_THAT(std::string(check_well_formed(no_gpus).message()), HasSubstr("no GPUS"));
}

// ---------------------------------------------------------------------------------------------
// Chunks and ORDER (docs/exprog.md "Chunks and order").

TEST(SemanticsChunks, AnOutIsMetWhenItsChunksCoverTheBlock) {
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
OUT: A @ 1
A[0/2] @ 0 -> 1
A[2/4] @ 0 -> 1
A[3/4] @ 0 -> 1
)";
    absl::StatusOr<CheckResult> result = check_program(parse(text));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(result->closure.count(Fact{{"A"}, 1, Chunk{2, 4}}));
    EXPECT_FALSE(result->closure.count(Fact{{"A"}, 1})) << "the whole never travels";
    EXPECT_TRUE(holds_whole(result->closure, {"A"}, 1));
    EXPECT_TRUE(holds_whole(result->closure, {"A"}, 0)) << "declared there whole";
    EXPECT_FALSE(holds_whole(State{Fact{{"A"}, 1, Chunk{0, 2}}}, {"A"}, 1));
}

TEST(SemanticsChunks, AMissingChunkLeavesTheOutUnmet) {
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
OUT: A @ 1
A[0/3] @ 0 -> 1
A[2/3] @ 0 -> 1
)";
    EXPECT_THAT(check_error(text),
                AllOf(HasSubstr("line 4: OUT A @ 1 is not met"),
                      HasSubstr("the chunks of A that reach GPU 1 do not cover it"),
                      HasSubstr("present there at the end: A[0/3], A[2/3]")));
}

TEST(SemanticsChunks, AChunkIsFormedFromPartsWhoseChunksContainIt) {
    // At GPU 1: A in chunk [0/2] and B whole, so A+B[1/4] (inside [0/2]) can be formed there,
    // and A+B[0/2] too, but not A+B[1/2].
    State state = {Fact{{"A"}, 1, Chunk{0, 2}}, Fact{{"B"}, 1}};
    std::vector<Fact> parts;
    EXPECT_TRUE(can_form(state, {"A", "B"}, 1, &parts, Chunk{1, 4}));
    EXPECT_EQ(parts, (std::vector<Fact>{Fact{{"A"}, 1, Chunk{0, 2}}, Fact{{"B"}, 1}}));
    EXPECT_TRUE(can_form(state, {"A", "B"}, 1, nullptr, Chunk{0, 2}));
    EXPECT_FALSE(can_form(state, {"A", "B"}, 1, nullptr, Chunk{1, 2}));
    EXPECT_FALSE(can_form(state, {"A", "B"}, 1)) << "the whole needs all of A";
    // Among facts of one aggregate, the smallest chunk that contains the target is read.
    state.insert(Fact{{"A"}, 1});
    ASSERT_TRUE(can_form(state, {"A"}, 1, &parts, Chunk{1, 4}));
    EXPECT_EQ(parts, (std::vector<Fact>{Fact{{"A"}, 1, Chunk{0, 2}}}));
}

TEST(SemanticsChunks, FinerChunksDoNotMakeACoarserOne) {
    const std::string text = R"(
GPUS: 0, 1, 2
IN: A @ 0
OUT: A @ 2
A[0/4] @ 0 -> 1; A[1/4] @ 0 -> 1
A[0/2] @ 1 -> 2
)";
    EXPECT_THAT(check_error(text),
                AllOf(HasSubstr("line 6: action 'A[0/2] @ 1 -> 2' can never fire"),
                      HasSubstr("A[0/2] cannot be formed at GPU 1"),
                      HasSubstr("present at the end: A[0/4], A[1/4]")));
}

TEST(SemanticsChunks, ChunkedAndWholeAtomsMix) {
    // A chunked all-reduce of two GPUs: A travels in two chunks, B whole; each GPU sums by
    // chunk, and GPU 1's sum of chunk 1 goes back to GPU 0 beside GPU 0's own chunk-0 sum.
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
IN: B @ 1
OUT: A+B @ 0, 1
A[0/2] @ 0 -> 1; A[1/2] @ 0 -> 1
B @ 1 -> 0
A+B[0/2] @ 0
A+B[1/2] @ 1 -> 0
A+B[0/2] @ 1
)";
    absl::StatusOr<CheckResult> result = check_program(parse(text));
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_TRUE(holds_whole(result->closure, {"A", "B"}, 0));
    EXPECT_TRUE(holds_whole(result->closure, {"A", "B"}, 1));
}

TEST(SemanticsOrder, AnOrderedActionFiresOnlyAfterTheOtherDeparted) {
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
IN: B @ 0
OUT: A @ 1
OUT: B @ 1
first: A @ 0 -> 1
second: B @ 0 -> 1
ORDER: second < first
)";
    const Program program = parse(text);
    ASSERT_TRUE(check_program(program).ok());
    std::vector<int> rounds;
    closure(program, instantiate(program, {}), &rounds);
    EXPECT_EQ(rounds, (std::vector<int>{1, 0})) << "without ORDER both fire in round 0";
    Program unordered = program;
    unordered.orders.clear();
    closure(unordered, instantiate(unordered, {}), &rounds);
    EXPECT_EQ(rounds, (std::vector<int>{0, 0}));
}

TEST(SemanticsOrder, ACycleOfOrderAndDataIsAnErrorNamingItsActions) {
    // b needs the A that a brings to GPU 1, and a is ordered after b.
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
IN: B @ 1
OUT: A+B @ 0
a: A @ 0 -> 1
b: A+B @ 1 -> 0
ORDER: b < a
)";
    EXPECT_THAT(check_error(text),
                AllOf(HasSubstr("ORDER and data dependencies form a cycle"),
                      HasSubstr("line 6: 'a: A @ 0 -> 1' waits (ORDER b < a, line 8) for line "
                                "7: 'b: A+B @ 1 -> 0'"),
                      HasSubstr("line 7: 'b: A+B @ 1 -> 0' needs A @ 1 from line 6: 'a: A @ 0 "
                                "-> 1'")));
}

TEST(SemanticsOrder, AnOrderAfterAnActionThatCanNeverFireBlamesThatAction) {
    const std::string text = R"(
GPUS: 0, 1
IN: A @ 0
OUT: A @ 1
a: A @ 0 -> 1
b: A+A2 @ 1 -> 0
ORDER: b < a
IN: A2 @ 0
)";
    EXPECT_THAT(check_error(text), AllOf(HasSubstr("action 'b: A+A2 @ 1 -> 0' can never fire"),
                                         HasSubstr("A+A2 cannot be formed at GPU 1")));
}

TEST(SemanticsOrder, OrderOnlyDelaysAndNeverChangesTheClosure) {
    // A ring all-gather with every GPU's sends in a chain (tests/golden/exprog/chunked_ring):
    // the closure with ORDER is the one without.
    const std::string text = R"(
GPUS: 0, 1, 2
IN: A @ 0
IN: B @ 1
IN: C @ 2
OUT: A @ 0, 1, 2
OUT: B @ 0, 1, 2
OUT: C @ 0, 1, 2
a0: A[0/2] @ 0 -> 1; a1: A[1/2] @ 0 -> 1; c0: C[0/2] @ 0 -> 1; c1: C[1/2] @ 0 -> 1
b0: B[0/2] @ 1 -> 2; b1: B[1/2] @ 1 -> 2; x0: A[0/2] @ 1 -> 2; x1: A[1/2] @ 1 -> 2
y0: C[0/2] @ 2 -> 0; y1: C[1/2] @ 2 -> 0; z0: B[0/2] @ 2 -> 0; z1: B[1/2] @ 2 -> 0
ORDER: a0 < a1 < c0 < c1
ORDER: b0 < b1 < x0 < x1
ORDER: y0 < y1 < z0 < z1
)";
    const Program program = parse(text);
    absl::StatusOr<CheckResult> result = check_program(program);
    ASSERT_TRUE(result.ok()) << result.status();
    Program unordered = program;
    unordered.orders.clear();
    EXPECT_EQ(closure(unordered, instantiate(unordered, {})), result->closure);
    std::vector<int> rounds;
    closure(program, instantiate(program, {}), &rounds);
    // GPU 0's chain: a0, a1, then C's chunks once they came from GPU 2 and a1 has left.
    EXPECT_EQ(rounds[0], 0);
    EXPECT_EQ(rounds[1], 1);
    EXPECT_EQ(rounds[2], 2);
    EXPECT_EQ(rounds[3], 3);
}

} // namespace
} // namespace einsummable::exprog
