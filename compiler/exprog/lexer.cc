#include "compiler/exprog/lexer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/syntax.h"
#include "compiler/support/lexer.h"

namespace einsummable::exprog::syntax {
namespace {

Kind punctuation(char c) {
    static constexpr std::pair<char, Kind> table[] = {
        {':', Kind::colon},        {',', Kind::comma},         {'@', Kind::at},
        {'+', Kind::plus},         {';', Kind::semicolon},     {'{', Kind::left_brace},
        {'}', Kind::right_brace},  {'(', Kind::left_paren},    {')', Kind::right_paren},
        {'[', Kind::left_bracket}, {']', Kind::right_bracket}, {'/', Kind::slash},
        {'<', Kind::less}};
    for (const auto& [character, kind] : table) {
        if (character == c) {
            return kind;
        }
    }
    return Kind::bad;
}

// Takes the token the lexer is at (not at the end, not at a blank or comment); its kind.
Kind take_token(support::Lexer& lexer) {
    const char c = lexer.peek();
    if (c == '\n') {
        lexer.take(1);
        return Kind::newline;
    }
    if (is_letter(c)) {
        lexer.take_while(is_identifier_char);
        return Kind::identifier;
    }
    if (is_digit(c)) {
        lexer.take_while(is_digit);
        if (lexer.peek() == '.' && is_digit(lexer.peek(1))) {
            lexer.take(1);
            lexer.take_while(is_digit);
            return Kind::number;
        }
        return Kind::integer;
    }
    if (lexer.looking_at("->")) {
        lexer.take(2);
        return Kind::arrow;
    }
    lexer.take(1);
    return punctuation(c);
}

} // namespace

std::vector<Token> tokenize(absl::string_view text) {
    support::Lexer lexer(text);
    std::vector<Token> tokens;
    while (true) {
        lexer.skip_blanks(" \t\r\f\v");
        lexer.skip_comment('#');
        if (lexer.at_end()) {
            break;
        }
        const SourceLocation location{lexer.line(), lexer.column()};
        const size_t start = lexer.offset();
        const Kind kind = take_token(lexer);
        tokens.push_back(Token{kind, lexer.since(start), location});
    }
    tokens.push_back(Token{Kind::end, {}, SourceLocation{lexer.line(), lexer.column()}});
    return tokens;
}

std::string describe(const Token& token) {
    switch (token.kind) {
    case Kind::newline:
        return "end of line";
    case Kind::end:
        return "end of input";
    case Kind::bad: {
        const auto byte = static_cast<unsigned char>(token.text[0]);
        if (byte >= 0x20 && byte < 0x7f) {
            return absl::StrCat("character '", token.text, "'");
        }
        constexpr char digits[] = "0123456789abcdef";
        return absl::StrCat("character '\\x", std::string(1, digits[byte >> 4]),
                            std::string(1, digits[byte & 15]), "'");
    }
    default:
        return quote(token.text);
    }
}

} // namespace einsummable::exprog::syntax
