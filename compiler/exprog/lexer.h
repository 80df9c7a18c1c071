#pragma once

// The tokens of the ExProg text format (docs/exprog.md), read with the compiler's shared lexer
// (compiler/support/lexer.h). Internal to parse_program.

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"

namespace einsummable::exprog::syntax {

enum class Kind {
    identifier, // [A-Za-z][A-Za-z0-9_]*
    integer,    // [0-9]+
    number,     // [0-9]+ '.' [0-9]+
    colon,
    comma,
    at,
    plus,
    arrow,
    semicolon,
    left_brace,
    right_brace,
    left_paren,
    right_paren,
    left_bracket,
    right_bracket,
    slash,
    less,
    newline,
    end,
    bad, // a character no token starts with
};

struct Token {
    Kind kind = Kind::end;
    absl::string_view text; // into the text tokenize() read
    SourceLocation location;
};

// The tokens of `text`, then one `end` token where the text ends. Spaces, tabs, '\r', '\f' and
// '\v' separate tokens; '#' starts a comment to the end of the line; every '\n' is a newline
// token. A byte no token starts with is a one-byte `bad` token, never an error here.
std::vector<Token> tokenize(absl::string_view text);

// A token for a message: "end of line", "end of input", "character 'c'" ('\xNN' when not
// printable ASCII), or the token's text, quoted.
std::string describe(const Token& token);

} // namespace einsummable::exprog::syntax
