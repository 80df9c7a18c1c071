// Round trips of the printer and parser: the golden programs of tests/golden/exprog (each
// <name>.exprog with its canonical form <name>.printed; EINSUMMABLE_UPDATE_GOLDEN=1 rewrites the
// .printed files) and a few hundred seeded random programs.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "compiler/exprog/parser.h"
#include "gtest/gtest.h"
#include "tests/unit/exprog/random_program.h"

namespace einsummable::exprog {
namespace {

const std::filesystem::path golden_dir =
    std::filesystem::path(EINSUMMABLE_SOURCE_DIR) / "tests/golden/exprog";

std::string read_file(const std::filesystem::path& path) {
    std::ifstream file(path, std::ios::binary);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
}

std::vector<std::string> golden_names() {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(golden_dir)) {
        if (entry.path().extension() == ".exprog") {
            names.push_back(entry.path().stem().string());
        }
    }
    std::sort(names.begin(), names.end());
    return names;
}

TEST(GoldenPrograms, TheDirectoryHoldsThePaperExamples) {
    const std::vector<std::string> names = golden_names();
    for (const char* name : {"paper_two_gpus", "paper_four_gpus", "paper_size_partitions"}) {
        EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
    }
}

class GoldenProgram : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenProgram, PrintsAsTheGoldenFileAndReadsBack) {
    const std::filesystem::path source = golden_dir / (GetParam() + ".exprog");
    const std::filesystem::path printed_path = golden_dir / (GetParam() + ".printed");
    const absl::StatusOr<Program> program = parse_program(read_file(source));
    ASSERT_TRUE(program.ok()) << source << ": " << program.status();
    const std::string printed = print_program(*program);
    if (std::getenv("EINSUMMABLE_UPDATE_GOLDEN") != nullptr) {
        std::ofstream(printed_path, std::ios::binary) << printed;
        GTEST_SKIP() << "rewrote " << printed_path;
    }
    ASSERT_TRUE(std::filesystem::exists(printed_path))
        << "missing " << printed_path << " (run with EINSUMMABLE_UPDATE_GOLDEN=1)";
    const std::string expected = read_file(printed_path);
    EXPECT_EQ(printed, expected) << "printed form of " << source
                                 << " changed; if intended, rerun with EINSUMMABLE_UPDATE_GOLDEN=1";
    const absl::StatusOr<Program> reread = parse_program(expected);
    ASSERT_TRUE(reread.ok()) << printed_path << ": " << reread.status();
    EXPECT_EQ(*reread, *program);
    EXPECT_EQ(print_program(*reread), expected);
}

INSTANTIATE_TEST_SUITE_P(Files, GoldenProgram, ::testing::ValuesIn(golden_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

TEST(RandomPrograms, PrintThenParseIsTheIdentity) {
    std::mt19937_64 rng(testing::test_seed(20240601, "RandomPrograms"));
    // What the programs exercised: labels, chunks and ORDER lines must all occur.
    int labelled = 0, unlabelled = 0, chunked = 0, large_chunks = 0, orders = 0, chains = 0;
    for (int i = 0; i < 400; ++i) {
        const Program program = testing::random_program(rng);
        ASSERT_TRUE(check_declarations(program).ok()) << check_declarations(program);
        const std::string printed = print_program(program);
        const absl::StatusOr<Program> reread = parse_program(printed);
        ASSERT_TRUE(reread.ok()) << "program " << i << ": " << reread.status() << "\n" << printed;
        ASSERT_EQ(*reread, program) << "program " << i << ":\n" << printed;
        ASSERT_EQ(reread->orders, program.orders) << "program " << i << ": ORDER pairs in order";
        ASSERT_EQ(print_program(*reread), printed) << "program " << i;
        for (const Action& action : program.actions) {
            ++(action.label.empty() ? unlabelled : labelled);
            chunked += action.chunk.whole() ? 0 : 1;
            large_chunks += action.chunk.count > 8 ? 1 : 0;
        }
        orders += static_cast<int>(program.orders.size());
        for (size_t j = 1; j < program.orders.size(); ++j) {
            chains += program.orders[j].before == program.orders[j - 1].after ? 1 : 0;
        }
    }
    EXPECT_GT(labelled, 0);
    EXPECT_GT(unlabelled, 0);
    EXPECT_GT(chunked, 0);
    EXPECT_GT(large_chunks, 0);
    EXPECT_GT(orders, 0);
    EXPECT_GT(chains, 0) << "some ORDER pairs print as one chain";
}

// Sizes print so that they read back exactly, whatever the double.
TEST(RandomPrograms, SizesReadBackExactly) {
    std::mt19937_64 rng(testing::test_seed(7, "SizesReadBackExactly"));
    std::vector<double> sizes = {1,
                                 3,
                                 999,
                                 1000,
                                 1001,
                                 1e9,
                                 1.5e9,
                                 0.1,
                                 1e-300,
                                 4.9e-324,
                                 1e300,
                                 1.7e308,
                                 12345678901234567.0,
                                 0.3,
                                 1234.567e3,
                                 2.5e6};
    for (int i = 0; i < 300; ++i) {
        sizes.push_back(std::exp(std::uniform_real_distribution<double>(-20, 60)(rng)));
    }
    for (double bytes : sizes) {
        Program program;
        program.gpus = {0};
        program.ins.push_back(InDecl{"A", 0, bytes, {}});
        const std::string printed = print_program(program);
        const absl::StatusOr<Program> reread = parse_program(printed);
        ASSERT_TRUE(reread.ok()) << printed << reread.status();
        ASSERT_EQ(reread->ins.at(0).bytes, bytes) << printed;
    }
}

} // namespace
} // namespace einsummable::exprog
