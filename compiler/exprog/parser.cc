#include "compiler/exprog/parser.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {
namespace {

// ---------------------------------------------------------------------------------------------
// Tokens

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
    absl::string_view text;
    SourceLocation location;
};

bool is_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_identifier_char(char c) {
    return is_letter(c) || is_digit(c) || c == '_';
}

bool is_identifier(absl::string_view text) {
    if (text.empty() || !is_letter(text[0])) {
        return false;
    }
    for (char c : text) {
        if (!is_identifier_char(c)) {
            return false;
        }
    }
    return true;
}

// The words that start a header line when a ':' follows them at the start of a line.
bool is_header_keyword(absl::string_view text) {
    return text == "GPUS" || text == "PARTITIONS" || text == "IN" || text == "OUT" ||
           text == "ORDER";
}

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

std::vector<Token> tokenize(absl::string_view text) {
    std::vector<Token> tokens;
    int line = 1;
    int column = 1;
    size_t i = 0;
    auto add = [&](Kind kind, size_t length) {
        tokens.push_back(Token{kind, text.substr(i, length), SourceLocation{line, column}});
        i += length;
        column += static_cast<int>(length);
    };
    while (i < text.size()) {
        const char c = text[i];
        if (c == '\n') {
            add(Kind::newline, 1);
            ++line;
            column = 1;
        } else if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
            ++i;
            ++column;
        } else if (c == '#') {
            while (i < text.size() && text[i] != '\n') {
                ++i;
                ++column;
            }
        } else if (is_letter(c)) {
            size_t length = 1;
            while (i + length < text.size() && is_identifier_char(text[i + length])) {
                ++length;
            }
            add(Kind::identifier, length);
        } else if (is_digit(c)) {
            size_t length = 1;
            while (i + length < text.size() && is_digit(text[i + length])) {
                ++length;
            }
            if (i + length + 1 < text.size() && text[i + length] == '.' &&
                is_digit(text[i + length + 1])) {
                length += 2;
                while (i + length < text.size() && is_digit(text[i + length])) {
                    ++length;
                }
                add(Kind::number, length);
            } else {
                add(Kind::integer, length);
            }
        } else if (c == '-' && i + 1 < text.size() && text[i + 1] == '>') {
            add(Kind::arrow, 2);
        } else {
            const Kind kind = punctuation(c);
            add(kind, 1);
        }
    }
    tokens.push_back(Token{Kind::end, {}, SourceLocation{line, column}});
    return tokens;
}

// Quotes a piece of source text for a message, shortened when long.
std::string quote(absl::string_view text) {
    constexpr size_t limit = 40;
    if (text.size() > limit) {
        return absl::StrCat("'", text.substr(0, limit), "...'");
    }
    return absl::StrCat("'", text, "'");
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

std::string at_location(const SourceLocation& location, absl::string_view message) {
    if (location.line <= 0) {
        return std::string(message);
    }
    return absl::StrCat("line ", location.line, " column ", location.column, ": ", message);
}

// The message for a header keyword written as an action's label: at the start of a line it
// would have started a header.
std::string keyword_label_message(absl::string_view label) {
    return absl::StrCat(quote(label), " is a header keyword, not a label: a header ",
                        quote(absl::StrCat(label, ":")), " must start a line");
}

// ---------------------------------------------------------------------------------------------
// Sizes: decimal units, 1 GB = 1e9 bytes.

struct Unit {
    const char* name;
    double bytes;
};
constexpr Unit units[] = {{"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"B", 1.0}};

// The shortest fixed-point text that reads back (std::from_chars) to exactly `value`.
std::string fixed_text(double value) {
    char buffer[512];
    const auto result =
        std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed);
    if (result.ec != std::errc()) {
        return "0";
    }
    return std::string(buffer, result.ptr);
}

bool read_fixed(absl::string_view text, double* value) {
    const auto result =
        std::from_chars(text.data(), text.data() + text.size(), *value, std::chars_format::fixed);
    return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

// The size as the printer writes it: the largest unit whose value (at least 1) reads back to
// exactly `bytes` when multiplied by the unit as the parser does; bytes otherwise.
std::string size_text(double bytes) {
    for (const Unit& unit : units) {
        const double value = bytes / unit.bytes;
        if (unit.bytes != 1.0 && !(value >= 1.0)) {
            continue;
        }
        const std::string text = fixed_text(value);
        double read = 0;
        if (read_fixed(text, &read) && read * unit.bytes == bytes) {
            return absl::StrCat(text, " ", unit.name);
        }
    }
    return absl::StrCat(fixed_text(bytes), " B");
}

// ---------------------------------------------------------------------------------------------
// Where each part of a program was written, for the declaration checks' messages. The parser
// records token locations; a program built in code gets each element's own location.

struct PartitionLocations {
    SourceLocation name;
    SourceLocation size;
    std::vector<SourceLocation> members;
};

struct InLocations {
    SourceLocation atom;
    SourceLocation gpu;
};

struct ListLocations {
    std::map<std::string, SourceLocation> atoms;
    SourceLocation label; // actions only, from here on
    SourceLocation chunk_index;
    SourceLocation chunk_count;
    SourceLocation source;
    std::vector<std::vector<SourceLocation>> sites; // OUT: one list; action: one per hop
};

struct Locations {
    std::vector<SourceLocation> gpus;
    std::vector<PartitionLocations> partitions;
    std::vector<InLocations> ins;
    std::vector<ListLocations> outs;
    std::vector<ListLocations> actions;
};

Locations element_locations(const Program& program) {
    Locations locations;
    locations.gpus.assign(program.gpus.size(), SourceLocation{});
    for (const Partition& partition : program.partitions) {
        locations.partitions.push_back(
            {partition.location, partition.location,
             std::vector<SourceLocation>(partition.members.size(), partition.location)});
    }
    for (const InDecl& in : program.ins) {
        locations.ins.push_back({in.location, in.location});
    }
    auto list = [](const Aggregate& aggregate, SourceLocation location,
                   const std::vector<std::vector<Site>>& lists) {
        ListLocations result;
        for (const std::string& atom : aggregate) {
            result.atoms[atom] = location;
        }
        result.source = location;
        for (const std::vector<Site>& sites : lists) {
            result.sites.emplace_back(sites.size(), location);
        }
        return result;
    };
    for (const OutDecl& out : program.outs) {
        locations.outs.push_back(list(out.aggregate, out.location, {out.sites}));
    }
    for (const Action& action : program.actions) {
        ListLocations where = list(action.aggregate, action.location, action.hops);
        where.label = where.chunk_index = where.chunk_count = action.location;
        locations.actions.push_back(std::move(where));
    }
    return locations;
}

template <typename T>
const T& at_or(const std::vector<T>& values, size_t index, const T& fallback) {
    return index < values.size() ? values[index] : fallback;
}

// The declaration checks; the earliest problem in the text (then the first found) wins.
class DeclarationChecker {
public:
    DeclarationChecker(const Program& program, const Locations& locations)
        : program_(program), locations_(locations) {}

    absl::Status check() {
        check_gpus();
        check_partitions();
        check_ins();
        for (size_t i = 0; i < program_.outs.size(); ++i) {
            const OutDecl& out = program_.outs[i];
            const ListLocations& where = at_or(locations_.outs, i, empty_list_);
            check_aggregate(out.aggregate, out.location, where, "OUT");
            check_sites(out.sites, at_or(where.sites, 0, empty_sites_), out.location, "OUT");
        }
        for (size_t i = 0; i < program_.actions.size(); ++i) {
            check_action(program_.actions[i], at_or(locations_.actions, i, empty_list_));
        }
        check_orders();
        if (!found_) {
            return absl::OkStatus();
        }
        return absl::InvalidArgumentError(at_location(first_location_, first_message_));
    }

private:
    void report(SourceLocation location, std::string message) {
        const bool earlier =
            location.line > 0 && (first_location_.line <= 0 ||
                                  std::pair(location.line, location.column) <
                                      std::pair(first_location_.line, first_location_.column));
        if (!found_ || earlier) {
            found_ = true;
            first_location_ = location;
            first_message_ = std::move(message);
        }
    }

    void check_gpus() {
        for (size_t i = 0; i < program_.gpus.size(); ++i) {
            const int gpu = program_.gpus[i];
            const SourceLocation location = at_or(locations_.gpus, i, SourceLocation{});
            if (gpu < 0) {
                report(location, absl::StrCat("GPU id ", gpu, " is negative"));
            } else if (!gpus_.insert(gpu).second) {
                report(location, absl::StrCat("GPU ", gpu, " is declared twice"));
            }
        }
    }

    void check_partitions() {
        std::set<std::string> names;
        const PartitionLocations none;
        for (size_t i = 0; i < program_.partitions.size(); ++i) {
            const Partition& partition = program_.partitions[i];
            const PartitionLocations& where = at_or(locations_.partitions, i, none);
            const std::string name = quote(partition.name);
            if (!is_identifier(partition.name)) {
                report(where.name, absl::StrCat("partition name ", name,
                                                " is not an identifier (a letter, then letters, "
                                                "digits or '_')"));
            }
            if (!names.insert(partition.name).second) {
                report(where.name, absl::StrCat("duplicate partition name ", name));
            }
            if (partition.size.has_value()) {
                const int size = *partition.size;
                if (size < 1) {
                    report(where.size, absl::StrCat("partition ", name, " has size ", size,
                                                    "; a size must be at least 1"));
                } else if (static_cast<size_t>(size) > program_.gpus.size()) {
                    report(where.size,
                           absl::StrCat("partition ", name, " has size ", size, " but only ",
                                        program_.gpus.size(), " GPUs are declared"));
                }
                if (!partition.members.empty()) {
                    report(where.name,
                           absl::StrCat("partition ", name, " has both a size and members"));
                }
                continue;
            }
            if (partition.members.empty()) {
                report(where.name, absl::StrCat("partition ", name, " has no members"));
            }
            std::set<int> members;
            for (size_t m = 0; m < partition.members.size(); ++m) {
                const int gpu = partition.members[m];
                const SourceLocation location = at_or(where.members, m, where.name);
                if (gpus_.count(gpu) == 0) {
                    report(location, absl::StrCat("undeclared GPU ", gpu, " in partition ", name));
                } else if (!members.insert(gpu).second) {
                    report(location,
                           absl::StrCat("GPU ", gpu, " is listed twice in partition ", name));
                }
            }
        }
    }

    void check_ins() {
        std::set<std::pair<std::string, int>> placed;
        std::map<std::string, size_t> first_of_atom;
        const InLocations none;
        for (size_t i = 0; i < program_.ins.size(); ++i) {
            const InDecl& in = program_.ins[i];
            const InLocations& where = at_or(locations_.ins, i, none);
            const std::string atom = quote(in.atom);
            if (!is_identifier(in.atom)) {
                report(where.atom, absl::StrCat("atom name ", atom,
                                                " is not an identifier (a letter, then letters, "
                                                "digits or '_')"));
            }
            if (gpus_.count(in.gpu) == 0) {
                report(where.gpu, absl::StrCat("undeclared GPU ", in.gpu, " in IN of atom ", atom));
            }
            if (!(in.bytes > 0) || !std::isfinite(in.bytes)) {
                report(where.atom,
                       absl::StrCat("size of atom ", atom, " must be positive and finite"));
            }
            if (!placed.insert({in.atom, in.gpu}).second) {
                report(where.atom,
                       absl::StrCat("atom ", atom, " is declared twice at GPU ", in.gpu));
            }
            const auto [first, inserted] = first_of_atom.emplace(in.atom, i);
            if (!inserted && program_.ins[first->second].bytes != in.bytes) {
                const InDecl& other = program_.ins[first->second];
                report(where.atom,
                       absl::StrCat("atom ", atom, " has size ", size_text(in.bytes), " at GPU ",
                                    in.gpu, " but ", size_text(other.bytes), " at GPU ", other.gpu,
                                    "; copies of an atom have one size"));
            }
            atoms_.insert(in.atom);
        }
    }

    void check_aggregate(const Aggregate& aggregate, SourceLocation fallback,
                         const ListLocations& where, absl::string_view what) {
        if (aggregate.empty()) {
            report(fallback, absl::StrCat("empty aggregate in ", what));
        }
        for (const std::string& atom : aggregate) {
            const auto found = where.atoms.find(atom);
            const SourceLocation location = found == where.atoms.end() ? fallback : found->second;
            if (atoms_.count(atom) == 0) {
                report(location,
                       absl::StrCat("undeclared atom ", quote(atom), " (no IN declares it)"));
            }
        }
    }

    void check_site(const Site& site, SourceLocation location) {
        if (site.is_partition) {
            if (program_.find_partition(site.partition) == nullptr) {
                report(location, absl::StrCat("undeclared partition ", quote(site.partition)));
            }
        } else if (gpus_.count(site.gpu) == 0) {
            report(location, absl::StrCat("undeclared GPU ", site.gpu));
        }
    }

    void check_sites(const std::vector<Site>& sites, const std::vector<SourceLocation>& where,
                     SourceLocation fallback, absl::string_view what) {
        if (sites.empty()) {
            report(fallback, absl::StrCat("empty site list in ", what));
        }
        for (size_t i = 0; i < sites.size(); ++i) {
            const SourceLocation location = at_or(where, i, fallback);
            check_site(sites[i], location);
            for (size_t j = 0; j < i; ++j) {
                if (sites[j] == sites[i]) {
                    report(location, absl::StrCat("site ", quote(sites[i].to_string()),
                                                  " is listed twice in ", what));
                    break;
                }
            }
        }
    }

    void check_label(const Action& action, SourceLocation location) {
        if (action.label.empty()) {
            return;
        }
        const std::string label = quote(action.label);
        if (!is_identifier(action.label)) {
            report(location, absl::StrCat("label ", label,
                                          " is not an identifier (a letter, then letters, digits "
                                          "or '_')"));
        } else if (is_header_keyword(action.label)) {
            report(location, keyword_label_message(action.label));
        }
        const auto [first, inserted] = labels_.emplace(action.label, location);
        if (!inserted) {
            report(location, first->second.line > 0
                                 ? absl::StrCat("duplicate label ", label, " (first at line ",
                                                first->second.line, ")")
                                 : absl::StrCat("duplicate label ", label));
        }
    }

    void check_chunk(const Chunk& chunk, const ListLocations& where, SourceLocation fallback) {
        auto or_fallback = [&](SourceLocation location) {
            return location.line > 0 ? location : fallback;
        };
        if (chunk.count < 1 || chunk.count > Chunk::kMaxCount) {
            report(or_fallback(where.chunk_count),
                   absl::StrCat("chunk count ", chunk.count, ": must be between 1 and ",
                                Chunk::kMaxCount));
        } else if (chunk.index < 0 || chunk.index >= chunk.count) {
            report(or_fallback(where.chunk_index),
                   absl::StrCat("chunk index ", chunk.index, " out of range for ", chunk.count,
                                chunk.count == 1 ? " chunk" : " chunks", " (0 to ", chunk.count - 1,
                                ")"));
        }
    }

    // Run after every action's label is known (labels_), so ORDER may precede the actions.
    void check_orders() {
        for (const OrderDecl& order : program_.orders) {
            const SourceLocation after_location =
                order.after_location.line > 0 ? order.after_location : order.location;
            bool declared = true;
            for (const auto& [label, location] : {std::pair(&order.before, order.location),
                                                  std::pair(&order.after, after_location)}) {
                if (labels_.count(*label) == 0) {
                    report(location, absl::StrCat("ORDER names label ", quote(*label),
                                                  " that no action has"));
                    declared = false;
                }
            }
            if (declared && order.before == order.after) {
                report(after_location,
                       absl::StrCat("action ", quote(order.after), " is ordered after itself"));
            }
        }
    }

    void check_action(const Action& action, const ListLocations& where) {
        check_label(action, where.label.line > 0 ? where.label : action.location);
        check_aggregate(action.aggregate, action.location, where, "action");
        check_chunk(action.chunk, where, action.location);
        check_site(action.source, where.source.line > 0 ? where.source : action.location);
        for (size_t h = 0; h < action.hops.size(); ++h) {
            const std::vector<Site>& hop = action.hops[h];
            const std::vector<SourceLocation>& hop_where = at_or(where.sites, h, empty_sites_);
            if (hop.empty()) {
                report(action.location, "empty hop in action");
            } else if (hop.size() > 1 && h + 1 < action.hops.size()) {
                report(at_or(hop_where, 0, action.location),
                       "multicast in a non-final relay hop: only the last hop may name several "
                       "sites");
            }
            check_sites(hop, hop_where, action.location, "a hop");
        }
    }

    const Program& program_;
    const Locations& locations_;
    const ListLocations empty_list_;
    const std::vector<SourceLocation> empty_sites_;
    std::set<int> gpus_;
    std::set<std::string> atoms_;
    std::map<std::string, SourceLocation> labels_; // each label's first action
    bool found_ = false;
    SourceLocation first_location_;
    std::string first_message_;
};

// ---------------------------------------------------------------------------------------------
// The parser: recursive descent over the tokens, one statement per line.

class Parser {
public:
    explicit Parser(absl::string_view text) : tokens_(tokenize(text)) {}

    absl::StatusOr<Program> parse() {
        while (peek().kind != Kind::end) {
            if (peek().kind == Kind::newline) {
                ++position_;
                continue;
            }
            EINSUMMABLE_RETURN_IF_ERROR(statement_line());
        }
        EINSUMMABLE_RETURN_IF_ERROR(DeclarationChecker(program_, locations_).check());
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
        const Unit* unit = nullptr;
        for (const Unit& candidate : units) {
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

absl::Status check_declarations(const Program& program) {
    const Locations locations = element_locations(program);
    return DeclarationChecker(program, locations).check();
}

std::string print_program(const Program& program) {
    std::string text;
    auto site_list = [](const std::vector<Site>& sites) {
        return absl::StrJoin(sites, ", ", [](std::string* out, const Site& site) {
            absl::StrAppend(out, site.to_string());
        });
    };
    if (!program.gpus.empty()) {
        absl::StrAppend(&text, "GPUS: ", absl::StrJoin(program.gpus, ", "), "\n");
    }
    if (!program.partitions.empty()) {
        absl::StrAppend(&text, "PARTITIONS: ",
                        absl::StrJoin(program.partitions, ", ",
                                      [](std::string* out, const Partition& partition) {
                                          if (partition.size.has_value()) {
                                              absl::StrAppend(out, partition.name, " {size ",
                                                              *partition.size, "}");
                                          } else {
                                              absl::StrAppend(
                                                  out, partition.name, " {",
                                                  absl::StrJoin(partition.members, ", "), "}");
                                          }
                                      }),
                        "\n");
    }
    for (const InDecl& in : program.ins) {
        absl::StrAppend(&text, "IN: ", in.atom, " @ ", in.gpu, " (size: ", size_text(in.bytes),
                        ")\n");
    }
    for (const OutDecl& out : program.outs) {
        absl::StrAppend(&text, "OUT: ", aggregate_to_string(out.aggregate), " @ ",
                        site_list(out.sites), "\n");
    }
    if (!text.empty() && (!program.actions.empty() || !program.orders.empty())) {
        text += "\n";
    }
    for (const Action& action : program.actions) {
        absl::StrAppend(&text, action.to_string(), "\n");
    }
    // Consecutive pairs that chain (a < b, b < c) print as one chain.
    for (size_t i = 0; i < program.orders.size();) {
        absl::StrAppend(&text, "ORDER: ", program.orders[i].before, " < ", program.orders[i].after);
        size_t j = i + 1;
        for (; j < program.orders.size() && program.orders[j].before == program.orders[j - 1].after;
             ++j) {
            absl::StrAppend(&text, " < ", program.orders[j].after);
        }
        text += "\n";
        i = j;
    }
    return text;
}

} // namespace einsummable::exprog
