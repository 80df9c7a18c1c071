// The exchange-program language: each syntax form, the paper's example, the printer, and one
// test per kind of error (with its line, column and message).

#include "compiler/exprog/parser.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::exprog {
namespace {

Program parse_ok(const std::string& text) {
    absl::StatusOr<Program> program = parse_program(text);
    EXPECT_TRUE(program.ok()) << program.status() << "\n" << text;
    return program.ok() ? *std::move(program) : Program{};
}

std::string parse_error(const std::string& text) {
    const absl::StatusOr<Program> program = parse_program(text);
    EXPECT_FALSE(program.ok()) << "parsed:\n" << text;
    if (program.ok()) {
        return "";
    }
    EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(program.status().message());
}

Site gpu(int id) {
    return Site::of_gpu(id);
}
Site part(const std::string& name) {
    return Site::of_partition(name);
}

Action action(Aggregate aggregate, Site source, std::vector<std::vector<Site>> hops = {}) {
    Action result;
    result.aggregate = std::move(aggregate);
    result.source = std::move(source);
    result.hops = std::move(hops);
    return result;
}

// A labelled action, whole or chunked.
Action labelled(std::string label, Aggregate aggregate, Chunk chunk, Site source,
                std::vector<std::vector<Site>> hops = {}) {
    Action result = action(std::move(aggregate), std::move(source), std::move(hops));
    result.label = std::move(label);
    result.chunk = chunk;
    return result;
}

OrderDecl order(std::string before, std::string after) {
    return OrderDecl{std::move(before), std::move(after), {}, {}};
}

constexpr char design_example[] = R"(GPUS: 0, 1, 2, 3
PARTITIONS: G1 {0, 1}, G2 {size 2}
IN: A @ 0 (size: 1.0 GB)
IN: B @ 1
OUT: A+B @ 0, 1
OUT: A+B @ G2
A @ 0 -> 1; B @ 1 -> 0
A+B @ 0
A+B @ 1 -> 2, 3
B @ 1 -> 0 -> 3          # relay through 0
)";

TEST(Parser, PaperExampleParsesToTheExpectedStructure) {
    const Program program = parse_ok(design_example);
    Program expected;
    expected.gpus = {0, 1, 2, 3};
    expected.partitions = {Partition{"G1", {0, 1}, std::nullopt, {}}, Partition{"G2", {}, 2, {}}};
    expected.ins = {InDecl{"A", 0, 1e9, {}}, InDecl{"B", 1, 1e9, {}}};
    expected.outs = {OutDecl{{"A", "B"}, {gpu(0), gpu(1)}, {}},
                     OutDecl{{"A", "B"}, {part("G2")}, {}}};
    expected.actions = {
        action({"A"}, gpu(0), {{gpu(1)}}),
        action({"B"}, gpu(1), {{gpu(0)}}),
        action({"A", "B"}, gpu(0)),
        action({"A", "B"}, gpu(1), {{gpu(2), gpu(3)}}),
        action({"B"}, gpu(1), {{gpu(0)}, {gpu(3)}}),
    };
    EXPECT_EQ(program, expected);
    // Locations point at the first token of each element.
    EXPECT_EQ(program.partitions[1].location.line, 2);
    EXPECT_EQ(program.partitions[1].location.column, 24);
    EXPECT_EQ(program.ins[1].location.line, 4);
    EXPECT_EQ(program.ins[1].location.column, 5);
    EXPECT_EQ(program.outs[1].location.line, 6);
    EXPECT_EQ(program.actions[1].location.line, 7);
    EXPECT_EQ(program.actions[1].location.column, 13);
    EXPECT_EQ(program.actions[4].location.line, 10);
    EXPECT_EQ(program.find_partition("G2"), &program.partitions[1]);
    EXPECT_EQ(program.find_partition("G3"), nullptr);
}

TEST(Program, ToStringForms) {
    EXPECT_EQ(aggregate_to_string({"B", "A", "C"}), "A+B+C");
    EXPECT_EQ(gpu(12).to_string(), "12");
    EXPECT_EQ(part("G1").to_string(), "G1");
    EXPECT_EQ(action({"B", "A"}, gpu(0)).to_string(), "A+B @ 0");
    EXPECT_EQ(action({"A"}, gpu(0), {{gpu(5)}, {gpu(6), part("G")}}).to_string(),
              "A @ 0 -> 5 -> 6, G");
}

TEST(Program, EqualityIgnoresLocationsAndActionOrder) {
    Program a = parse_ok("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1\nA @ 1\n");
    Program b = parse_ok("GPUS: 0,1\n\n# comment\nIN: A @ 0\nA @ 1; A @ 0 -> 1\n");
    EXPECT_EQ(a, b);
    b.actions.push_back(b.actions[0]); // a multiset: a repeated action counts
    EXPECT_FALSE(a == b);
    a.actions.push_back(a.actions[1]);
    EXPECT_EQ(a, b);
    Program c = parse_ok("GPUS: 1, 0\nIN: A @ 0\nA @ 0 -> 1\nA @ 1\n");
    EXPECT_FALSE(parse_ok("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1\nA @ 1\n") == c)
        << "the GPU list keeps its order";
}

TEST(Program, ChunksAndLabelsToString) {
    EXPECT_EQ(Chunk{}.to_string(), "");
    EXPECT_EQ((Chunk{0, 1}).to_string(), "");
    EXPECT_EQ((Chunk{3, 8}).to_string(), "[3/8]");
    EXPECT_EQ(
        labelled("c0", {"B", "A"}, Chunk{1, 4}, gpu(0), {{gpu(1)}, {gpu(2), gpu(3)}}).to_string(),
        "c0: A+B[1/4] @ 0 -> 1 -> 2, 3");
    EXPECT_EQ(labelled("", {"A"}, Chunk{0, 4096}, part("G")).to_string(), "A[0/4096] @ G");
}

TEST(Program, ChunkContainment) {
    EXPECT_TRUE(Chunk{}.contains(Chunk{3, 8}));
    EXPECT_TRUE((Chunk{0, 2}).contains(Chunk{1, 4}));
    EXPECT_TRUE((Chunk{1, 2}).contains(Chunk{4095, 4096}));
    EXPECT_TRUE((Chunk{1, 4}).contains(Chunk{1, 4}));
    EXPECT_FALSE((Chunk{0, 2}).contains(Chunk{2, 4}));
    EXPECT_FALSE((Chunk{1, 3}).contains(Chunk{1, 2}));
    EXPECT_FALSE((Chunk{1, 4}).contains(Chunk{0, 2}));
    EXPECT_FALSE((Chunk{0, 2}).contains(Chunk{}));
    EXPECT_TRUE(chunks_cover_whole({Chunk{}}));
    EXPECT_TRUE(chunks_cover_whole({Chunk{1, 2}, Chunk{0, 2}}));
    EXPECT_TRUE(chunks_cover_whole({Chunk{0, 3}, Chunk{1, 4}, Chunk{1, 2}}));
    EXPECT_FALSE(chunks_cover_whole({}));
    EXPECT_FALSE(chunks_cover_whole({Chunk{0, 3}, Chunk{1, 2}}));
    EXPECT_FALSE(chunks_cover_whole({Chunk{0, 2}, Chunk{1, 4}, Chunk{3, 4}}));
}

TEST(Program, EqualityComparesLabelsChunksAndOrdersAsAMultiset) {
    const std::string base = "GPUS: 0, 1\nIN: A @ 0\nx: A[0/2] @ 0 -> 1; y: A[1/2] @ 0 -> 1\n";
    const Program a = parse_ok(base + "z: A @ 1\nORDER: x < y < z\n");
    EXPECT_EQ(a, parse_ok(base + "ORDER: y < z, x < y\nz: A @ 1\n"));
    EXPECT_FALSE(a == parse_ok(base + "z: A @ 1\nORDER: x < y < z, x < y\n"));
    EXPECT_FALSE(a == parse_ok(base + "z: A @ 1\nORDER: x < y\n"));
    EXPECT_FALSE(a == parse_ok(base + "w: A @ 1\nORDER: x < y < w\n"));
    EXPECT_FALSE(parse_ok(base + "A[0/2] @ 1\n") == parse_ok(base + "A[1/2] @ 1\n"));
    EXPECT_FALSE(parse_ok(base + "A[1/2] @ 1\n") == parse_ok(base + "A[2/4] @ 1\n"))
        << "chunks compare as written";
    EXPECT_FALSE(parse_ok(base + "A @ 1\n") == parse_ok(base + "w: A @ 1\n"));
}

TEST(Parser, GpusAndPartitions) {
    const Program program =
        parse_ok("GPUS: 3, 0, 7\nGPUS: 12\nPARTITIONS: P {7, 3}\nPARTITIONS: Q{size 4}, R {12}\n");
    EXPECT_EQ(program.gpus, (std::vector<int>{3, 0, 7, 12}));
    ASSERT_EQ(program.partitions.size(), 3u);
    EXPECT_EQ(program.partitions[0].members, (std::vector<int>{7, 3}));
    EXPECT_FALSE(program.partitions[0].size.has_value());
    EXPECT_EQ(program.partitions[1].size, 4);
    EXPECT_TRUE(program.partitions[1].members.empty());
    EXPECT_EQ(program.partitions[2].name, "R");
}

TEST(Parser, InSizesUseDecimalUnits) {
    const Program program =
        parse_ok("GPUS: 0\nIN: A @ 0\nIN: B @ 0 (size: 2 GB)\nIN: C @ 0 (size: 1.5 MB)\n"
                 "IN: D @ 0 (size: 0.25 KB)\nIN: E @ 0 (size: 12345 B)\nIN: F @ 0 (size:3.0GB)\n");
    ASSERT_EQ(program.ins.size(), 6u);
    EXPECT_EQ(program.ins[0].bytes, 1e9) << "the default is 1 GB";
    EXPECT_EQ(program.ins[1].bytes, 2e9);
    EXPECT_EQ(program.ins[2].bytes, 1.5e6);
    EXPECT_EQ(program.ins[3].bytes, 250);
    EXPECT_EQ(program.ins[4].bytes, 12345);
    EXPECT_EQ(program.ins[5].bytes, 3e9);
}

TEST(Parser, OutSitesMixGpusAndPartitions) {
    const Program program = parse_ok("GPUS: 0, 1, 2\nPARTITIONS: G {size 2}\nIN: A @ 0\nIN: B @ 1\n"
                                     "OUT: A+B @ 0, 1\nOUT: B+A @ G\nOUT: A @ 2, G, 0\n");
    ASSERT_EQ(program.outs.size(), 3u);
    EXPECT_EQ(program.outs[0].sites, (std::vector<Site>{gpu(0), gpu(1)}));
    EXPECT_EQ(program.outs[1].aggregate, (Aggregate{"A", "B"}));
    EXPECT_EQ(program.outs[1].sites, (std::vector<Site>{part("G")}));
    EXPECT_EQ(program.outs[2].sites, (std::vector<Site>{gpu(2), part("G"), gpu(0)}));
}

TEST(Parser, ActionForms) {
    const Program program = parse_ok("GPUS: 0, 1, 2, 3, 5, 6\nPARTITIONS: G1 {0, 1}\n"
                                     "IN: A @ 0\nIN: B @ 1\n"
                                     "A+B @ 0\n"                   // local aggregation
                                     "A @ 0 -> 1, 2, 3\n"          // multicast
                                     "A+B @ G1\n"                  // partition source
                                     "A @ 0 -> 5 -> 6\n"           // relay
                                     "B @ 1 -> G1 -> 2 -> 3, G1\n" // relay ending in a multicast
                                     "A @ 0 -> 1; B @ 1 -> 0;\n"); // several, trailing ';'
    const std::vector<Action> expected = {
        action({"A", "B"}, gpu(0)),
        action({"A"}, gpu(0), {{gpu(1), gpu(2), gpu(3)}}),
        action({"A", "B"}, part("G1")),
        action({"A"}, gpu(0), {{gpu(5)}, {gpu(6)}}),
        action({"B"}, gpu(1), {{part("G1")}, {gpu(2)}, {gpu(3), part("G1")}}),
        action({"A"}, gpu(0), {{gpu(1)}}),
        action({"B"}, gpu(1), {{gpu(0)}}),
    };
    EXPECT_EQ(program.actions, expected);
}

TEST(Parser, CommentsBlankLinesAndWhitespaceDoNotMatter) {
    const Program spaced = parse_ok(design_example);
    const Program compact = parse_ok(
        "#header\n\n  GPUS:0,1,2,3#x\r\nPARTITIONS:G1{0,1},G2{size 2}\nIN:A@0(size:1GB)\nIN:B@1\n"
        "OUT:B+A@0,1\nOUT:A+B@G2\n\t\nA@0->1;B@1->0\nA+B@0\nA+B@1->2,3\nB@1->0->3");
    EXPECT_EQ(spaced, compact);
}

TEST(Parser, DeclarationsMayFollowTheirUse) {
    const Program late = parse_ok("A @ 0 -> G\nOUT: A @ G\nPARTITIONS: G {1}\nIN: A @ 0\n"
                                  "GPUS: 0, 1\n");
    const Program early = parse_ok("GPUS: 0, 1\nPARTITIONS: G {1}\nIN: A @ 0\nOUT: A @ G\n"
                                   "A @ 0 -> G\n");
    EXPECT_EQ(late, early);
}

TEST(Parser, KeywordsAreOrdinaryNamesOutsideHeaders) {
    const Program program = parse_ok("GPUS: 0\nPARTITIONS: size {size 1}, GB {0}\n"
                                     "IN: IN @ 0\nIN: OUT @ 0 (size: 1 B)\nIN: GPUS @ 0\n"
                                     "OUT: IN+OUT @ size, GB\nIN @ 0\nGPUS+OUT @ GB -> size\n");
    EXPECT_EQ(program.actions[0], action({"IN"}, gpu(0)));
    EXPECT_EQ(program.actions[1], action({"GPUS", "OUT"}, part("GB"), {{part("size")}}));
}

TEST(Parser, EmptyTextIsTheEmptyProgram) {
    EXPECT_EQ(parse_ok(""), Program{});
    EXPECT_EQ(parse_ok("# nothing\n\n"), Program{});
    EXPECT_EQ(print_program(Program{}), "");
}

TEST(Printer, WritesTheCanonicalForm) {
    const Program program = parse_ok(design_example);
    EXPECT_EQ(print_program(program), R"(GPUS: 0, 1, 2, 3
PARTITIONS: G1 {0, 1}, G2 {size 2}
IN: A @ 0 (size: 1 GB)
IN: B @ 1 (size: 1 GB)
OUT: A+B @ 0, 1
OUT: A+B @ G2

A @ 0 -> 1
B @ 1 -> 0
A+B @ 0
A+B @ 1 -> 2, 3
B @ 1 -> 0 -> 3
)");
}

TEST(Printer, PicksTheLargestExactUnit) {
    auto printed_size = [](double bytes) {
        Program program;
        program.gpus = {0};
        program.ins.push_back(InDecl{"A", 0, bytes, {}});
        const std::string text = print_program(program);
        const size_t open = text.find("(size: ");
        return text.substr(open + 7, text.find(')') - open - 7);
    };
    EXPECT_EQ(printed_size(1e9), "1 GB");
    EXPECT_EQ(printed_size(2.5e9), "2.5 GB");
    EXPECT_EQ(printed_size(512e6), "512 MB");
    EXPECT_EQ(printed_size(1500), "1.5 KB");
    EXPECT_EQ(printed_size(999), "999 B");
    EXPECT_EQ(printed_size(1234567), "1.234567 MB");
    EXPECT_EQ(printed_size(1234567.5), "1.2345675 MB");
    EXPECT_EQ(printed_size(0.1 + 0.2), "0.30000000000000004 B");
    EXPECT_EQ(printed_size(0.5), "0.5 B");
}

TEST(Parser, OldProgramsHaveNoLabelsChunksOrOrders) {
    const Program program = parse_ok(design_example);
    ASSERT_EQ(program.actions.size(), 5u);
    for (const Action& one : program.actions) {
        EXPECT_EQ(one.label, "");
        EXPECT_TRUE(one.chunk.whole());
        EXPECT_EQ(one.chunk, Chunk{});
    }
    EXPECT_TRUE(program.orders.empty());
    EXPECT_EQ(program.find_action(""), -1);
}

TEST(Parser, LabelsAndChunks) {
    const Program program = parse_ok("GPUS: 0, 1, 2\nIN: A @ 0\nIN: B @ 0\n"
                                     "c0: A[0/2] @ 0 -> 2\n"
                                     "c1: A+B[1/2] @ 0 -> 1 -> 2\n"
                                     "A[3/8] @ 0\n"
                                     "d_9:B@0->1,2\n"
                                     "big: B[4095/4096] @ 0 -> 1\n");
    const std::vector<Action> expected = {
        labelled("c0", {"A"}, Chunk{0, 2}, gpu(0), {{gpu(2)}}),
        labelled("c1", {"A", "B"}, Chunk{1, 2}, gpu(0), {{gpu(1)}, {gpu(2)}}),
        labelled("", {"A"}, Chunk{3, 8}, gpu(0)),
        labelled("d_9", {"B"}, Chunk{}, gpu(0), {{gpu(1), gpu(2)}}),
        labelled("big", {"B"}, Chunk{4095, 4096}, gpu(0), {{gpu(1)}}),
    };
    EXPECT_EQ(program.actions, expected);
    // A labelled action starts at its label.
    EXPECT_EQ(program.actions[0].location.line, 4);
    EXPECT_EQ(program.actions[0].location.column, 1);
    EXPECT_EQ(program.actions[2].location.line, 6);
    EXPECT_EQ(program.actions[2].location.column, 1);
    EXPECT_EQ(program.find_action("c1"), 1);
    EXPECT_EQ(program.find_action("big"), 4);
    EXPECT_EQ(program.find_action("c2"), -1);
}

TEST(Parser, LabelsAfterSemicolons) {
    const Program program = parse_ok("GPUS: 0, 1, 2\nIN: A @ 0\nIN: B @ 0\n"
                                     "c0: A @ 0 -> 1; c1: B @ 0 -> 2;  B @ 0; c2:A[1/3]@0;\n");
    const std::vector<Action> expected = {
        labelled("c0", {"A"}, Chunk{}, gpu(0), {{gpu(1)}}),
        labelled("c1", {"B"}, Chunk{}, gpu(0), {{gpu(2)}}),
        action({"B"}, gpu(0)),
        labelled("c2", {"A"}, Chunk{1, 3}, gpu(0)),
    };
    EXPECT_EQ(program.actions, expected);
    EXPECT_EQ(program.actions[1].location.line, 4);
    EXPECT_EQ(program.actions[1].location.column, 17);
}

TEST(Parser, LabelsMayShareAtomAndPartitionNames) {
    const Program program = parse_ok("GPUS: 0, 1\nPARTITIONS: P {1}\nIN: A @ 0\n"
                                     "A: A @ 0 -> P; P: A @ 0; size: A @ 0 -> 1; GB: A[1/2] @ 0\n"
                                     "ORDER: A < P < size < GB\n");
    ASSERT_EQ(program.actions.size(), 4u);
    EXPECT_EQ(program.actions[0], labelled("A", {"A"}, Chunk{}, gpu(0), {{part("P")}}));
    EXPECT_EQ(program.actions[3].label, "GB");
    EXPECT_EQ(program.orders.size(), 3u);
}

TEST(Parser, ChunkZeroOfOneIsTheWholeBlock) {
    const Program chunked = parse_ok("GPUS: 0, 1\nIN: A @ 0\nA[0/1] @ 0 -> 1\nc: A[00/01] @ 1\n");
    const Program whole = parse_ok("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1\nc: A @ 1\n");
    EXPECT_EQ(chunked, whole);
    EXPECT_EQ(chunked.actions[0].chunk, (Chunk{0, 1}));
    EXPECT_TRUE(chunked.actions[1].chunk.whole());
    EXPECT_EQ(print_program(chunked),
              "GPUS: 0, 1\nIN: A @ 0 (size: 1 GB)\n\nA @ 0 -> 1\nc: A @ 1\n");
}

TEST(Parser, OrderChainsArePairsInTextOrder) {
    const Program program = parse_ok("ORDER: a < b < c, d < e\n"
                                     "GPUS: 0, 1\nIN: A @ 0\n"
                                     "a: A[0/5] @ 0 -> 1; b: A[1/5] @ 0 -> 1; c: A[2/5] @ 0 -> 1\n"
                                     "d: A[3/5] @ 0 -> 1; e: A[4/5] @ 0 -> 1\n"
                                     "ORDER:e<a\n");
    const std::vector<OrderDecl> expected = {order("a", "b"), order("b", "c"), order("d", "e"),
                                             order("e", "a")};
    ASSERT_EQ(program.orders, expected);
    auto location = [](const SourceLocation& where) { return std::pair(where.line, where.column); };
    EXPECT_EQ(location(program.orders[0].location), std::pair(1, 8));
    EXPECT_EQ(location(program.orders[0].after_location), std::pair(1, 12));
    EXPECT_EQ(location(program.orders[1].location), std::pair(1, 12));
    EXPECT_EQ(location(program.orders[1].after_location), std::pair(1, 16));
    EXPECT_EQ(location(program.orders[2].location), std::pair(1, 19));
    EXPECT_EQ(location(program.orders[2].after_location), std::pair(1, 23));
    EXPECT_EQ(location(program.orders[3].location), std::pair(6, 7));
    EXPECT_EQ(location(program.orders[3].after_location), std::pair(6, 9));
}

TEST(Parser, DuplicateOrderPairsAreAllowed) {
    const Program program = parse_ok("GPUS: 0, 1\nIN: A @ 0\nx: A @ 0 -> 1; y: A @ 1\n"
                                     "ORDER: x < y, x < y\nORDER: x < y\n");
    EXPECT_EQ(program.orders.size(), 3u);
}

TEST(Parser, OrderIsAnOrdinaryNameOutsideHeaders) {
    const Program program = parse_ok("GPUS: 0, 1\nPARTITIONS: ORDER {0, 1}\n"
                                     "IN: ORDER @ 0\nIN: X @ 0\nOUT: ORDER+X @ ORDER\n"
                                     "ORDER @ 0 -> 1\n"
                                     "ORDER[1/2] @ 0 -> ORDER\n"
                                     "ORDER+X @ ORDER; x: ORDER @ ORDER\n");
    const std::vector<Action> expected = {
        action({"ORDER"}, gpu(0), {{gpu(1)}}),
        labelled("", {"ORDER"}, Chunk{1, 2}, gpu(0), {{part("ORDER")}}),
        action({"ORDER", "X"}, part("ORDER")),
        labelled("x", {"ORDER"}, Chunk{}, part("ORDER")),
    };
    EXPECT_EQ(program.actions, expected);
    EXPECT_TRUE(program.orders.empty());
    EXPECT_EQ(program.outs.at(0).sites, (std::vector<Site>{part("ORDER")}));
}

TEST(Printer, WritesLabelsChunksAndOrderLinesLast) {
    const Program program = parse_ok("ORDER: c0 < c1\nGPUS: 0, 1\nIN: A @ 0\n"
                                     "ORDER: c1 < c2, c0 < c3\n"
                                     "c0: A[0/4] @ 0 -> 1\nc1: A[1/4] @ 0 -> 1\n"
                                     "c2: A[2/4] @ 0 -> 1; c3: A[3/4] @ 0 -> 1\n"
                                     "A[0/1] @ 0\n"
                                     "ORDER: c1 < c2 < c3\n");
    const std::string printed = print_program(program);
    EXPECT_EQ(printed, R"(GPUS: 0, 1
IN: A @ 0 (size: 1 GB)

c0: A[0/4] @ 0 -> 1
c1: A[1/4] @ 0 -> 1
c2: A[2/4] @ 0 -> 1
c3: A[3/4] @ 0 -> 1
A @ 0
ORDER: c0 < c1 < c2
ORDER: c0 < c3
ORDER: c1 < c2 < c3
)");
    const Program reread = parse_ok(printed);
    EXPECT_EQ(reread, program);
    EXPECT_EQ(reread.orders, program.orders) << "the pairs keep their order";
    EXPECT_EQ(print_program(reread), printed);
}

TEST(Printer, OrderLinesFollowTheActionsOfAProgramWithoutHeaders) {
    // Not a valid program (no IN declares A), but the printer still writes it.
    Program program;
    program.actions = {labelled("a", {"A"}, Chunk{}, gpu(0)),
                       labelled("b", {"A"}, Chunk{1, 2}, gpu(0))};
    program.orders = {order("a", "b"), order("b", "a"), order("a", "b")};
    EXPECT_EQ(print_program(program), "a: A @ 0\nb: A[1/2] @ 0\nORDER: a < b < a < b\n");
}

// ---------------------------------------------------------------------------------------------
// Errors: one test per kind, with the exact message.

TEST(ParserErrors, MissingAtAfterAggregate) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\n    A+B -> 1\n"),
              "line 3 column 9: expected '@' after aggregate 'A+B', found '->'");
    EXPECT_EQ(parse_error("GPUS: 0\nOUT: A+B 0\n"),
              "line 2 column 10: expected '@' after aggregate 'A+B', found '0'");
}

TEST(ParserErrors, UnexpectedCharacter) {
    EXPECT_EQ(parse_error("GPUS: 0, $1\n"),
              "line 1 column 10: expected a GPU id (a non-negative integer) after ',', found "
              "character '$'");
    EXPECT_EQ(parse_error("GPUS: 0\nA @ 0 \x01\n"),
              "line 2 column 7: expected '->', ';' or end of line after an action, found "
              "character '\\x01'");
    EXPECT_EQ(parse_error("GPUS: -1\n"),
              "line 1 column 7: expected a GPU id (a non-negative integer) after 'GPUS:', found "
              "character '-'");
}

TEST(ParserErrors, EmptyLists) {
    EXPECT_EQ(parse_error("GPUS:\n"),
              "line 1 column 6: expected a GPU id (a non-negative integer) after 'GPUS:', found "
              "end of line");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G {}\n"),
              "line 2 column 16: expected a GPU id or 'size' after '{' in partition 'G', found "
              "'}'");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nOUT: A @"),
              "line 3 column 9: expected a GPU id or partition name after '@', found end of "
              "input");
}

TEST(ParserErrors, MissingColonAfterHeader) {
    EXPECT_EQ(parse_error("GPUS 0, 1\n"), "line 1 column 6: expected ':' after 'GPUS', found '0'");
}

TEST(ParserErrors, HeaderMustStartALine) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nA @ 0; IN: B @ 0\n"),
              "line 3 column 8: 'IN' is a header keyword, not a label: a header 'IN:' must start "
              "a line");
}

TEST(ParserErrors, UndeclaredGpu) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 1\n"),
              "line 2 column 9: undeclared GPU 1 in IN of atom 'A'");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1, 4\n"),
              "line 3 column 13: undeclared GPU 4");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nPARTITIONS: G {1, 2}\n"),
              "line 2 column 19: undeclared GPU 2 in partition 'G'");
    EXPECT_EQ(parse_error("IN: A @ 0\n"), "line 1 column 9: undeclared GPU 0 in IN of atom 'A'")
        << "no GPUS line declares nothing";
}

TEST(ParserErrors, DuplicateGpu) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nGPUS: 2, 1\n"), "line 2 column 10: GPU 1 is declared twice");
}

TEST(ParserErrors, GpuIdTooLarge) {
    EXPECT_EQ(parse_error("GPUS: 0, 2147483648\n"),
              "line 1 column 10: GPU id '2147483648' is too large");
    EXPECT_TRUE(parse_program("GPUS: 2147483647\n").ok());
}

TEST(ParserErrors, UndeclaredPartition) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nOUT: A @ 0, G9\n"),
              "line 3 column 13: undeclared partition 'G9'");
}

TEST(ParserErrors, DuplicatePartitionName) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nPARTITIONS: G {0}\nPARTITIONS: H {1}, G {size 1}\n"),
              "line 3 column 20: duplicate partition name 'G'");
}

TEST(ParserErrors, PartitionMemberListedTwice) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nPARTITIONS: G {0, 1, 0}\n"),
              "line 2 column 22: GPU 0 is listed twice in partition 'G'");
}

TEST(ParserErrors, PartitionSizeOutOfRange) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nPARTITIONS: G {size 3}\n"),
              "line 2 column 21: partition 'G' has size 3 but only 2 GPUs are declared");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nPARTITIONS: G {size 0}\n"),
              "line 2 column 21: partition 'G' has size 0; a size must be at least 1");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G {size 1.5}\n"),
              "line 2 column 21: expected a partition size (a positive integer) after 'size', "
              "found '1.5'");
}

TEST(ParserErrors, MissingBrace) {
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G {0\n"),
              "line 2 column 17: expected '}' closing partition 'G', found end of line");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G 0\n"),
              "line 2 column 15: expected '{' after partition name 'G', found '0'");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: 1 {0}\n"),
              "line 2 column 13: expected a partition name after 'PARTITIONS:', found '1'");
}

TEST(ParserErrors, AtomRepeatedInAggregate) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nIN: B @ 0\nA+B+A @ 0\n"),
              "line 4 column 5: atom 'A' is repeated in aggregate 'A+B+A'");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nOUT: A+A @ 0\n"),
              "line 3 column 8: atom 'A' is repeated in aggregate 'A+A'");
}

TEST(ParserErrors, UndeclaredAtom) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nA+C @ 0\n"),
              "line 3 column 3: undeclared atom 'C' (no IN declares it)");
}

TEST(ParserErrors, EmptyHop) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> -> 1\n"),
              "line 3 column 10: empty hop: expected a GPU id or partition name after '->', "
              "found '->'");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 ->\n"),
              "line 3 column 9: empty hop: expected a GPU id or partition name after '->', "
              "found end of line");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1,\n"),
              "line 3 column 12: expected a GPU id or partition name after ',', found end of "
              "line");
}

TEST(ParserErrors, MulticastInANonFinalRelayHop) {
    EXPECT_EQ(parse_error("GPUS: 0, 1, 2, 3\nIN: A @ 0\nA @ 0 -> 1, 2 -> 3\n"),
              "line 3 column 15: multicast in a non-final relay hop: only the last hop may name "
              "several sites");
}

TEST(ParserErrors, SiteListedTwice) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0 -> 1, 1\n"),
              "line 3 column 13: site '1' is listed twice in a hop");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G {0}\nIN: A @ 0\nOUT: A @ G, 0, G\n"),
              "line 4 column 16: site 'G' is listed twice in OUT");
}

TEST(ParserErrors, ActionHasOneSource) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nA @ 0, 1 -> 1\n"),
              "line 3 column 6: expected '->', ';' or end of line after an action, found ','");
}

TEST(ParserErrors, BadSizeUnit) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 1 GiB)\n"),
              "line 2 column 20: bad size unit 'GiB': expected GB, MB, KB or B");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 1 gb)\n"),
              "line 2 column 20: bad size unit 'gb': expected GB, MB, KB or B");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 100)\n"),
              "line 2 column 21: expected a size unit (GB, MB, KB or B) after '100', found ')'");
}

TEST(ParserErrors, BadSize) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 0.0 GB)\n"),
              "line 2 column 18: a size must be positive");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 1e9 B)\n"),
              "line 2 column 19: bad size unit 'e9': expected GB, MB, KB or B");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: .5 GB)\n"),
              "line 2 column 18: expected a size (a decimal number such as 1.5) after 'size:', "
              "found character '.'");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: 1 GB\n"),
              "line 2 column 22: expected ')' closing the size, found end of line");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (1 GB)\n"),
              "line 2 column 12: expected 'size' after '(', found '1'");
    const std::string huge(400, '9');
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0 (size: " + huge + " GB)\n"),
              "line 2 column 18: size '" + huge.substr(0, 40) + "...' is out of range");
}

TEST(ParserErrors, InDeclaresOneAtomAtOneGpu) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A+B @ 0\n"),
              "line 2 column 6: expected '@' after atom 'A' (an IN declares one atom), found '+'");
    EXPECT_EQ(parse_error("GPUS: 0\nPARTITIONS: G {0}\nIN: A @ G\n"),
              "line 3 column 9: expected a GPU id (a non-negative integer) after '@' (an IN is "
              "at one GPU), found 'G'");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0, 1\n"),
              "line 2 column 10: expected end of line after IN 'A', found ','");
}

TEST(ParserErrors, DuplicateIn) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nIN: A @ 0\n"),
              "line 3 column 5: atom 'A' is declared twice at GPU 0");
}

TEST(ParserErrors, CopiesOfAnAtomHaveOneSize) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nIN: A @ 1 (size: 2 GB)\n"),
              "line 3 column 5: atom 'A' has size 2 GB at GPU 1 but 1 GB at GPU 0; copies of an "
              "atom have one size");
}

TEST(ParserErrors, TheFirstErrorInTheTextWins) {
    // The declaration on line 2 is checked after the whole text is read, but it is reported
    // before the one on line 3.
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 5\nOUT: A @ G\n"),
              "line 2 column 9: undeclared GPU 5 in IN of atom 'A'");
    EXPECT_EQ(parse_error("OUT: A @ G\nGPUS: 0\nIN: A @ 5\n"),
              "line 1 column 10: undeclared partition 'G'");
}

// "GPUS: 0, 1\nIN: A @ 0\n" then `line` as line 3.
std::string action_error(const std::string& line) {
    return parse_error("GPUS: 0, 1\nIN: A @ 0\n" + line + "\n");
}

TEST(ParserErrors, ChunkIndexOutOfRange) {
    EXPECT_EQ(action_error("A[4/4] @ 0 -> 1"),
              "line 3 column 3: chunk index 4 out of range for 4 chunks (0 to 3)");
    EXPECT_EQ(action_error("A[1/1] @ 0"),
              "line 3 column 3: chunk index 1 out of range for 1 chunk (0 to 0)");
    EXPECT_EQ(action_error("c0: A @ 0; A[4096/4096] @ 0"),
              "line 3 column 14: chunk index 4096 out of range for 4096 chunks (0 to 4095)");
}

TEST(ParserErrors, ChunkCountOutOfRange) {
    EXPECT_EQ(action_error("A[0/0] @ 0"),
              "line 3 column 5: chunk count 0: must be between 1 and 4096");
    EXPECT_EQ(action_error("A[7/4097] @ 0"),
              "line 3 column 5: chunk count 4097: must be between 1 and 4096");
    EXPECT_TRUE(parse_program("GPUS: 0\nIN: A @ 0\nA[4095/4096] @ 0\n").ok());
}

TEST(ParserErrors, ChunkIntegerTooLarge) {
    EXPECT_EQ(action_error("A[2147483648/4] @ 0"),
              "line 3 column 3: chunk index '2147483648' is too large");
    EXPECT_EQ(action_error("A[0/99999999999] @ 0"),
              "line 3 column 5: chunk count '99999999999' is too large");
    EXPECT_EQ(action_error("A[2147483647/2147483647] @ 0"),
              "line 3 column 14: chunk count 2147483647: must be between 1 and 4096");
}

TEST(ParserErrors, ChunkSyntax) {
    EXPECT_EQ(action_error("A[1 4] @ 0"),
              "line 3 column 5: expected '/' after chunk index '1', found '4'");
    EXPECT_EQ(action_error("A[1/4 @ 0"),
              "line 3 column 7: expected ']' closing the chunk, found '@'");
    EXPECT_EQ(action_error("A[/4] @ 0"),
              "line 3 column 3: expected a chunk index (a non-negative integer) after '[', found "
              "'/'");
    EXPECT_EQ(action_error("A[-1/4] @ 0"),
              "line 3 column 3: expected a chunk index (a non-negative integer) after '[', found "
              "character '-'");
    EXPECT_EQ(action_error("A[1.5/4] @ 0"),
              "line 3 column 3: expected a chunk index (a non-negative integer) after '[', found "
              "'1.5'");
    EXPECT_EQ(action_error("A[1/] @ 0"),
              "line 3 column 5: expected a chunk count (a positive integer) after '/', found ']'");
    EXPECT_EQ(action_error("A[1/4]+B @ 0"),
              "line 3 column 7: expected '@' after aggregate 'A[1/4]', found '+'");
    EXPECT_EQ(action_error("A[1/4][0/2] @ 0"),
              "line 3 column 7: expected '@' after aggregate 'A[1/4]', found '['");
    EXPECT_EQ(action_error("A @ 0[0/2]"),
              "line 3 column 6: expected '->', ';' or end of line after an action, found '['");
}

TEST(ParserErrors, InAndOutTakeNoChunk) {
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nOUT: A[0/2] @ 0\n"),
              "line 3 column 7: OUT takes whole aggregates: no chunk");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nOUT: A+B[0/1] @ 0\n"),
              "line 3 column 9: OUT takes whole aggregates: no chunk");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A[0/2] @ 0\n"),
              "line 2 column 6: IN takes whole atoms: no chunk");
}

TEST(ParserErrors, DuplicateLabel) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\n\nc0: A @ 0 -> 1\nA @ 0; c0: A @ 1\n"),
              "line 5 column 8: duplicate label 'c0' (first at line 4)");
    EXPECT_EQ(action_error("c0: A[0/2] @ 0; c0: A[1/2] @ 0"),
              "line 3 column 17: duplicate label 'c0' (first at line 3)");
}

TEST(ParserErrors, HeaderKeywordsAreNotLabels) {
    EXPECT_EQ(action_error("A @ 0; ORDER: c0 < c1"),
              "line 3 column 8: 'ORDER' is a header keyword, not a label: a header 'ORDER:' "
              "must start a line");
    EXPECT_EQ(action_error("c0: OUT: A @ 0"),
              "line 3 column 5: 'OUT' is a header keyword, not a label: a header 'OUT:' must "
              "start a line");
    EXPECT_EQ(action_error("A @ 0 -> 1; GPUS: A @ 0"),
              "line 3 column 13: 'GPUS' is a header keyword, not a label: a header 'GPUS:' must "
              "start a line");
    EXPECT_EQ(action_error("A @ 0;PARTITIONS:A @ 0"),
              "line 3 column 7: 'PARTITIONS' is a header keyword, not a label: a header "
              "'PARTITIONS:' must start a line");
}

TEST(ParserErrors, AnActionHasOneLabel) {
    EXPECT_EQ(action_error("c0: c1: A @ 0"),
              "line 3 column 5: second label 'c1' on an action labelled 'c0': an action has at "
              "most one label");
    EXPECT_EQ(action_error("c0: @ 0"),
              "line 3 column 5: expected an atom name after label 'c0', found '@'");
    EXPECT_EQ(action_error("c0:"),
              "line 3 column 4: expected an atom name after label 'c0', found end of line");
    EXPECT_EQ(action_error("A @ 0; c0"),
              "line 3 column 10: expected '@' after aggregate 'c0', found end of line");
}

TEST(ParserErrors, OrderSyntax) {
    EXPECT_EQ(action_error("ORDER: a"),
              "line 3 column 9: expected '<' after label 'a' in ORDER, found end of line");
    EXPECT_EQ(action_error("ORDER: a < b, c"),
              "line 3 column 16: expected '<' after label 'c' in ORDER, found end of line");
    EXPECT_EQ(action_error("ORDER: a, b < c"),
              "line 3 column 9: expected '<' after label 'a' in ORDER, found ','");
    EXPECT_EQ(action_error("ORDER:"),
              "line 3 column 7: expected a label after 'ORDER:', found end of line");
    EXPECT_EQ(action_error("ORDER: a <"),
              "line 3 column 11: expected a label after '<', found end of line");
    EXPECT_EQ(action_error("ORDER: a < b,"),
              "line 3 column 14: expected a label after ',', found end of line");
    EXPECT_EQ(action_error("ORDER: a < 1"),
              "line 3 column 12: expected a label after '<', found '1'");
    EXPECT_EQ(action_error("ORDER: a < b c"),
              "line 3 column 14: expected '<', ',' or end of line after label 'b' in ORDER, "
              "found 'c'");
    EXPECT_EQ(action_error("ORDER: a < b; c < d"),
              "line 3 column 13: expected '<', ',' or end of line after label 'b' in ORDER, "
              "found ';'");
    EXPECT_EQ(action_error("ORDER: a << b"),
              "line 3 column 11: expected a label after '<', found '<'");
    EXPECT_EQ(action_error("ORDER a < b"),
              "line 3 column 7: expected ':' after 'ORDER', found 'a'");
}

TEST(ParserErrors, OrderNamesAnUndeclaredLabel) {
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nORDER: c0 < x\nc0: A @ 0 -> 1\n"),
              "line 3 column 13: ORDER names label 'x' that no action has");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nc0: A @ 0 -> 1\nORDER: x < c0\n"),
              "line 4 column 8: ORDER names label 'x' that no action has");
    EXPECT_EQ(parse_error("GPUS: 0, 1\nIN: A @ 0\nc0: A @ 0 -> 1\nORDER: c0 < A\n"),
              "line 4 column 13: ORDER names label 'A' that no action has")
        << "an atom name is not a label";
}

TEST(ParserErrors, ActionOrderedAfterItself) {
    EXPECT_EQ(action_error("c0: A @ 0 -> 1\nORDER: c0 < c0"),
              "line 4 column 13: action 'c0' is ordered after itself");
    EXPECT_EQ(action_error("c0: A @ 0 -> 1; c1: A @ 1\nORDER: c0 < c1 < c1"),
              "line 4 column 18: action 'c1' is ordered after itself");
}

TEST(ParserErrors, TheFirstErrorInTheTextWinsAmongTheNewRules) {
    // The ORDER on line 1 is checked once every label is known, and reported first.
    EXPECT_EQ(parse_error("ORDER: a < b\nGPUS: 0\nIN: A @ 5\na: A @ 0\n"),
              "line 1 column 12: ORDER names label 'b' that no action has");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\na: A[2/2] @ 0\na: A @ 0\nORDER: b < a\n"),
              "line 3 column 6: chunk index 2 out of range for 2 chunks (0 to 1)");
    EXPECT_EQ(parse_error("GPUS: 0\nIN: A @ 0\nORDER: a < a\na: A @ 0\na: A @ 0\n"),
              "line 3 column 12: action 'a' is ordered after itself");
}

TEST(CheckDeclarations, ProgramsBuiltInCode) {
    Program program = parse_ok(design_example);
    EXPECT_TRUE(check_declarations(program).ok());
    program.actions.push_back(action({"A"}, gpu(9)));
    EXPECT_EQ(check_declarations(program).message(), "undeclared GPU 9");
    program.actions.back() = action({"A"}, gpu(0), {{gpu(1), gpu(2)}, {gpu(3)}});
    EXPECT_EQ(check_declarations(program).message(),
              "multicast in a non-final relay hop: only the last hop may name several sites");
    program.actions.back() = action({"A"}, gpu(0), {{}});
    EXPECT_EQ(check_declarations(program).message(), "empty hop in action");
    program.actions.back() = action({}, gpu(0));
    EXPECT_EQ(check_declarations(program).message(), "empty aggregate in action");
    program.actions.pop_back();
    program.ins[0].atom = "not an identifier";
    EXPECT_THAT(std::string(check_declarations(program).message()),
                ::testing::HasSubstr("is not an identifier"));
    program.ins[0].atom = "A";
    program.ins[0].location = SourceLocation{4, 5};
    program.ins[0].gpu = 17;
    EXPECT_EQ(check_declarations(program).message(),
              "line 4 column 5: undeclared GPU 17 in IN of atom 'A'");
}

TEST(CheckDeclarations, LabelsChunksAndOrdersBuiltInCode) {
    Program program = parse_ok("GPUS: 0, 1\nIN: A @ 0\n");
    program.actions = {labelled("c0", {"A"}, Chunk{0, 2}, gpu(0), {{gpu(1)}}),
                       labelled("c1", {"A"}, Chunk{1, 2}, gpu(0), {{gpu(1)}}),
                       labelled("", {"A"}, Chunk{}, gpu(1))};
    program.orders = {order("c0", "c1"), order("c0", "c1")};
    EXPECT_TRUE(check_declarations(program).ok()) << check_declarations(program);

    Program bad = program;
    bad.actions[1].chunk = Chunk{2, 2};
    EXPECT_EQ(check_declarations(bad).message(),
              "chunk index 2 out of range for 2 chunks (0 to 1)");
    bad.actions[1].chunk = Chunk{-1, 4};
    EXPECT_EQ(check_declarations(bad).message(),
              "chunk index -1 out of range for 4 chunks (0 to 3)");
    bad.actions[1].chunk = Chunk{0, 4097};
    EXPECT_EQ(check_declarations(bad).message(), "chunk count 4097: must be between 1 and 4096");
    bad.actions[1].chunk = Chunk{0, -2};
    EXPECT_EQ(check_declarations(bad).message(), "chunk count -2: must be between 1 and 4096");
    bad.actions[1].chunk = Chunk{0, 0};
    bad.actions[1].location = SourceLocation{7, 3};
    EXPECT_EQ(check_declarations(bad).message(),
              "line 7 column 3: chunk count 0: must be between 1 and 4096");

    bad = program;
    bad.actions[2].label = "c0";
    EXPECT_EQ(check_declarations(bad).message(), "duplicate label 'c0'");
    bad.actions[0].location = SourceLocation{4, 1};
    bad.actions[2].location = SourceLocation{9, 2};
    EXPECT_EQ(check_declarations(bad).message(),
              "line 9 column 2: duplicate label 'c0' (first at line 4)");
    bad.actions[2].label = "c 2";
    EXPECT_EQ(check_declarations(bad).message(),
              "line 9 column 2: label 'c 2' is not an identifier (a letter, then letters, digits "
              "or '_')");
    bad.actions[2].label = "ORDER";
    EXPECT_EQ(check_declarations(bad).message(),
              "line 9 column 2: 'ORDER' is a header keyword, not a label: a header 'ORDER:' must "
              "start a line");

    bad = program;
    bad.orders.push_back(order("c1", "zz"));
    EXPECT_EQ(check_declarations(bad).message(), "ORDER names label 'zz' that no action has");
    bad.orders.back() = order("", "c1");
    EXPECT_EQ(check_declarations(bad).message(), "ORDER names label '' that no action has")
        << "an unlabelled action cannot be ordered";
    bad.orders.back() = order("c1", "c1");
    EXPECT_EQ(check_declarations(bad).message(), "action 'c1' is ordered after itself");
    bad.orders.back() = OrderDecl{"c1", "c1", SourceLocation{5, 8}, {}};
    EXPECT_EQ(check_declarations(bad).message(),
              "line 5 column 8: action 'c1' is ordered after itself")
        << "without its own location, `after` is reported at the pair's";
    bad.orders.back() = OrderDecl{"c1", "c1", SourceLocation{5, 8}, SourceLocation{5, 13}};
    EXPECT_EQ(check_declarations(bad).message(),
              "line 5 column 13: action 'c1' is ordered after itself");
}

} // namespace
} // namespace einsummable::exprog
