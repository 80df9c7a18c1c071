// A seeded fuzz driver for parse_program: mutations of valid program texts (byte flips,
// insertions of tokens, deletions, truncations, line shuffles) and random byte strings; the
// texts and the tokens include labels, chunks and ORDER lines. Every input must give a program
// or an InvalidArgument whose message starts "line "; never a crash (this runs under
// ASan+UBSan too). A text that parses must also survive print -> parse.

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "compiler/exprog/parser.h"
#include "gtest/gtest.h"
#include "tests/unit/exprog/random_program.h"

namespace einsummable::exprog {
namespace {

std::vector<std::string> seed_corpus(std::mt19937_64& rng) {
    std::vector<std::string> corpus;
    const std::filesystem::path dir =
        std::filesystem::path(EINSUMMABLE_SOURCE_DIR) / "tests/golden/exprog";
    // Sorted: the directory's order is the file system's, and the test must be deterministic.
    std::vector<std::filesystem::path> paths;
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
        paths.push_back(entry.path());
    }
    std::sort(paths.begin(), paths.end());
    for (const std::filesystem::path& path : paths) {
        std::ifstream file(path, std::ios::binary);
        std::stringstream text;
        text << file.rdbuf();
        corpus.push_back(text.str());
    }
    for (int i = 0; i < 40; ++i) {
        corpus.push_back(print_program(testing::random_program(rng)));
    }
    return corpus;
}

size_t position(std::mt19937_64& rng, const std::string& text) {
    return std::uniform_int_distribution<size_t>(0, text.size())(rng);
}

std::string mutate(std::mt19937_64& rng, std::string text) {
    static const char* const tokens[] = {
        "@",      "->",      "-",           ">",          "{",
        "}",      "(",       ")",           ",",          ";",
        "+",      ":",       "#",           "\n",         " ",
        "\t",     "\r",      "0",           "7",          "1.5",
        "0.0",    ".",       "99999999999", "2147483648", "size",
        "GB",     "gb",      "B",           "A",          "A+A",
        "G1",     "GPUS:",   "IN:",         "OUT:",       "PARTITIONS:",
        "{size ", "(size: ", "@ 0",         "-> 1,",      "" /* a NUL byte */,
        "\xff",   "\x80",    "1e9",         "_",          "size 0",
        "size 99"};
    // Chunks, labels and ORDER lines.
    static const char* const chunk_tokens[] = {
        "[",      "]",     "/",         "<",           "[0/2]",  "[1/4]",
        "[0/1]",  "[4/4]", "[0/0]",     "[4095/4096]", "c0:",    "c1: ",
        "ORDER:", " < c0", "c0 < c1, ", "[0/4097]",    "ORDER ", "ORDER: c0 < c1"};
    auto random_token = [&]() -> const char* {
        const size_t pick = std::uniform_int_distribution<size_t>(
            0, std::size(tokens) + std::size(chunk_tokens) - 1)(rng);
        return pick < std::size(tokens) ? tokens[pick] : chunk_tokens[pick - std::size(tokens)];
    };
    const int count = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int m = 0; m < count; ++m) {
        switch (std::uniform_int_distribution<int>(0, 6)(rng)) {
        case 0: // flip a byte
            if (!text.empty()) {
                text[position(rng, text) % text.size()] =
                    static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
            }
            break;
        case 1:
        case 2: { // insert a token
            const char* token = random_token();
            text.insert(position(rng, text), token[0] == '\0' ? std::string(1, '\0') : token);
            break;
        }
        case 3: { // delete a span
            const size_t at = position(rng, text);
            text.erase(at, std::uniform_int_distribution<size_t>(1, 8)(rng));
            break;
        }
        case 4: // truncate
            text.resize(position(rng, text));
            break;
        case 5: { // duplicate a span
            const size_t at = position(rng, text);
            const std::string span =
                text.substr(at, std::uniform_int_distribution<size_t>(1, 30)(rng));
            text.insert(position(rng, text), span);
            break;
        }
        default: { // swap two lines
            std::vector<std::string> lines;
            std::stringstream stream(text);
            for (std::string line; std::getline(stream, line);) {
                lines.push_back(line);
            }
            if (lines.size() >= 2) {
                std::swap(lines[position(rng, text) % lines.size()],
                          lines[position(rng, text) % lines.size()]);
            }
            text.clear();
            for (const std::string& line : lines) {
                text += line + "\n";
            }
            break;
        }
        }
    }
    return text;
}

// Returns true when the text parsed.
bool check_input(const std::string& text) {
    const absl::StatusOr<Program> program = parse_program(text);
    if (!program.ok()) {
        EXPECT_EQ(program.status().code(), absl::StatusCode::kInvalidArgument) << text;
        EXPECT_EQ(program.status().message().substr(0, 5), "line ") << program.status();
        return false;
    }
    EXPECT_TRUE(check_declarations(*program).ok()) << check_declarations(*program) << "\nfrom:\n"
                                                   << text;
    const std::string printed = print_program(*program);
    const absl::StatusOr<Program> reread = parse_program(printed);
    EXPECT_TRUE(reread.ok()) << reread.status() << "\nprinted:\n" << printed << "\nfrom:\n" << text;
    if (reread.ok()) {
        EXPECT_EQ(*reread, *program) << printed;
        EXPECT_EQ(print_program(*reread), printed);
    }
    return true;
}

TEST(ParserFuzz, MutatedProgramsGiveAProgramOrALocatedError) {
    std::mt19937_64 rng(testing::test_seed(4242, "ParserFuzz.Mutated"));
    const std::vector<std::string> corpus = seed_corpus(rng);
    int parsed = 0;
    constexpr int cases = 4000;
    for (int i = 0; i < cases && !::testing::Test::HasFailure(); ++i) {
        const std::string& original =
            corpus[std::uniform_int_distribution<size_t>(0, corpus.size() - 1)(rng)];
        parsed += check_input(mutate(rng, original)) ? 1 : 0;
    }
    std::cout << parsed << " of " << cases << " mutated texts parsed\n";
    // Some mutations (whitespace, comments, line swaps) keep a program valid.
    EXPECT_GT(parsed, 0);
    EXPECT_LT(parsed, cases);
}

TEST(ParserFuzz, RandomBytesGiveAProgramOrALocatedError) {
    std::mt19937_64 rng(testing::test_seed(99, "ParserFuzz.RandomBytes"));
    const std::string alphabet = "GPUSINOTARBDEc0123456789 @->{}(),;+:#\n\tsizeKM._[]/<";
    for (int i = 0; i < 2000 && !::testing::Test::HasFailure(); ++i) {
        std::string text(std::uniform_int_distribution<size_t>(0, 200)(rng), ' ');
        const bool from_alphabet = i % 2 == 0;
        for (char& c : text) {
            c = from_alphabet
                    ? alphabet[std::uniform_int_distribution<size_t>(0, alphabet.size() - 1)(rng)]
                    : static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
        }
        check_input(text);
    }
}

TEST(ParserFuzz, EdgeInputs) {
    for (const std::string& text :
         {std::string(), std::string("\n\n"), std::string("#"), std::string(1, '\0'),
          std::string("GPUS:"), std::string("GPUS: 0\nIN: A @ 0 (size: "), std::string(100000, 'A'),
          std::string(100000, '+'), std::string("A") + std::string(50000, '+'),
          std::string("GPUS: ") + std::string(5000, '9'),
          std::string("GPUS: 0\nIN: A @ 0 (size: ") + std::string(400, '9') + " GB)",
          std::string("GPUS: 0\nIN: A @ 0 (size: 0.") + std::string(400, '0') + "1 B)",
          std::string("ORDER:"), std::string("ORDER: a <"), std::string("c0:"), std::string("A["),
          std::string("A[1/"),
          std::string("GPUS: 0\nIN: A @ 0\nA[0/") + std::string(5000, '9') + "] @ 0",
          std::string("ORDER: a") + [] {
              std::string chain;
              for (int i = 0; i < 20000; ++i) {
                  chain += " < a";
              }
              return chain;
          }()}) {
        check_input(text);
    }
}

} // namespace
} // namespace einsummable::exprog
