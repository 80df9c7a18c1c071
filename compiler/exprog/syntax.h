#pragma once

// Words and sizes as the ExProg text format writes them (docs/exprog.md), shared by its lexer,
// declaration checks, parser and printer. Internal to parser.h's functions.

#include <string>

#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"

namespace einsummable::exprog::syntax {

bool is_letter(char c);                     // [A-Za-z]
bool is_digit(char c);                      // [0-9]
bool is_identifier_char(char c);            // [A-Za-z0-9_]
bool is_identifier(absl::string_view text); // a letter, then identifier characters

// The words that start a header line when a ':' follows them at the start of a line.
bool is_header_keyword(absl::string_view text);

// Source text quoted for a message, shortened past 40 bytes: 'text' or 'text...'.
std::string quote(absl::string_view text);

// "line L column C: message", or the message alone for a location of a program built in code.
std::string at_location(const SourceLocation& location, absl::string_view message);

// The message for a header keyword written as an action's label: at the start of a line it
// would have started a header.
std::string keyword_label_message(absl::string_view label);

// Sizes: decimal units, 1 GB = 1e9 bytes, largest first.
struct SizeUnit {
    const char* name;
    double bytes;
};
inline constexpr SizeUnit kSizeUnits[] = {{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1.0}};

// Whether `text` is all of a fixed-point decimal (std::from_chars), and its value.
bool read_fixed(absl::string_view text, double* value);

// The size as the printer writes it: the largest unit whose value (at least 1) reads back to
// exactly `bytes` when multiplied by the unit as the parser does; bytes otherwise.
std::string size_text(double bytes);

} // namespace einsummable::exprog::syntax
