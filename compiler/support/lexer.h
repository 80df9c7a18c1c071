#pragma once

// The lexer the compiler's hand-written text readers share: the ExProg parser
// (compiler/exprog/lexer.h), topology files (exprog::parse_topology) and plan records
// (physical::restore_plan). Each format keeps its own tokens and messages; this is the part they
// have in common: a cursor over the text that knows its line and column, takes runs of bytes,
// blanks, comments, quoted strings and whole lines, and never reads past the end.
//
// Lines end at '\n' (a '\r' before it is an ordinary byte: formats that allow it skip it as a
// blank). Lines and columns are 1-based; a column counts bytes, not characters. A text of n '\n'
// has n + 1 lines, the last one empty when the text ends with '\n' — the lines
// absl::StrSplit(text, '\n') gives.

#include <algorithm>
#include <cstddef>
#include <optional>

#include "absl/strings/string_view.h"

namespace einsummable::support {

class Lexer {
public:
    explicit Lexer(absl::string_view text)
        : text_(text), lines_(1 + static_cast<int>(std::count(text.begin(), text.end(), '\n'))) {}

    // Where the lexer is.
    size_t offset() const { return offset_; }
    int line() const { return line_; }
    int column() const { return column_; }
    bool at_end() const { return offset_ >= text_.size(); }
    // At a '\n' or at the end.
    bool at_line_end() const { return at_end() || text_[offset_] == '\n'; }
    // The byte `ahead` bytes on, or '\0' past the end.
    char peek(size_t ahead = 0) const {
        return offset_ + ahead < text_.size() ? text_[offset_ + ahead] : '\0';
    }
    bool looking_at(absl::string_view prefix) const {
        return text_.substr(offset_).substr(0, prefix.size()) == prefix;
    }
    // The text not taken yet, to the end of the text.
    absl::string_view rest() const { return text_.substr(offset_); }
    // The text taken since `start`, an earlier offset().
    absl::string_view since(size_t start) const {
        return text_.substr(start, offset_ - std::min(start, offset_));
    }

    // Takes `count` bytes (fewer at the end), moving the line and column past them.
    absl::string_view take(size_t count) {
        const size_t start = offset_;
        const size_t end = std::min(text_.size(), offset_ + count);
        for (; offset_ < end; ++offset_) {
            if (text_[offset_] == '\n') {
                ++line_;
                column_ = 1;
            } else {
                ++column_;
            }
        }
        return since(start);
    }

    // Takes the longest run of bytes for which `predicate(byte)` holds.
    template <typename Predicate>
    absl::string_view take_while(Predicate predicate) {
        size_t end = offset_;
        while (end < text_.size() && predicate(text_[end])) {
            ++end;
        }
        return take(end - offset_);
    }

    // Takes the bytes up to the first of `stops`, or to the end of the line: never a '\n'.
    absl::string_view take_until(absl::string_view stops) {
        return take_while([stops](char c) { return c != '\n' && stops.find(c) == stops.npos; });
    }

    // Skips the bytes of `blanks` (which may not hold '\n').
    void skip_blanks(absl::string_view blanks) {
        take_while([blanks](char c) { return c != '\n' && blanks.find(c) != blanks.npos; });
    }

    // At `start`: skips the comment it starts, to the end of the line (not the '\n'), and says
    // so; elsewhere takes nothing.
    bool skip_comment(char start) {
        if (at_end() || peek() != start) {
            return false;
        }
        take_until({});
        return true;
    }

    // At `quote`: takes a quoted string that ends on this line and gives what is between the
    // quotes, escapes as written (`escape` and the byte after it are kept and never end the
    // string). nullopt, taking nothing, when the line ends first (an escape at its very end
    // included), or when not at `quote`.
    std::optional<absl::string_view> take_quoted(char quote, char escape = '\\') {
        if (at_end() || peek() != quote) {
            return std::nullopt;
        }
        size_t end = offset_ + 1;
        while (end < text_.size() && text_[end] != '\n' && text_[end] != quote) {
            if (text_[end] == escape) {
                if (end + 1 >= text_.size() || text_[end + 1] == '\n') {
                    return std::nullopt;
                }
                ++end;
            }
            ++end;
        }
        if (end >= text_.size() || text_[end] != quote) {
            return std::nullopt;
        }
        const absl::string_view body = text_.substr(offset_ + 1, end - offset_ - 1);
        take(end + 1 - offset_);
        return body;
    }

    // Line by line. The lines not finished yet, the current one included; 0 once take_line()
    // has taken the last line.
    int lines_left() const { return lines_ - line_ + 1; }
    // The rest of the current line, without its '\n'; moves to the start of the next line
    // (past the last line, where lines_left() is 0, after the last one).
    absl::string_view take_line() {
        if (lines_left() <= 0) {
            return {};
        }
        const absl::string_view rest_of_line = take_until({});
        if (!at_end()) {
            ++offset_; // the '\n'
        }
        ++line_;
        column_ = 1;
        return rest_of_line;
    }

private:
    absl::string_view text_;
    int lines_; // '\n' count + 1
    size_t offset_ = 0;
    int line_ = 1;
    int column_ = 1;
};

} // namespace einsummable::support
