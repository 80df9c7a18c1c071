#include "compiler/exprog/parser.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/declarations.h"
#include "compiler/exprog/lexer.h"
#include "compiler/exprog/syntax.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {
namespace {

using syntax::at_location;
using syntax::describe;
using syntax::InLocations;
using syntax::is_header_keyword;
using syntax::keyword_label_message;
using syntax::Kind;
using syntax::ListLocations;
using syntax::Locations;
using syntax::PartitionLocations;
using syntax::quote;
using syntax::read_fixed;
using syntax::SizeUnit;
using syntax::Token;

// Recursive descent over the tokens, one statement per line; the declarations are checked once
// the whole text is read, so an ORDER may name labels defined below it.
class Parser {
public:
    explicit Parser(absl::string_view text) : tokens_(syntax::tokenize(text)) {}

    absl::StatusOr<Program> parse() {
        while (peek().kind != Kind::end) {
            if (peek().kind == Kind::newline) {
                ++position_;
                continue;
            }
            EINSUMMABLE_RETURN_IF_ERROR(statement_line());
        }
        EINSUMMABLE_RETURN_IF_ERROR(syntax::check_declarations(program_, locations_));
        return std::move(program_);
    }

private:
    const Token& peek(size_t ahead = 0) const {
        return tokens_[std::min(position_ + ahead, tokens_.size() - 1)];
    }
    const Token& next() {
        const Token& token = peek();
        if (position_ + 1 < tokens_.size()) {
            ++position_;
        }
        return token;
    }
    static bool at_line_end(const Token& token) {
        return token.kind == Kind::newline || token.kind == Kind::end;
    }

    static absl::Status error(const Token& at, absl::string_view message) {
        return absl::InvalidArgumentError(at_location(at.location, message));
    }
    static absl::Status expected(const Token& found, absl::string_view what) {
        return error(found, absl::StrCat("expected ", what, ", found ", describe(found)));
    }

    absl::Status end_of_line(absl::string_view after) {
        if (!at_line_end(peek())) {
            return expected(peek(), absl::StrCat("end of line after ", after));
        }
        return absl::OkStatus();
    }

    absl::Status statement_line() {
        const Token& first = peek();
        if (first.kind == Kind::identifier && is_header_keyword(first.text)) {
            const Token& second = peek(1);
            if (second.kind == Kind::colon) {
                next();
                next();
                if (first.text == "GPUS") {
                    return gpus_line();
                }
                if (first.text == "PARTITIONS") {
                    return partitions_line();
                }
                if (first.text == "IN") {
                    return in_line();
                }
                if (first.text == "ORDER") {
                    return order_line();
                }
                return out_line();
            }
            // Otherwise the keyword is an atom, starting an action.
            if (second.kind != Kind::at && second.kind != Kind::plus &&
                second.kind != Kind::left_bracket) {
                return expected(second, absl::StrCat("':' after ", quote(first.text)));
            }
        }
        return actions_line();
    }

    // A non-negative int (GPU id or partition size).
    absl::Status integer(const Token& token, absl::string_view what, int* value) {
        int64_t result = 0;
        for (char c : token.text) {
            result = result * 10 + (c - '0');
            if (result > std::numeric_limits<int>::max()) {
                return error(token, absl::StrCat(what, " ", quote(token.text), " is too large"));
            }
        }
        *value = static_cast<int>(result);
        return absl::OkStatus();
    }

    absl::Status gpu(absl::string_view after, int* value, SourceLocation* location) {
        const Token& token = peek();
        if (token.kind != Kind::integer) {
            return expected(token, absl::StrCat("a GPU id (a non-negative integer) after ", after));
        }
        next();
        *location = token.location;
        return integer(token, "GPU id", value);
    }

    absl::Status gpus_line() {
        std::string after = "'GPUS:'";
        while (true) {
            int id = 0;
            SourceLocation location;
            EINSUMMABLE_RETURN_IF_ERROR(gpu(after, &id, &location));
            program_.gpus.push_back(id);
            locations_.gpus.push_back(location);
            if (peek().kind != Kind::comma) {
                return end_of_line("the GPU list");
            }
            next();
            after = "','";
        }
    }

    absl::Status partitions_line() {
        std::string after = "'PARTITIONS:'";
        while (true) {
            const Token& name = peek();
            if (name.kind != Kind::identifier) {
                return expected(name, absl::StrCat("a partition name after ", after));
            }
            next();
            Partition partition;
            PartitionLocations where;
            partition.name = std::string(name.text);
            partition.location = name.location;
            where.name = name.location;
            if (peek().kind != Kind::left_brace) {
                return expected(peek(),
                                absl::StrCat("'{' after partition name ", quote(name.text)));
            }
            next();
            if (peek().kind == Kind::identifier && peek().text == "size") {
                next();
                const Token& size = peek();
                if (size.kind != Kind::integer) {
                    return expected(size, "a partition size (a positive integer) after 'size'");
                }
                next();
                int value = 0;
                EINSUMMABLE_RETURN_IF_ERROR(integer(size, "partition size", &value));
                partition.size = value;
                where.size = size.location;
            } else {
                std::string member_after = "'{'";
                while (true) {
                    if (peek().kind != Kind::integer) {
                        return expected(peek(),
                                        absl::StrCat("a GPU id or 'size' after ", member_after,
                                                     " in partition ", quote(name.text)));
                    }
                    int id = 0;
                    SourceLocation location;
                    EINSUMMABLE_RETURN_IF_ERROR(gpu(member_after, &id, &location));
                    partition.members.push_back(id);
                    where.members.push_back(location);
                    if (peek().kind != Kind::comma) {
                        break;
                    }
                    next();
                    member_after = "','";
                }
            }
            if (peek().kind != Kind::right_brace) {
                return expected(peek(), absl::StrCat("'}' closing partition ", quote(name.text)));
            }
            next();
            program_.partitions.push_back(std::move(partition));
            locations_.partitions.push_back(std::move(where));
            if (peek().kind != Kind::comma) {
                return end_of_line("the partition list");
            }
            next();
            after = "','";
        }
    }

    absl::Status in_line() {
        const Token& atom = peek();
        if (atom.kind != Kind::identifier) {
            return expected(atom, "an atom name after 'IN:'");
        }
        next();
        InDecl in;
        InLocations where;
        in.atom = std::string(atom.text);
        in.location = atom.location;
        where.atom = atom.location;
        if (peek().kind == Kind::left_bracket) {
            return error(peek(), "IN takes whole atoms: no chunk");
        }
        if (peek().kind != Kind::at) {
            return expected(peek(), absl::StrCat("'@' after atom ", quote(atom.text),
                                                 " (an IN declares one atom)"));
        }
        next();
        EINSUMMABLE_RETURN_IF_ERROR(gpu("'@' (an IN is at one GPU)", &in.gpu, &where.gpu));
        if (peek().kind == Kind::left_paren) {
            next();
            EINSUMMABLE_RETURN_IF_ERROR(size(&in.bytes));
        }
        EINSUMMABLE_RETURN_IF_ERROR(end_of_line(absl::StrCat("IN ", quote(atom.text))));
        program_.ins.push_back(std::move(in));
        locations_.ins.push_back(where);
        return absl::OkStatus();
    }

    // After '(': size ':' number unit ')'.
    absl::Status size(double* bytes) {
        if (peek().kind != Kind::identifier || peek().text != "size") {
            return expected(peek(), "'size' after '('");
        }
        next();
        if (peek().kind != Kind::colon) {
            return expected(peek(), "':' after 'size'");
        }
        next();
        const Token& number = peek();
        if (number.kind != Kind::integer && number.kind != Kind::number) {
            return expected(number, "a size (a decimal number such as 1.5) after 'size:'");
        }
        next();
        const Token& unit_token = peek();
        if (unit_token.kind != Kind::identifier) {
            return expected(unit_token, absl::StrCat("a size unit (GB, MB, KB or B) after ",
                                                     quote(number.text)));
        }
        const SizeUnit* unit = nullptr;
        for (const SizeUnit& candidate : syntax::kSizeUnits) {
            if (unit_token.text == candidate.name) {
                unit = &candidate;
            }
        }
        if (unit == nullptr) {
            return error(unit_token, absl::StrCat("bad size unit ", quote(unit_token.text),
                                                  ": expected GB, MB, KB or B"));
        }
        next();
        double value = 0;
        if (!read_fixed(number.text, &value)) {
            return error(number, absl::StrCat("size ", quote(number.text), " is out of range"));
        }
        const double result = value * unit->bytes;
        if (!std::isfinite(result)) {
            return error(number, absl::StrCat("size ", quote(number.text), " ", unit->name,
                                              " is too large"));
        }
        if (!(result > 0)) {
            return error(number, "a size must be positive");
        }
        if (peek().kind != Kind::right_paren) {
            return expected(peek(), "')' closing the size");
        }
        next();
        *bytes = result;
        return absl::OkStatus();
    }

    // atom {'+' atom}; `written` is the aggregate as written, for messages.
    absl::Status aggregate(absl::string_view after, Aggregate* result, ListLocations* where,
                           std::string* written) {
        while (true) {
            const Token& atom = peek();
            if (atom.kind != Kind::identifier) {
                return expected(atom, absl::StrCat("an atom name after ", after));
            }
            next();
            if (!written->empty()) {
                written->push_back('+');
            }
            absl::StrAppend(written, atom.text);
            if (!result->insert(std::string(atom.text)).second) {
                return error(atom, absl::StrCat("atom ", quote(atom.text),
                                                " is repeated in aggregate ", quote(*written)));
            }
            where->atoms[std::string(atom.text)] = atom.location;
            if (peek().kind != Kind::plus) {
                return absl::OkStatus();
            }
            next();
            after = "'+'";
        }
    }

    absl::Status site(absl::string_view what, Site* result, SourceLocation* location) {
        const Token& token = peek();
        *location = token.location;
        if (token.kind == Kind::identifier) {
            next();
            *result = Site::of_partition(std::string(token.text));
            return absl::OkStatus();
        }
        if (token.kind == Kind::integer) {
            next();
            int id = 0;
            EINSUMMABLE_RETURN_IF_ERROR(integer(token, "GPU id", &id));
            *result = Site::of_gpu(id);
            return absl::OkStatus();
        }
        return expected(token, what);
    }

    // site {',' site}
    absl::Status sites(absl::string_view first_what, std::vector<Site>* result,
                       std::vector<SourceLocation>* where) {
        std::string what(first_what);
        while (true) {
            Site one;
            SourceLocation location;
            EINSUMMABLE_RETURN_IF_ERROR(site(what, &one, &location));
            result->push_back(std::move(one));
            where->push_back(location);
            if (peek().kind != Kind::comma) {
                return absl::OkStatus();
            }
            next();
            what = "a GPU id or partition name after ','";
        }
    }

    absl::Status out_line() {
        OutDecl out;
        ListLocations where;
        std::string written;
        out.location = peek().location;
        EINSUMMABLE_RETURN_IF_ERROR(aggregate("'OUT:'", &out.aggregate, &where, &written));
        if (peek().kind == Kind::left_bracket) {
            return error(peek(), "OUT takes whole aggregates: no chunk");
        }
        if (peek().kind != Kind::at) {
            return expected(peek(), absl::StrCat("'@' after aggregate ", quote(written)));
        }
        next();
        where.sites.emplace_back();
        EINSUMMABLE_RETURN_IF_ERROR(
            sites("a GPU id or partition name after '@'", &out.sites, &where.sites.back()));
        EINSUMMABLE_RETURN_IF_ERROR(end_of_line(absl::StrCat("OUT ", quote(written))));
        program_.outs.push_back(std::move(out));
        locations_.outs.push_back(std::move(where));
        return absl::OkStatus();
    }

    absl::Status actions_line() {
        while (true) {
            EINSUMMABLE_RETURN_IF_ERROR(action());
            if (peek().kind == Kind::semicolon) {
                next();
                if (at_line_end(peek())) {
                    return absl::OkStatus();
                }
                continue;
            }
            if (at_line_end(peek())) {
                return absl::OkStatus();
            }
            return expected(peek(), "'->', ';' or end of line after an action");
        }
    }

    static bool at_label(const Token& token, const Token& after) {
        return token.kind == Kind::identifier && after.kind == Kind::colon;
    }

    // [label ':'] aggregate ['[' index '/' count ']'] '@' site {'->' sites}
    absl::Status action() {
        Action action;
        ListLocations where;
        std::string written;
        action.location = peek().location;
        if (at_label(peek(), peek(1))) {
            const Token& label = next();
            next();
            if (is_header_keyword(label.text)) {
                return error(label, keyword_label_message(label.text));
            }
            action.label = std::string(label.text);
            where.label = label.location;
            if (at_label(peek(), peek(1))) {
                if (is_header_keyword(peek().text)) {
                    return error(peek(), keyword_label_message(peek().text));
                }
                return error(peek(), absl::StrCat("second label ", quote(peek().text),
                                                  " on an action labelled ", quote(label.text),
                                                  ": an action has at most one label"));
            }
        }
        EINSUMMABLE_RETURN_IF_ERROR(aggregate(action.label.empty()
                                                  ? "the start of an action"
                                                  : absl::StrCat("label ", quote(action.label)),
                                              &action.aggregate, &where, &written));
        if (peek().kind == Kind::left_bracket) {
            EINSUMMABLE_RETURN_IF_ERROR(chunk(&action.chunk, &where));
            absl::StrAppend(&written, "[", action.chunk.index, "/", action.chunk.count, "]");
        }
        if (peek().kind != Kind::at) {
            return expected(peek(), absl::StrCat("'@' after aggregate ", quote(written)));
        }
        next();
        EINSUMMABLE_RETURN_IF_ERROR(
            site("a GPU id or partition name after '@'", &action.source, &where.source));
        while (peek().kind == Kind::arrow) {
            const Token& arrow = next();
            if (!action.hops.empty() && action.hops.back().size() > 1) {
                return error(arrow,
                             "multicast in a non-final relay hop: only the last hop may name "
                             "several sites");
            }
            action.hops.emplace_back();
            where.sites.emplace_back();
            const Token& hop_start = peek();
            if (hop_start.kind != Kind::integer && hop_start.kind != Kind::identifier) {
                return error(hop_start, absl::StrCat("empty hop: expected a GPU id or partition "
                                                     "name after '->', found ",
                                                     describe(hop_start)));
            }
            EINSUMMABLE_RETURN_IF_ERROR(sites("a GPU id or partition name after '->'",
                                              &action.hops.back(), &where.sites.back()));
        }
        program_.actions.push_back(std::move(action));
        locations_.actions.push_back(std::move(where));
        return absl::OkStatus();
    }

    // At '[': '[' index '/' count ']'. The range rules are declaration checks.
    absl::Status chunk(Chunk* result, ListLocations* where) {
        next();
        const Token& index = peek();
        if (index.kind != Kind::integer) {
            return expected(index, "a chunk index (a non-negative integer) after '['");
        }
        next();
        EINSUMMABLE_RETURN_IF_ERROR(integer(index, "chunk index", &result->index));
        where->chunk_index = index.location;
        if (peek().kind != Kind::slash) {
            return expected(peek(), absl::StrCat("'/' after chunk index ", quote(index.text)));
        }
        next();
        const Token& count = peek();
        if (count.kind != Kind::integer) {
            return expected(count, "a chunk count (a positive integer) after '/'");
        }
        next();
        EINSUMMABLE_RETURN_IF_ERROR(integer(count, "chunk count", &result->count));
        where->chunk_count = count.location;
        if (peek().kind != Kind::right_bracket) {
            return expected(peek(), "']' closing the chunk");
        }
        next();
        return absl::OkStatus();
    }

    // After 'ORDER:': chain {',' chain}, chain = label '<' label {'<' label}. A chain is stored
    // as the pairs of its neighbouring labels, in text order.
    absl::Status order_line() {
        std::string after = "'ORDER:'";
        while (true) {
            const Token* previous = nullptr;
            while (true) {
                const Token& label = peek();
                if (label.kind != Kind::identifier) {
                    return expected(label, absl::StrCat("a label after ", after));
                }
                next();
                if (previous != nullptr) {
                    program_.orders.push_back(OrderDecl{std::string(previous->text),
                                                        std::string(label.text), previous->location,
                                                        label.location});
                }
                const bool first = previous == nullptr;
                previous = &label;
                if (peek().kind != Kind::less) {
                    if (first) {
                        return expected(peek(), absl::StrCat("'<' after label ", quote(label.text),
                                                             " in ORDER"));
                    }
                    break;
                }
                next();
                after = "'<'";
            }
            if (peek().kind != Kind::comma) {
                if (!at_line_end(peek())) {
                    return expected(peek(), absl::StrCat("'<', ',' or end of line after label ",
                                                         quote(previous->text), " in ORDER"));
                }
                return absl::OkStatus();
            }
            next();
            after = "','";
        }
    }

    std::vector<Token> tokens_;
    size_t position_ = 0;
    Program program_;
    Locations locations_;
};

} // namespace

absl::StatusOr<Program> parse_program(absl::string_view text) {
    return Parser(text).parse();
}

} // namespace einsummable::exprog
