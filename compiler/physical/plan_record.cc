#include "compiler/physical/plan_record.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/parser.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/cost_model.h"
#include "compiler/logical/micro_batches.h"
#include "compiler/support/lexer.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

constexpr absl::string_view kMagic = "einsummable-plan-record";

std::string quote_name(absl::string_view name) {
    return absl::StrCat("\"", absl::CEscape(name), "\"");
}

// Shortest text that reads back to the same double.
std::string number(double value) {
    return absl::StrFormat("%.17g", value);
}

// ---------------------------------------------------------------------------------------------
// Writing

void write_exchange(const Exchange& exchange, absl::string_view indent, std::string& out) {
    absl::StrAppend(&out, indent, "membership");
    for (const auto& [partition, gpus] : exchange.membership) {
        absl::StrAppend(&out, " ", partition, "=", absl::StrJoin(gpus, ","));
    }
    absl::StrAppend(&out, "\n", indent, "times ", number(exchange.simulated_s), " ",
                    number(exchange.naive_simulated_s), "\n");
    const std::string text = exprog::print_program(exchange.program);
    std::vector<absl::string_view> lines = absl::StrSplit(text, '\n', absl::SkipWhitespace());
    absl::StrAppend(&out, indent, "program ", lines.size(), "\n");
    for (absl::string_view line : lines) {
        absl::StrAppend(&out, indent, "  ", line, "\n");
    }
}

} // namespace

std::string plan_record(const ir::Graph& graph, const logical::LogicalPlan& logical,
                        const PhysicalPlan& physical) {
    std::string out = absl::StrCat(kMagic, " ", kPlanRecordVersion, "\n");
    absl::StrAppend(&out, "plan devices ", logical.options.devices, " planner ",
                    logical::planner_name(logical.options.planner), " seed ", logical.options.seed,
                    " schedule ", exprog::synthesis_mode_name(physical.mode), " topology ",
                    quote_name(physical.topology),
                    logical.objective.has_value()
                        ? absl::StrCat(" objective ",
                                       logical::objective_name(logical.objective->objective),
                                       " predicted ", number(logical.objective->predicted_s),
                                       " origin ", quote_name(logical.objective->origin))
                        : std::string(),
                    "\n");
    if (!logical.micro_batches.empty()) {
        absl::StrAppend(&out, "micro_batches ", absl::StrJoin(logical.micro_batches, " "), "\n");
    }
    for (size_t id = 0; id < graph.nodes().size() && id < logical.operators.size(); ++id) {
        const ir::GraphNode& node = graph.nodes()[id];
        absl::StrAppend(&out, "operator ", quote_name(node.name), " ", node.op->kind(), "\n");
        const std::vector<ir::ShardableIndex> indices = node.op->shardable_indices();
        const ir::IntervalRequest& request = logical.operators[id].choice.request;
        for (size_t idx = 0; idx < request.size(); ++idx) {
            absl::StrAppend(&out, "  index ",
                            quote_name(idx < indices.size() ? indices[idx].name : std::string()));
            for (const ir::Interval& interval : request[idx]) {
                absl::StrAppend(&out, " ", interval.to_string());
            }
            absl::StrAppend(&out, "\n");
        }
        if (id < physical.operators.size()) {
            for (const Exchange& exchange : physical.operators[id].exchanges) {
                absl::StrAppend(&out, "  exchange input ", exchange.input_idx, " tensor ",
                                quote_name(graph.tensor(exchange.tensor).name), "\n");
                write_exchange(exchange, "    ", out);
            }
        }
    }
    for (const Exchange& exchange : physical.saved) {
        absl::StrAppend(&out, "saved ", quote_name(graph.tensor(exchange.tensor).name), "\n");
        write_exchange(exchange, "  ", out);
    }
    absl::StrAppend(&out, "end\n");
    return out;
}

namespace {

// ---------------------------------------------------------------------------------------------
// Reading: the record's text into these structures. Nothing is checked against the graph yet.

struct RecordedExchange {
    int line = 0;       // of its `exchange` or `saved` line
    int input_idx = -1; // -1: a saved output
    std::string tensor;
    exprog::Membership membership;
    double simulated_s = 0.0;
    double naive_simulated_s = 0.0;
    exprog::Program program;
};

struct RecordedIndex {
    int line = 0;
    std::string name;
    std::vector<ir::Interval> intervals;
};

struct RecordedOperator {
    int line = 0;
    std::string name;
    std::string kind;
    std::vector<RecordedIndex> indices;
    std::vector<RecordedExchange> exchanges;
};

struct Record {
    int64_t devices = 0;
    std::string planner;
    uint64_t seed = 0;
    std::string schedule;
    std::string topology;
    // Unset: a record from before records named the objective.
    std::optional<logical::PlanObjective> objective;
    // 'micro_batches W1 W2 ...' after the plan line (their weights); absent: none.
    std::vector<int> micro_batches;
    std::vector<RecordedOperator> operators;
    std::vector<RecordedExchange> saved;
};

struct Token {
    std::string text;
    bool quoted = false;
};

// A line-by-line reader. Errors are sticky: the first one is kept, later reads return empty
// values, and callers check ok() once per line. A line's fields are words (runs of bytes other
// than spaces, tabs, '\r' and '"') and quoted, C-escaped names.
class Reader {
public:
    explicit Reader(absl::string_view text) : lexer_(text) {}

    bool ok() const { return status_.ok(); }
    const absl::Status& status() const { return status_; }
    int line() const { return line_; }
    const std::vector<Token>& tokens() const { return tokens_; }

    // Moves to the next line that is not blank and splits it into tokens; false at the end of
    // the text (or after an error).
    bool advance() {
        tokens_.clear();
        while (ok() && lexer_.lines_left() > 0) {
            line_ = lexer_.line();
            tokenize_line();
            if (!tokens_.empty()) {
                return ok();
            }
        }
        return false;
    }

    // The next `count` lines as they are (a program's text).
    std::string raw_lines(int64_t count) {
        if (count < 0 || count > lexer_.lines_left()) {
            fail(absl::StrCat("the program is said to have ", count, " lines; the record has ",
                              lexer_.lines_left(), " left"));
            return {};
        }
        std::string text;
        for (int64_t i = 0; i < count; ++i) {
            absl::StrAppend(&text, lexer_.take_line(), "\n");
        }
        line_ = lexer_.line() - 1;
        return text;
    }

    void fail(absl::string_view message) {
        if (ok()) {
            status_ =
                absl::InvalidArgumentError(absl::StrCat("plan record line ", line_, ": ", message));
        }
    }

    // The current line is `keyword ...` with `count` tokens (or at least `count` when
    // `at_least`).
    bool is(absl::string_view keyword) const {
        return !tokens_.empty() && !tokens_[0].quoted && tokens_[0].text == keyword;
    }
    void expect_shape(absl::string_view keyword, size_t count, bool at_least = false) {
        if (!is(keyword)) {
            fail(absl::StrCat("expected '", keyword, "', found '", first(), "'"));
        } else if (at_least ? tokens_.size() < count : tokens_.size() != count) {
            fail(absl::StrCat("'", keyword, "' takes ", at_least ? "at least " : "", count - 1,
                              " fields; found ", tokens_.size() - 1));
        }
    }
    void expect_word(size_t idx, absl::string_view word) {
        if (ok() && (idx >= tokens_.size() || tokens_[idx].quoted || tokens_[idx].text != word)) {
            fail(absl::StrCat("expected '", word, "' as field ", idx, " of '", first(), "'"));
        }
    }
    std::string word(size_t idx) {
        if (ok() && (idx >= tokens_.size() || tokens_[idx].quoted)) {
            fail(absl::StrCat("expected a word as field ", idx, " of '", first(), "'"));
        }
        return ok() ? tokens_[idx].text : std::string();
    }
    std::string name(size_t idx) {
        if (ok() && (idx >= tokens_.size() || !tokens_[idx].quoted)) {
            fail(absl::StrCat("expected a quoted name as field ", idx, " of '", first(), "'"));
        }
        return ok() ? tokens_[idx].text : std::string();
    }
    int64_t integer(size_t idx) {
        int64_t value = 0;
        const std::string text = word(idx);
        if (ok() && !absl::SimpleAtoi(text, &value)) {
            fail(absl::StrCat("expected an integer, found '", text, "'"));
        }
        return value;
    }
    uint64_t unsigned_integer(size_t idx) {
        uint64_t value = 0;
        const std::string text = word(idx);
        if (ok() && !absl::SimpleAtoi(text, &value)) {
            fail(absl::StrCat("expected a non-negative integer, found '", text, "'"));
        }
        return value;
    }
    double seconds(size_t idx) {
        double value = 0.0;
        const std::string text = word(idx);
        if (ok() && (!absl::SimpleAtod(text, &value) || !std::isfinite(value) || value < 0.0)) {
            fail(absl::StrCat("expected a time in seconds, found '", text, "'"));
        }
        return value;
    }

private:
    std::string first() const { return tokens_.empty() ? std::string() : tokens_[0].text; }

    // The current line's fields, then past its end.
    void tokenize_line() {
        while (true) {
            lexer_.skip_blanks(" \t\r");
            if (lexer_.at_line_end()) {
                lexer_.take_line();
                return;
            }
            if (lexer_.peek() != '"') {
                tokens_.push_back({std::string(lexer_.take_until(" \t\r\"")), false});
                continue;
            }
            const std::optional<absl::string_view> quoted = lexer_.take_quoted('"');
            if (!quoted.has_value()) {
                fail("a quoted name is not closed");
                return;
            }
            Token token{{}, true};
            std::string error;
            if (!absl::CUnescape(*quoted, &token.text, &error)) {
                fail(absl::StrCat("a quoted name has a bad escape: ", error));
                return;
            }
            tokens_.push_back(std::move(token));
        }
    }

    support::Lexer lexer_;
    int line_ = 0; // 1-based number of the line read last
    std::vector<Token> tokens_;
    absl::Status status_;
};

// "[lower,upper)" with lower < upper.
bool parse_interval(absl::string_view text, ir::Interval& interval) {
    if (text.size() < 5 || text.front() != '[' || text.back() != ')') {
        return false;
    }
    std::vector<absl::string_view> bounds = absl::StrSplit(text.substr(1, text.size() - 2), ',');
    return bounds.size() == 2 && absl::SimpleAtoi(bounds[0], &interval.lower) &&
           absl::SimpleAtoi(bounds[1], &interval.upper) && interval.lower < interval.upper;
}

// "F0=1,2": a partition's GPUs.
bool parse_membership_entry(absl::string_view text, exprog::Membership& membership) {
    const size_t equals = text.find('=');
    if (equals == absl::string_view::npos || equals == 0 || equals + 1 == text.size()) {
        return false;
    }
    std::vector<int> gpus;
    for (absl::string_view gpu_text : absl::StrSplit(text.substr(equals + 1), ',')) {
        int gpu = 0;
        if (!absl::SimpleAtoi(gpu_text, &gpu)) {
            return false;
        }
        gpus.push_back(gpu);
    }
    return membership.emplace(std::string(text.substr(0, equals)), std::move(gpus)).second;
}

// The lines after `exchange` or `saved`: membership, times, program.
void read_exchange_body(Reader& reader, RecordedExchange& exchange) {
    if (!reader.advance()) {
        reader.fail("the record ends inside an exchange (expected 'membership')");
        return;
    }
    reader.expect_shape("membership", 1, /*at_least=*/true);
    for (size_t idx = 1; reader.ok() && idx < reader.tokens().size(); ++idx) {
        const std::string entry = reader.word(idx);
        if (reader.ok() && !parse_membership_entry(entry, exchange.membership)) {
            reader.fail(absl::StrCat("expected 'partition=gpu,...' (each partition once), found '",
                                     entry, "'"));
        }
    }
    if (!reader.ok() || !reader.advance()) {
        reader.fail("the record ends inside an exchange (expected 'times')");
        return;
    }
    reader.expect_shape("times", 3);
    exchange.simulated_s = reader.seconds(1);
    exchange.naive_simulated_s = reader.seconds(2);
    if (!reader.ok() || !reader.advance()) {
        reader.fail("the record ends inside an exchange (expected 'program')");
        return;
    }
    reader.expect_shape("program", 2);
    const int64_t count = reader.integer(1);
    if (!reader.ok()) {
        return;
    }
    const int first_line = reader.line() + 1;
    const std::string text = reader.raw_lines(count);
    if (!reader.ok()) {
        return;
    }
    absl::StatusOr<exprog::Program> program = exprog::parse_program(text);
    if (!program.ok()) {
        reader.fail(absl::StrCat("the program on lines ", first_line, "-", reader.line(),
                                 " does not parse: ", program.status().message()));
        return;
    }
    exchange.program = *std::move(program);
}

// The first two lines: the magic and version, then 'plan' with the planner's settings; false
// when the record ends or is not one before the 'plan' line (the reader holds the error).
bool read_header(Reader& reader, Record& record) {
    if (!reader.advance() || !reader.is(kMagic)) {
        reader.fail(
            absl::StrCat("not a plan record (expected '", kMagic, " ", kPlanRecordVersion, "')"));
        return false;
    }
    reader.expect_shape(kMagic, 2);
    const int64_t version = reader.integer(1);
    if (reader.ok() && version != kPlanRecordVersion) {
        reader.fail(absl::StrCat("plan record format version ", version, "; this build reads ",
                                 kPlanRecordVersion));
    }
    if (!reader.ok() || !reader.advance()) {
        reader.fail("the record ends before its 'plan' line");
        return false;
    }
    // 'objective NAME predicted SECONDS origin "..."' ends the line of records made since the
    // objectives were named.
    const bool named = reader.tokens().size() == 17;
    reader.expect_shape("plan", named ? 17 : 11);
    reader.expect_word(1, "devices");
    record.devices = reader.integer(2);
    reader.expect_word(3, "planner");
    record.planner = reader.word(4);
    reader.expect_word(5, "seed");
    record.seed = reader.unsigned_integer(6);
    reader.expect_word(7, "schedule");
    record.schedule = reader.word(8);
    reader.expect_word(9, "topology");
    record.topology = reader.name(10);
    if (named) {
        reader.expect_word(11, "objective");
        const std::string name = reader.word(12);
        reader.expect_word(13, "predicted");
        const double predicted_s = reader.seconds(14);
        reader.expect_word(15, "origin");
        std::string origin = reader.name(16);
        absl::StatusOr<logical::Objective> objective = logical::parse_objective(name);
        if (reader.ok() && !objective.ok()) {
            reader.fail(std::string(objective.status().message()));
        } else if (reader.ok()) {
            record.objective = logical::PlanObjective{*objective, predicted_s, std::move(origin)};
        }
    }
    return true;
}

void read_operator_line(Reader& reader, Record& record) {
    if (!record.saved.empty()) {
        reader.fail("an operator after the saved outputs");
    }
    reader.expect_shape("operator", 3);
    RecordedOperator op;
    op.line = reader.line();
    op.name = reader.name(1);
    op.kind = reader.word(2);
    record.operators.push_back(std::move(op));
}

void read_index_line(Reader& reader, Record& record) {
    reader.expect_shape("index", 2, /*at_least=*/true);
    if (record.operators.empty() || !record.operators.back().exchanges.empty() ||
        !record.saved.empty()) {
        reader.fail("'index' belongs after its 'operator' line, before its exchanges");
    }
    RecordedIndex index;
    index.line = reader.line();
    index.name = reader.name(1);
    for (size_t idx = 2; reader.ok() && idx < reader.tokens().size(); ++idx) {
        ir::Interval interval;
        const std::string interval_text = reader.word(idx);
        if (reader.ok() && !parse_interval(interval_text, interval)) {
            reader.fail(
                absl::StrCat("expected an interval '[lower,upper)', found '", interval_text, "'"));
        }
        index.intervals.push_back(interval);
    }
    if (reader.ok()) {
        record.operators.back().indices.push_back(std::move(index));
    }
}

void read_exchange_lines(Reader& reader, Record& record) {
    reader.expect_shape("exchange", 5);
    if (record.operators.empty() || !record.saved.empty()) {
        reader.fail("'exchange' belongs to an operator");
    }
    RecordedExchange exchange;
    exchange.line = reader.line();
    reader.expect_word(1, "input");
    const int64_t input_idx = reader.integer(2);
    if (reader.ok() && (input_idx < 0 || input_idx > std::numeric_limits<int>::max())) {
        reader.fail(absl::StrCat("input ", input_idx, " out of range"));
    }
    exchange.input_idx = static_cast<int>(input_idx);
    reader.expect_word(3, "tensor");
    exchange.tensor = reader.name(4);
    if (reader.ok()) {
        read_exchange_body(reader, exchange);
    }
    if (reader.ok()) {
        record.operators.back().exchanges.push_back(std::move(exchange));
    }
}

void read_saved_lines(Reader& reader, Record& record) {
    reader.expect_shape("saved", 2);
    RecordedExchange exchange;
    exchange.line = reader.line();
    exchange.tensor = reader.name(1);
    if (reader.ok()) {
        read_exchange_body(reader, exchange);
    }
    if (reader.ok()) {
        record.saved.push_back(std::move(exchange));
    }
}

absl::StatusOr<std::optional<logical::Objective>> read_recorded_objective(absl::string_view text) {
    Reader reader(text);
    Record record;
    if (!read_header(reader, record) || !reader.ok()) {
        return reader.status();
    }
    if (!record.objective.has_value()) {
        return std::optional<logical::Objective>();
    }
    return record.objective->objective;
}

absl::StatusOr<Record> read_record(absl::string_view text) {
    Reader reader(text);
    Record record;
    if (!read_header(reader, record)) {
        return reader.status();
    }
    bool ended = false;
    while (reader.ok() && reader.advance()) {
        if (ended) {
            reader.fail("text after 'end'");
        } else if (reader.is("end")) {
            reader.expect_shape("end", 1);
            ended = true;
        } else if (reader.is("micro_batches")) {
            reader.expect_shape("micro_batches", 3, /*at_least=*/true);
            if (!record.operators.empty() || !record.micro_batches.empty()) {
                reader.fail(!record.operators.empty() ? "'micro_batches' after the first operator"
                                                      : "a second 'micro_batches' line");
            }
            const size_t count = reader.tokens().size() - 1;
            if (reader.ok() && count > static_cast<size_t>(logical::kMaxMicroBatches)) {
                reader.fail(absl::StrCat(count, " micro-batches (at most ",
                                         logical::kMaxMicroBatches, ")"));
            }
            for (size_t k = 1; reader.ok() && k <= count; ++k) {
                const int64_t weight = reader.integer(k);
                if (reader.ok() && (weight < 1 || weight > logical::kMaxMicroBatchWeight)) {
                    reader.fail(absl::StrCat("micro-batch weight ", weight,
                                             " is not between 1 and ",
                                             logical::kMaxMicroBatchWeight));
                }
                record.micro_batches.push_back(static_cast<int>(weight));
            }
        } else if (reader.is("operator")) {
            read_operator_line(reader, record);
        } else if (reader.is("index")) {
            read_index_line(reader, record);
        } else if (reader.is("exchange")) {
            read_exchange_lines(reader, record);
        } else if (reader.is("saved")) {
            read_saved_lines(reader, record);
        } else {
            reader.fail(absl::StrCat("expected 'micro_batches', 'operator', 'index', "
                                     "'exchange', 'saved' or 'end', found '",
                                     reader.tokens()[0].text, "'"));
        }
    }
    if (reader.ok() && !ended) {
        reader.fail("the record has no 'end' line (truncated?)");
    }
    EINSUMMABLE_RETURN_IF_ERROR(reader.status());
    return record;
}

// ---------------------------------------------------------------------------------------------
// Checking the record against the graph.

absl::Status header_mismatch(absl::string_view what, absl::string_view recorded,
                             absl::string_view asked) {
    return absl::InvalidArgumentError(absl::StrCat("the plan record is for ", what, " ", recorded,
                                                   "; the plan asks for ", what, " ", asked));
}

absl::Status check_header(const Record& record, const logical::PlannerOptions& planner,
                          const exprog::Topology& topology, exprog::SynthesisMode mode) {
    if (record.devices != planner.devices) {
        return header_mismatch("devices", absl::StrCat(record.devices),
                               absl::StrCat(planner.devices));
    }
    if (record.planner != logical::planner_name(planner.planner)) {
        return header_mismatch("planner", record.planner, logical::planner_name(planner.planner));
    }
    if (record.seed != planner.seed) {
        return header_mismatch("seed", absl::StrCat(record.seed), absl::StrCat(planner.seed));
    }
    if (record.schedule != exprog::synthesis_mode_name(mode)) {
        return header_mismatch("schedule", record.schedule, exprog::synthesis_mode_name(mode));
    }
    if (record.topology != topology.name()) {
        return header_mismatch("topology", record.topology, topology.name());
    }
    return absl::OkStatus();
}

// The candidate a recorded operator chose: its request checked against the graph's operator.
absl::StatusOr<logical::Candidate>
restore_candidate(const ir::GraphNode& node, const RecordedOperator& recorded, int64_t devices) {
    const std::string what = absl::StrCat("operator '", node.name, "'");
    if (recorded.name != node.name) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": the plan record has operator '",
                                                       recorded.name, "' in its place (line ",
                                                       recorded.line, ")"));
    }
    if (recorded.kind != node.op->kind()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " is a ", node.op->kind(),
                                                       "; the plan record has a ", recorded.kind,
                                                       " (line ", recorded.line, ")"));
    }
    const std::vector<ir::ShardableIndex> indices = node.op->shardable_indices();
    if (recorded.indices.size() != indices.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has ", indices.size(), " shardable indices; the plan record has ",
                         recorded.indices.size(), " (line ", recorded.line, ")"));
    }
    ir::IntervalRequest request;
    int64_t functions = 1; // combinations: an upper bound on the function specs
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        const RecordedIndex& index = recorded.indices[idx];
        if (index.name != indices[idx].name) {
            return absl::InvalidArgumentError(
                absl::StrCat(what, ": shardable index ", idx, " is '", indices[idx].name,
                             "'; the plan record has '", index.name, "' (line ", index.line, ")"));
        }
        const int64_t count = static_cast<int64_t>(index.intervals.size());
        // Every count is at least 1, so once the product passes `devices` it stays past it.
        functions = functions > devices ? functions : functions * count;
        request.push_back(index.intervals);
    }
    // Attention leaves pairs without work out, so a request of more combinations than devices
    // may still fit: build its spec unless the combinations pass any plausible count (bounding
    // the work a corrupt record can ask for).
    if (functions > devices * devices) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the plan record splits it into more function specs than the ",
                         devices, " devices (line ", recorded.line, ")"));
    }
    absl::StatusOr<logical::Candidate> candidate = logical::make_candidate(*node.op, request);
    if (!candidate.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the recorded request ", ir::request_to_string(indices, request),
                         " is not valid: ", candidate.status().message()));
    }
    if (candidate->functions > devices) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": the plan record splits it into more function specs than the ",
                         devices, " devices (line ", recorded.line, ")"));
    }
    return candidate;
}

exprog::Program without_actions(const exprog::Program& program) {
    exprog::Program preamble = program;
    preamble.actions.clear();
    preamble.orders.clear();
    return preamble;
}

// The first line where the printed preambles differ, for the error.
std::string first_difference(const exprog::Program& recorded, const exprog::Program& expected) {
    const std::vector<std::string> a =
        absl::StrSplit(exprog::print_program(without_actions(recorded)), '\n');
    const std::vector<std::string> b =
        absl::StrSplit(exprog::print_program(without_actions(expected)), '\n');
    for (size_t line = 0; line < std::max(a.size(), b.size()); ++line) {
        const std::string left = line < a.size() ? a[line] : "(nothing)";
        const std::string right = line < b.size() ? b[line] : "(nothing)";
        if (left != right) {
            return absl::StrCat("recorded '", left, "', expected '", right, "'");
        }
    }
    return "the same text, other values";
}

// Takes a recorded exchange as the body of `exchange` (whose preamble build_physical made),
// after checking it fits.
absl::Status take_recorded(const RecordedExchange& recorded, const std::string& what,
                           Exchange& exchange) {
    const exprog::Program& program = recorded.program;
    const exprog::Program& preamble = exchange.program;
    if (program.gpus != preamble.gpus || program.partitions != preamble.partitions ||
        program.ins != preamble.ins || program.outs != preamble.outs) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, ": the recorded program (line ", recorded.line,
            ") has another preamble than the graph's: ", first_difference(program, preamble)));
    }
    std::set<std::string> sized;
    for (const exprog::Partition& partition : program.partitions) {
        if (!partition.size) {
            continue;
        }
        sized.insert(partition.name);
        auto it = recorded.membership.find(partition.name);
        if (it == recorded.membership.end() ||
            static_cast<int>(it->second.size()) != *partition.size) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": the recorded membership (line ", recorded.line,
                ") does not give partition ", partition.name, " its ", *partition.size, " GPU(s)"));
        }
        for (size_t i = 0; i < it->second.size(); ++i) {
            const int gpu = it->second[i];
            if (std::find(program.gpus.begin(), program.gpus.end(), gpu) == program.gpus.end() ||
                std::find(it->second.begin(), it->second.begin() + i, gpu) !=
                    it->second.begin() + i) {
                return absl::InvalidArgumentError(absl::StrCat(
                    what, ": the recorded membership (line ", recorded.line, ") puts partition ",
                    partition.name, " on GPU ", gpu, " twice or outside GPUS"));
            }
        }
    }
    for (const auto& [partition, gpus] : recorded.membership) {
        if (!sized.count(partition)) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, ": the recorded membership (line ", recorded.line, ") names partition '",
                partition, "', which the program does not declare by size"));
        }
    }
    absl::Status valid = exprog::check_well_formed(program);
    if (valid.ok()) {
        valid = exprog::check_with_membership(program, recorded.membership);
    }
    if (!valid.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": the recorded program (line ",
                                                       recorded.line,
                                                       ") is not valid: ", valid.message()));
    }
    exchange.program = program;
    exchange.membership = recorded.membership;
    exchange.simulated_s = recorded.simulated_s;
    exchange.naive_simulated_s = recorded.naive_simulated_s;
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::optional<logical::Objective>> recorded_objective(absl::string_view record) {
    return read_recorded_objective(record);
}

absl::StatusOr<RestoredPlan> restore_plan(const ir::Graph& graph,
                                          const logical::PlannerOptions& planner,
                                          const exprog::Topology& topology,
                                          exprog::SynthesisMode mode, absl::string_view text,
                                          const ResidentLayout* resident) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const Record record, read_record(text));
    EINSUMMABLE_RETURN_IF_ERROR(check_header(record, planner, topology, mode));

    const size_t nodes = graph.nodes().size();
    logical::GraphCandidates candidates;
    for (size_t id = 0; id < nodes && id < record.operators.size(); ++id) {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            logical::Candidate candidate,
            restore_candidate(graph.nodes()[id], record.operators[id], planner.devices));
        // A batch-invariant plan aggregates nothing (logical::keep_unaggregated); a record that
        // does was planned without that option.
        if (planner.batch_invariant && !logical::is_baseline(planner.planner) &&
            logical::aggregates(candidate)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "operator '", graph.nodes()[id].name,
                "': the plan record aggregates its output (line ", record.operators[id].line,
                "), which a batch-invariant plan never does: it was planned without "
                "batch_invariant"));
        }
        candidates.push_back({std::move(candidate)});
    }
    if (record.operators.size() > nodes) {
        const RecordedOperator& extra = record.operators[nodes];
        return absl::InvalidArgumentError(
            absl::StrCat("the plan record has operator '", extra.name, "' (line ", extra.line,
                         ") beyond the graph's ", nodes, " operators"));
    }
    if (record.operators.size() < nodes) {
        return absl::InvalidArgumentError(
            absl::StrCat("operator '", graph.nodes()[record.operators.size()].name,
                         "' is not in the plan record (it has ", record.operators.size(), " of ",
                         nodes, " operators)"));
    }
    logical::add_pinned_repartition(graph, planner.pinned, candidates);
    RestoredPlan restored;
    restored.logical = logical::make_plan(graph, planner, candidates, std::vector<int>(nodes, 0));
    restored.logical.objective = record.objective;
    EINSUMMABLE_RETURN_IF_ERROR(
        logical::micro_batch_plan(graph, record.micro_batches, restored.logical));

    std::vector<size_t> next_exchange(nodes, 0);
    size_t next_saved = 0;
    // Each exchange the physical compiler asks for is the next one recorded for its site.
    auto take_exchange = [&](const ExchangeSite& site, Exchange& exchange) -> absl::Status {
        const std::string& tensor = graph.tensor(site.tensor).name;
        const RecordedExchange* recorded = nullptr;
        if (site.node >= 0) {
            const RecordedOperator& op = record.operators[site.node];
            if (next_exchange[site.node] >= op.exchanges.size()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    site.what, ": the plan record has no exchange for it (operator line ", op.line,
                    ")"));
            }
            recorded = &op.exchanges[next_exchange[site.node]++];
            if (recorded->input_idx != site.input_idx || recorded->tensor != tensor) {
                return absl::InvalidArgumentError(absl::StrCat(
                    site.what, ": the plan record has an exchange of input ", recorded->input_idx,
                    " ('", recorded->tensor, "') in its place (line ", recorded->line, ")"));
            }
        } else {
            if (next_saved >= record.saved.size()) {
                return absl::InvalidArgumentError(
                    absl::StrCat(site.what, ": the plan record has no exchange for it"));
            }
            recorded = &record.saved[next_saved++];
            if (recorded->tensor != tensor) {
                return absl::InvalidArgumentError(
                    absl::StrCat(site.what, ": the plan record has saved output '",
                                 recorded->tensor, "' in its place (line ", recorded->line, ")"));
            }
        }
        return take_recorded(*recorded, site.what, exchange);
    };
    EINSUMMABLE_ASSIGN_OR_RETURN(
        PhysicalPlan physical,
        build_physical(graph, restored.logical, topology, mode, take_exchange, resident));
    for (size_t id = 0; id < nodes; ++id) {
        const RecordedOperator& op = record.operators[id];
        if (next_exchange[id] < op.exchanges.size()) {
            const RecordedExchange& extra = op.exchanges[next_exchange[id]];
            return absl::InvalidArgumentError(
                absl::StrCat("operator '", op.name, "': the plan record has an exchange of input ",
                             extra.input_idx, " ('", extra.tensor,
                             "') the graph does not need (line ", extra.line, ")"));
        }
    }
    if (next_saved < record.saved.size()) {
        const RecordedExchange& extra = record.saved[next_saved];
        return absl::InvalidArgumentError(
            absl::StrCat("saved output '", extra.tensor,
                         "': the plan record has an exchange for it the graph does not need "
                         "(line ",
                         extra.line, ")"));
    }
    restored.physical = std::move(physical);
    return restored;
}

} // namespace einsummable::physical
