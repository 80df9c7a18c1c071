// support::Lexer (compiler/support/lexer.h): lines and columns as the readers' messages give
// them, runs, blanks, comments, quoted strings and whole lines, and never a read past the end.

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "compiler/support/lexer.h"
#include "gtest/gtest.h"

namespace einsummable::support {
namespace {

bool is_digit(char c) {
    return c >= '0' && c <= '9';
}

TEST(Lexer, StartsAtLineOneColumnOne) {
    Lexer lexer("ab");
    EXPECT_EQ(lexer.line(), 1);
    EXPECT_EQ(lexer.column(), 1);
    EXPECT_EQ(lexer.offset(), 0u);
    EXPECT_FALSE(lexer.at_end());
    EXPECT_EQ(lexer.peek(), 'a');
    EXPECT_EQ(lexer.peek(1), 'b');
}

TEST(Lexer, TakeCountsColumnsInBytesAndLinesAtNewlines) {
    Lexer lexer("ab\ncé\n");
    EXPECT_EQ(lexer.take(2), "ab");
    EXPECT_EQ(lexer.column(), 3);
    EXPECT_EQ(lexer.take(1), "\n");
    EXPECT_EQ(lexer.line(), 2);
    EXPECT_EQ(lexer.column(), 1);
    EXPECT_EQ(lexer.take(3), "cé"); // 'é' is two bytes, two columns
    EXPECT_EQ(lexer.column(), 4);
    EXPECT_EQ(lexer.take(1), "\n");
    EXPECT_EQ(lexer.line(), 3);
    EXPECT_TRUE(lexer.at_end());
}

TEST(Lexer, NeverReadsPastTheEnd) {
    Lexer lexer("x");
    EXPECT_EQ(lexer.peek(1), '\0');
    EXPECT_EQ(lexer.peek(100), '\0');
    EXPECT_EQ(lexer.take(5), "x");
    EXPECT_TRUE(lexer.at_end());
    EXPECT_TRUE(lexer.at_line_end());
    EXPECT_EQ(lexer.peek(), '\0');
    EXPECT_EQ(lexer.take(1), "");
    EXPECT_EQ(lexer.take_while(is_digit), "");
    EXPECT_EQ(lexer.take_until(" "), "");
    EXPECT_FALSE(lexer.skip_comment('#'));
    EXPECT_EQ(lexer.take_quoted('"'), std::nullopt);
    EXPECT_EQ(lexer.column(), 2);
}

TEST(Lexer, EmptyTextIsOneEmptyLine) {
    Lexer lexer("");
    EXPECT_TRUE(lexer.at_end());
    EXPECT_EQ(lexer.lines_left(), 1);
    EXPECT_EQ(lexer.take_line(), "");
    EXPECT_EQ(lexer.lines_left(), 0);
    EXPECT_EQ(lexer.take_line(), "");
    EXPECT_EQ(lexer.lines_left(), 0);
}

TEST(Lexer, TakeWhileAndSince) {
    Lexer lexer("123abc");
    const size_t start = lexer.offset();
    EXPECT_EQ(lexer.take_while(is_digit), "123");
    EXPECT_EQ(lexer.take_while(is_digit), "");
    EXPECT_EQ(lexer.since(start), "123");
    EXPECT_EQ(lexer.rest(), "abc");
    EXPECT_TRUE(lexer.looking_at("ab"));
    EXPECT_FALSE(lexer.looking_at("abcd"));
    EXPECT_EQ(lexer.column(), 4);
}

TEST(Lexer, TakeUntilStopsAtAStopOrTheLineEnd) {
    Lexer lexer("key: value # note\nnext");
    EXPECT_EQ(lexer.take_until(":"), "key");
    EXPECT_EQ(lexer.take(1), ":");
    EXPECT_EQ(lexer.take_until("#"), " value ");
    EXPECT_EQ(lexer.take_until("x"), "# note"); // never a '\n'
    EXPECT_TRUE(lexer.at_line_end());
    EXPECT_EQ(lexer.line(), 1);
}

TEST(Lexer, BlanksAndCommentsStayOnTheirLine) {
    Lexer lexer(" \t\r# comment\n  x");
    lexer.skip_blanks(" \t\r");
    EXPECT_EQ(lexer.column(), 4);
    EXPECT_TRUE(lexer.skip_comment('#'));
    EXPECT_EQ(lexer.peek(), '\n');
    EXPECT_EQ(lexer.column(), 13);
    lexer.skip_blanks(" \t\r\n"); // a '\n' is never a blank
    EXPECT_EQ(lexer.peek(), '\n');
    EXPECT_FALSE(lexer.skip_comment('#'));
    lexer.take(1);
    lexer.skip_blanks(" ");
    EXPECT_EQ(lexer.peek(), 'x');
    EXPECT_EQ(lexer.line(), 2);
    EXPECT_EQ(lexer.column(), 3);
}

TEST(Lexer, QuotedStringsKeepTheirEscapes) {
    Lexer lexer(R"("a\"b\\" rest)");
    const std::optional<absl::string_view> body = lexer.take_quoted('"');
    ASSERT_TRUE(body.has_value());
    EXPECT_EQ(*body, R"(a\"b\\)");
    EXPECT_EQ(lexer.rest(), " rest");
    EXPECT_EQ(lexer.column(), 9);
}

TEST(Lexer, QuotedStringsEndOnTheirLine) {
    for (absl::string_view text :
         {R"("open)", "\"open\nmore\"", R"("ends in escape\)", "\"escape before newline\\\n\""}) {
        Lexer lexer(text);
        EXPECT_EQ(lexer.take_quoted('"'), std::nullopt) << text;
        EXPECT_EQ(lexer.offset(), 0u) << text; // nothing taken
    }
    Lexer not_quoted("x\"y\"");
    EXPECT_EQ(not_quoted.take_quoted('"'), std::nullopt);
    Lexer empty("\"\"");
    EXPECT_EQ(empty.take_quoted('"'), absl::string_view());
    EXPECT_TRUE(empty.at_end());
}

TEST(Lexer, LinesAreTheLinesStrSplitGives) {
    for (absl::string_view text : {"", "a", "a\n", "a\nb", "\n\n", "a\r\nb\r\n", "x\n\ny\n\n"}) {
        const std::vector<absl::string_view> expected = absl::StrSplit(text, '\n');
        Lexer lexer(text);
        EXPECT_EQ(lexer.lines_left(), static_cast<int>(expected.size())) << text;
        std::vector<absl::string_view> lines;
        std::vector<int> numbers;
        while (lexer.lines_left() > 0) {
            numbers.push_back(lexer.line());
            lines.push_back(lexer.take_line());
            EXPECT_EQ(lexer.column(), 1);
        }
        EXPECT_EQ(lines, expected) << text;
        for (size_t i = 0; i < numbers.size(); ++i) {
            EXPECT_EQ(numbers[i], static_cast<int>(i) + 1);
        }
        EXPECT_TRUE(lexer.at_end());
    }
}

TEST(Lexer, TakeLineTakesTheRestOfAPartlyReadLine) {
    Lexer lexer("key value\nnext");
    EXPECT_EQ(lexer.take_until(" "), "key");
    EXPECT_EQ(lexer.lines_left(), 2);
    EXPECT_EQ(lexer.take_line(), " value");
    EXPECT_EQ(lexer.line(), 2);
    EXPECT_EQ(lexer.lines_left(), 1);
    EXPECT_EQ(lexer.take_until(" "), "next");
    EXPECT_EQ(lexer.lines_left(), 1);
    EXPECT_EQ(lexer.take_line(), "");
    EXPECT_EQ(lexer.lines_left(), 0);
}

TEST(Lexer, NulBytesAreOrdinaryBytes) {
    const std::string text("a\0b", 3);
    Lexer lexer(text);
    EXPECT_EQ(lexer.take_until(" "), text);
    EXPECT_TRUE(lexer.at_end());
    EXPECT_EQ(lexer.column(), 4);
}

} // namespace
} // namespace einsummable::support
