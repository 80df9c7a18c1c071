#include "compiler/ir/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/ir/integer_values.h"
#include "compiler/ir/internal_error.h"
#include "compiler/ir/ops/sequence_ends.h"
#include "compiler/ir/scalar_op.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::StatusOr<OperatorPtr> Attention::make(const Attributes& attributes,
                                            std::vector<TensorType> inputs) {
    static constexpr absl::string_view kKnown[] = {"causal", "sequence_ends", "key_ends", "scale",
                                                   "page_size"};
    EINSUMMABLE_RETURN_IF_ERROR(attributes.check_known(kKnown));
    const bool paged = attributes.has("page_size");
    if (paged ? inputs.size() != 5 : inputs.size() != 3 && inputs.size() != 4) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attention takes 3 inputs (q, k, v), 4 (q, k, v, key_lengths) or, with page_size, 5 "
            "(q, k, v, key_lengths, page_table), got ",
            inputs.size(), paged ? " with page_size" : ""));
    }
    const char* names[] = {"q", "k", "v"};
    for (int idx = 0; idx < 3; ++idx) {
        if (inputs[idx].rank() != 3) {
            return operand_error("input", idx, inputs[idx],
                                 absl::StrCat(names[idx], " must be [sequence, heads, head_dim]"));
        }
        if (is_integer(inputs[idx].dtype)) {
            return operand_error("input", idx, inputs[idx],
                                 absl::StrCat("attention computes on floating-point ", names[idx],
                                              ", not ", dtype_name(inputs[idx].dtype)));
        }
        if (inputs[idx].dtype != inputs[0].dtype) {
            return operand_error(
                "input", idx, inputs[idx],
                absl::StrCat("dtype mismatch: q is ", dtype_name(inputs[0].dtype)));
        }
    }
    const TensorType& q = inputs[0];
    const TensorType& k = inputs[1];
    const TensorType& v = inputs[2];
    // Without key_ends the keys are the queries' own rows; with them (or pages), k's and v's rows
    // agree.
    if (paged && attributes.has("key_ends")) {
        return absl::InvalidArgumentError(
            "attention with page_size reads each sequence's keys through page_table: give no "
            "key_ends");
    }
    const bool has_key_ends = paged || attributes.has("key_ends");
    for (int idx = 1; idx < 3; ++idx) {
        const TensorType& rows_of = has_key_ends ? k : q;
        if (inputs[idx].dims[0].size != rows_of.dims[0].size) {
            return operand_error(
                "input", idx, inputs[idx],
                absl::StrCat("shape mismatch: dimension 0 ('", inputs[idx].dims[0].name, "') is ",
                             inputs[idx].dims[0].size,
                             has_key_ends ? absl::StrCat(", k's keys are ", k.dims[0].size)
                                          : absl::StrCat(", q's sequence is ", q.dims[0].size,
                                                         " (give key_ends for keys of a "
                                                         "length of their own)")));
        }
    }
    if (k.dims[2].size != q.dims[2].size) {
        return operand_error("input", 1, k,
                             absl::StrCat("shape mismatch: head dimension ", k.dims[2].size,
                                          " differs from q's ", q.dims[2].size));
    }
    if (v.dims[1].size != k.dims[1].size) {
        return operand_error(
            "input", 2, v,
            absl::StrCat("shape mismatch: ", v.dims[1].size, " heads, k has ", k.dims[1].size));
    }
    const int64_t heads_q = q.dims[1].size;
    const int64_t heads_kv = k.dims[1].size;
    if (heads_q % heads_kv != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "heads_q ('", q.dims[1].name, "' = ", heads_q, ") is not a multiple of heads_kv ('",
            k.dims[1].name, "' = ", heads_kv, ")"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const bool causal, attributes.get_bool_or("causal", false));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        const double scale,
        attributes.get_double_or("scale", 1.0 / std::sqrt(static_cast<double>(q.dims[2].size))));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> ends,
                                 sequence_ends_attribute(attributes, q.dims[0].size));
    std::vector<int64_t> key_ends = ends;
    int64_t page_size = 0;
    if (paged) {
        EINSUMMABLE_ASSIGN_OR_RETURN(page_size, attributes.get_int("page_size"));
        if (page_size < 1) {
            return absl::InvalidArgumentError(
                absl::StrCat("page_size is ", page_size, ": a page holds at least one key"));
        }
        if (k.dims[0].size % page_size != 0) {
            return operand_error("input", 1, k,
                                 absl::StrCat("k's ", k.dims[0].size,
                                              " rows are not whole pages of page_size ", page_size,
                                              " (k and v are the pool of pages)"));
        }
        const TensorType& table = inputs[4];
        if (table.rank() != 2 || !is_integer(table.dtype) ||
            table.dims[0].size != static_cast<int64_t>(ends.size()) || table.dims[1].size < 1) {
            return operand_error(
                "input", 4, table,
                absl::StrCat("page_table is i32 or i64 [sequences, pages_per_sequence], a row per "
                             "sequence (",
                             ends.size(), ") and at least one page"));
        }
        // Each sequence's keys are places [0, capacity), laid end to end (Segment).
        const int64_t capacity = table.dims[1].size * page_size;
        for (size_t idx = 0; idx < ends.size(); ++idx) {
            key_ends[idx] = capacity * static_cast<int64_t>(idx + 1);
        }
        for (size_t idx = 0; idx < ends.size() && causal; ++idx) {
            const int64_t queries = ends[idx] - (idx == 0 ? 0 : ends[idx - 1]);
            if (capacity < queries) {
                return absl::InvalidArgumentError(
                    absl::StrCat("sequence ", idx, " has ", queries, " queries and room for ",
                                 capacity, " keys (", table.dims[1].size, " pages of ", page_size,
                                 "): causal attention needs a key per query"));
            }
        }
    } else if (has_key_ends) {
        EINSUMMABLE_ASSIGN_OR_RETURN(key_ends,
                                     sequence_ends_attribute(attributes, k.dims[0].size, "key_ends",
                                                             /*may_end_early=*/true));
        if (key_ends.size() != ends.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("key_ends has ", key_ends.size(), " entries and sequence_ends ",
                             ends.size(), ": give one key end per sequence"));
        }
        for (size_t idx = 0; idx < ends.size() && causal; ++idx) {
            const int64_t queries = ends[idx] - (idx == 0 ? 0 : ends[idx - 1]);
            const int64_t keys = key_ends[idx] - (idx == 0 ? 0 : key_ends[idx - 1]);
            if (keys < queries) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "sequence ", idx, " has ", queries, " queries and only ", keys,
                    " keys: causal attention with key_ends aligns each sequence's queries with "
                    "its last keys (bottom-right) and needs at least as many keys as queries"));
            }
        }
    }
    if (inputs.size() >= 4) {
        const TensorType& lengths = inputs[3];
        if (!has_key_ends) {
            return operand_error("input", 3, lengths,
                                 "key_lengths fill the key regions key_ends gives; give key_ends");
        }
        if (lengths.rank() != 1 || !is_integer(lengths.dtype) ||
            lengths.dims[0].size != static_cast<int64_t>(ends.size())) {
            return operand_error("input", 3, lengths,
                                 absl::StrCat("key_lengths are i32 or i64 [sequences], one per "
                                              "sequence (",
                                              ends.size(), ")"));
        }
    }
    TensorType output{q.dtype, {q.dims[0], q.dims[1], v.dims[2]}};
    Attributes normalised = {{"causal", causal}, {"sequence_ends", ends}, {"scale", scale}};
    if (paged) {
        normalised.set("page_size", page_size);
    } else if (has_key_ends) {
        normalised.set("key_ends", key_ends);
    }
    return OperatorPtr(new Attention(std::move(normalised), std::move(inputs), std::move(output),
                                     causal, std::move(ends), std::move(key_ends), has_key_ends,
                                     scale, page_size));
}

Attention::Attention(Attributes attributes, std::vector<TensorType> inputs, TensorType output,
                     bool causal, std::vector<int64_t> sequence_ends, std::vector<int64_t> key_ends,
                     bool has_key_ends, double scale, int64_t page_size)
    : Operator(std::move(attributes), std::move(inputs), {std::move(output)}),
      group_size_(input_types()[0].dims[1].size / input_types()[1].dims[1].size), causal_(causal),
      sequence_ends_(std::move(sequence_ends)), key_ends_(std::move(key_ends)),
      has_key_ends_(has_key_ends), scale_(scale), page_size_(page_size) {}

Interval Attention::Segment::keys_of(int64_t t, bool causal, const Interval& block) const {
    const int64_t first = std::max(block.lower, key_begin);
    const int64_t last = causal ? t + causal_shift + 1 : key_end;
    return {first, std::max(first, std::min(last, block.upper))};
}

Attention::Segment Attention::segment_at(int64_t position, const Interval& rows,
                                         absl::Span<const int64_t> fills) const {
    const auto it = std::upper_bound(sequence_ends_.begin(), sequence_ends_.end(), position);
    EINSUMMABLE_CHECK(it != sequence_ends_.end(),
                      absl::StrCat("attention: query ", position, " is past the last end ",
                                   sequence_ends_.back()));
    const size_t idx = static_cast<size_t>(it - sequence_ends_.begin());
    const int64_t query_begin = idx == 0 ? 0 : sequence_ends_[idx - 1];
    Segment segment;
    segment.queries = {std::max(rows.lower, query_begin), std::min(rows.upper, *it)};
    segment.sequence = static_cast<int64_t>(idx);
    segment.key_begin = idx == 0 ? 0 : key_ends_[idx - 1];
    segment.key_end = fills.empty() ? key_ends_[idx] : segment.key_begin + fills[idx];
    segment.causal_shift = segment.key_end - *it;
    return segment;
}

std::vector<Attention::Segment> Attention::segments(const Interval& rows,
                                                    absl::Span<const int64_t> fills) const {
    EINSUMMABLE_CHECK(fills.empty() || fills.size() == sequence_ends_.size(),
                      absl::StrCat("attention: ", fills.size(), " key lengths for ",
                                   sequence_ends_.size(), " sequences"));
    std::vector<Segment> result;
    for (int64_t position = rows.lower; position < rows.upper;) {
        result.push_back(segment_at(position, rows, fills));
        position = result.back().queries.upper;
    }
    return result;
}

std::vector<Attention::KeyRun> Attention::key_runs(const Segment& segment, const Interval& place,
                                                   const Interval& block,
                                                   absl::Span<const int64_t> page_table) const {
    std::vector<KeyRun> runs;
    if (!has_pages()) {
        const int64_t begin = std::max(place.lower, block.lower);
        const int64_t end = std::min(place.upper, block.upper);
        if (begin < end) {
            runs.push_back({begin, end, begin});
        }
        return runs;
    }
    const int64_t per_sequence = pages_per_sequence();
    EINSUMMABLE_CHECK(static_cast<int64_t>(page_table.size()) ==
                          per_sequence * static_cast<int64_t>(sequence_ends_.size()),
                      absl::StrCat("attention: a page table of ", page_table.size(),
                                   " entries for ", sequence_ends_.size(), " sequences of ",
                                   per_sequence, " pages"));
    // Places count from the segment's key_begin; page p holds places [p, p + 1) · page_size.
    for (int64_t at = place.lower; at < place.upper;) {
        const int64_t offset = at - segment.key_begin;
        const int64_t page_end = std::min(place.upper, at + page_size_ - offset % page_size_);
        const int64_t page =
            page_table[static_cast<size_t>(segment.sequence * per_sequence + offset / page_size_)];
        const int64_t row = page * page_size_ + offset % page_size_;
        // The piece [at, page_end) is rows [row, row + page_end − at); keep what the block holds.
        const int64_t first = std::max(row, block.lower);
        const int64_t last = std::min(row + page_end - at, block.upper);
        if (first < last) {
            const KeyRun piece{at + first - row, at + last - row, first};
            if (!runs.empty() && runs.back().place_end == piece.place_begin &&
                runs.back().row_begin + (runs.back().place_end - runs.back().place_begin) ==
                    piece.row_begin) {
                runs.back().place_end = piece.place_end;
            } else {
                runs.push_back(piece);
            }
        }
        at = page_end;
    }
    return runs;
}

Interval Attention::key_hull(const Interval& rows) const {
    if (rows.empty()) {
        return {0, 0};
    }
    const Segment first = segment_at(rows.lower, rows);
    const Segment last = segment_at(rows.upper - 1, rows);
    // Causal: the last query sees the most keys of its sequence.
    const int64_t end = causal_ ? rows.upper - 1 + last.causal_shift + 1 : last.key_end;
    return {first.key_begin, std::max(first.key_begin, end)};
}

// Index 0: the query rows; 1: heads_kv; 2: the key rows.
std::vector<ShardableIndex> Attention::shardable_indices() const {
    const TensorType& q = input_types()[0];
    const TensorType& k = input_types()[1];
    return {ShardableIndex::any(q.dims[0].name, q.dims[0].size),
            ShardableIndex::any(k.dims[1].name, k.dims[1].size),
            ShardableIndex::any("keys", k.dims[0].size)};
}

std::vector<IndexRole> Attention::index_roles(const OperandRoles& /*operands*/) const {
    return {IndexRole::token, IndexRole::head, IndexRole::context};
}

bool Attention::has_spec_layout(const FunctionSpec& function) const {
    const size_t count = input_types().size();
    if (function.inputs.size() != count || function.outputs.size() != 1) {
        return false;
    }
    if (has_pages() && function.inputs[4] != input_types()[4].box()) {
        return false; // the whole page table
    }
    if (has_key_lengths() && (function.inputs[3].rank() != 1 ||
                              function.inputs[3][0].size() != input_types()[3].dims[0].size)) {
        return false; // the whole key_lengths
    }
    const Box& q = function.inputs[0];
    const Box& k = function.inputs[1];
    const Box& v = function.inputs[2];
    const Box& out = function.outputs[0];
    return q.rank() == 3 && k.rank() == 3 && v.rank() == 3 && out.rank() == 3 && v[0] == k[0] &&
           out[0] == q[0] && v[1] == k[1] && out[1] == q[1] &&
           q[1].lower == group_size_ * k[1].lower && q[1].upper == group_size_ * k[1].upper &&
           k[2].size() == q[2].size() && out[2].size() == v[2].size();
}

bool Attention::holds_whole_sequences(const FunctionSpec& function) const {
    if (has_pages()) {
        return false; // the keys are wherever the page table puts them
    }
    const Interval& rows = function.inputs[0][0];
    auto at_end = [&](int64_t position) {
        return position == 0 ||
               std::binary_search(sequence_ends_.begin(), sequence_ends_.end(), position);
    };
    if (!at_end(rows.lower) || !at_end(rows.upper)) {
        return false;
    }
    if (rows.empty()) {
        return function.inputs[1][0] == rows;
    }
    // The sequences' keys: from the first one's first key to the last one's last.
    const Interval keys{segment_at(rows.lower, rows).key_begin,
                        segment_at(rows.upper - 1, rows).key_end};
    return function.inputs[1][0] == keys;
}

absl::Status Attention::require_whole_sequences(const FunctionSpec& function,
                                                absl::string_view kernels) const {
    if (holds_whole_sequences(function)) {
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(
        absl::StrCat("blocks q ", function.inputs[0].to_string(), ", k ",
                     function.inputs[1].to_string(), " cut inside a sequence or along the keys; ",
                     kernels, " takes only blocks of whole sequences with their own keys"));
}

bool Attention::interacts(const Interval& queries, const Interval& keys) const {
    if (queries.empty() || keys.empty()) {
        return false;
    }
    if (has_pages()) {
        return true; // where a sequence's keys lie is known only at run time
    }
    // The keys query t attends to are [key_begin, t + shift + 1) (causal) or
    // [key_begin, key_end) of its sequence; both bounds grow with t, so a segment's keys are
    // what its last query sees.
    for (const Segment& segment : segments(queries)) {
        const int64_t end_key =
            causal_ ? segment.queries.upper + segment.causal_shift : segment.key_end;
        if (std::max(segment.key_begin, keys.lower) < std::min(end_key, keys.upper)) {
            return true;
        }
    }
    return false;
}

SpecLayout Attention::layout() const {
    const std::vector<DimBinding> queries = {{0, 1}, {1, group_size_}, {}};
    const std::vector<DimBinding> keys = {{2, 1}, {1, 1}, {}};
    if (has_pages()) {
        // Every function reads every sequence's length and the whole page table (a few bytes
        // per page).
        return {{queries, keys, keys, {DimBinding{}}, {DimBinding{}, DimBinding{}}},
                {queries},
                {AggOp::log_sum_exp}};
    }
    if (has_key_lengths()) {
        // Every function reads every sequence's length (a few bytes).
        return {{queries, keys, keys, {DimBinding{}}}, {queries}, {AggOp::log_sum_exp}};
    }
    return {{queries, keys, keys}, {queries}, {AggOp::log_sum_exp}};
}

absl::Status Attention::check_input_values(int input, absl::Span<const std::byte> bytes) const {
    if (input == 4 && has_pages()) {
        const DType dtype = input_types()[4].dtype;
        const int64_t per_sequence = pages_per_sequence();
        const size_t entries = sequence_ends_.size() * static_cast<size_t>(per_sequence);
        if (bytes.size() != entries * static_cast<size_t>(dtype_size(dtype))) {
            return absl::InvalidArgumentError(absl::StrCat(
                "page_table holds ", bytes.size(), " bytes for ", entries, " entries (",
                sequence_ends_.size(), " sequences of ", per_sequence, " pages)"));
        }
        for (size_t entry = 0; entry < entries; ++entry) {
            const int64_t page = integer_at(dtype, bytes, entry);
            if (page < 0 || page >= pages()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "page_table[", entry / static_cast<size_t>(per_sequence), "][",
                    entry % static_cast<size_t>(per_sequence), "] = ", page, " is outside [0, ",
                    pages(), "), the pool's pages of ", page_size_, " keys"));
            }
        }
        return absl::OkStatus();
    }
    if (input != 3 || !has_key_lengths()) {
        return absl::OkStatus();
    }
    const DType dtype = input_types()[3].dtype;
    if (bytes.size() != sequence_ends_.size() * static_cast<size_t>(dtype_size(dtype))) {
        return absl::InvalidArgumentError(absl::StrCat(
            "key_lengths hold ", bytes.size(), " bytes for ", sequence_ends_.size(), " sequences"));
    }
    for (size_t s = 0; s < sequence_ends_.size(); ++s) {
        const int64_t fill = integer_at(dtype, bytes, s);
        const int64_t capacity = key_ends_[s] - (s == 0 ? 0 : key_ends_[s - 1]);
        const int64_t queries = sequence_ends_[s] - (s == 0 ? 0 : sequence_ends_[s - 1]);
        if (fill < 0 || fill > capacity) {
            return absl::InvalidArgumentError(absl::StrCat("key_lengths[", s, "] = ", fill,
                                                           " is outside [0, ", capacity,
                                                           "], sequence ", s, "'s key region"));
        }
        if (causal_ && fill < queries) {
            return absl::InvalidArgumentError(
                absl::StrCat("key_lengths[", s, "] = ", fill, " is under sequence ", s, "'s ",
                             queries, " queries: causal attention needs a key per query"));
        }
    }
    return absl::OkStatus();
}

IntervalRequest Attention::refine_request(IntervalRequest request) const {
    if (has_pages() || request.size() != 3 || request[2].size() != 1 || request[0].size() == 1) {
        return request;
    }
    // Where the query blocks read disjoint keys (their sequences' keys, up to the last query
    // when causal), cut the keys where each block's keys begin, so that every query block reads
    // one key block: without key_ends, cuts at sequence ends give the keys the queries' cuts.
    std::vector<Interval> keys;
    int64_t previous_end = 0;
    for (const Interval& queries : request[0]) {
        const Interval hull = key_hull(queries);
        if (hull.empty() || hull.lower < previous_end) {
            return request; // a query block needs keys of another: keep the keys whole
        }
        if (!keys.empty()) {
            keys.back().upper = hull.lower;
        }
        keys.push_back({keys.empty() ? 0 : hull.lower, hull.upper});
        previous_end = hull.upper;
    }
    keys.back().upper = request[2][0].upper;
    request[2] = std::move(keys);
    return request;
}

JoinAggSpec Attention::build_spec(const IntervalRequest& request) const {
    JoinAggSpec spec = Operator::build_spec(request);
    std::erase_if(spec.functions, [&](const FunctionSpec& function) {
        const Interval& queries = function.inputs[0][0];
        const Interval& keys = function.inputs[1][0];
        return !queries.empty() && !keys.empty() && !interacts(queries, keys);
    });
    return spec;
}

double Attention::interacting_pairs(const Interval& queries, const Interval& keys) const {
    // Per sequence the queries touch, in closed form: query t reads keys
    // [max(keys.lower, start), min(end_t, keys.upper)), end_t = t + 1 (causal) or the sequence's
    // end; with end_t = t + 1 the count grows by one per query between the first key and
    // keys.upper, and is flat after.
    // Causal queries are counted at their shifted positions t + shift, which read keys up to
    // themselves.
    double pairs = 0.0;
    if (has_pages()) {
        // Where the keys lie is the table's: price each query reading its capacity's worth of
        // keys, spread evenly over the pool's rows.
        const double rows = static_cast<double>(input_types()[1].dims[0].size);
        const double share =
            rows > 0 ? static_cast<double>(std::max<int64_t>(
                           0, std::min<int64_t>(keys.upper, input_types()[1].dims[0].size) -
                                  std::max<int64_t>(keys.lower, 0))) /
                           rows
                     : 0.0;
        for (const Segment& segment : segments(queries)) {
            pairs += static_cast<double>(segment.queries.size()) *
                     static_cast<double>(segment.key_end - segment.key_begin) * share;
        }
        return pairs;
    }
    for (const Segment& segment : segments(queries)) {
        const int64_t a = segment.queries.lower + segment.causal_shift;
        const int64_t b = segment.queries.upper + segment.causal_shift;
        const int64_t lo = std::max(keys.lower, segment.key_begin);
        if (!causal_) {
            const int64_t count = std::min(segment.key_end, keys.upper) - lo;
            pairs += static_cast<double>(b - a) * static_cast<double>(std::max<int64_t>(0, count));
        } else if (keys.upper > lo) {
            // Queries t in [max(a, lo), min(b, keys.upper)) read t + 1 - lo keys.
            const int64_t rising_first = std::max(a, lo);
            const int64_t rising_end = std::min(b, keys.upper);
            if (rising_first < rising_end) {
                const double n = static_cast<double>(rising_end - rising_first);
                const double first = static_cast<double>(rising_first + 1 - lo);
                pairs += n * first + n * (n - 1.0) / 2.0;
            }
            // Queries t in [max(a, keys.upper), b) read every key of the block from lo.
            const int64_t flat_first = std::max(a, keys.upper);
            if (flat_first < b) {
                pairs += static_cast<double>(b - flat_first) * static_cast<double>(keys.upper - lo);
            }
        }
    }
    return pairs;
}

double Attention::flops(const FunctionSpec& function) const {
    const Box& q = function.inputs[0];
    const int64_t head_dim = q[2].size();
    const int64_t value_dim = function.inputs[2][2].size();
    const double pairs = interacting_pairs(q[0], function.inputs[1][0]);
    // Scores (2·d), softmax (~3) and the weighted sum of values (2·d_v) per pair and head.
    return pairs * static_cast<double>(q[1].size()) *
           (2.0 * static_cast<double>(head_dim + value_dim) + 3.0);
}

absl::StatusOr<PartialBlock>
Attention::compute_partial(const HostTensor& q, const HostTensor& k, const HostTensor& v,
                           absl::Span<const int64_t> fills,
                           absl::Span<const int64_t> page_table) const {
    if (q.rank() != 3 || k.rank() != 3 || v.rank() != 3) {
        return absl::InvalidArgumentError("attention partial: q, k and v must be rank 3");
    }
    const Interval rows = q.box()[0];
    const Interval keys_block = k.box()[0];
    const Interval query_heads = q.box()[1];
    const Interval kv_heads = k.box()[1];
    if (v.box()[0] != keys_block || v.box()[1] != kv_heads) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attention partial: v's block ", v.box().to_string(),
            " does not cover the same keys and kv heads as k's ", k.box().to_string()));
    }
    if (query_heads.lower != group_size_ * kv_heads.lower ||
        query_heads.upper != group_size_ * kv_heads.upper) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attention partial: query heads ", query_heads.to_string(), " are not kv heads ",
            kv_heads.to_string(), " times the group size ", group_size_));
    }
    const int64_t head_dim = q.box()[2].size();
    if (k.box()[2].size() != head_dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            "attention partial: k's head dimension ", k.box()[2].size(), " is not q's ", head_dim));
    }
    const int64_t value_dim = v.box()[2].size();
    const int64_t num_query_heads = query_heads.size();
    const int64_t num_kv_heads = kv_heads.size();
    PartialBlock partial{HostTensor(Box({rows, query_heads, v.box()[2]})),
                         std::vector<double>(static_cast<size_t>(rows.size() * num_query_heads),
                                             -std::numeric_limits<double>::infinity())};
    std::vector<double> accumulator(value_dim);
    double scores[kKeyTile];

    for (const Segment& segment : segments(rows, fills)) {
        for (int64_t position = segment.queries.lower; position < segment.queries.upper;
             ++position) {
            // The keys the query sees, by place, then the rows of them the block holds.
            const std::vector<KeyRun> runs = key_runs(
                segment, segment.keys_of(position, causal_, {segment.key_begin, segment.key_end}),
                keys_block, page_table);
            const int64_t row = position - rows.lower;
            for (int64_t head = query_heads.lower; head < query_heads.upper; ++head) {
                const int64_t kv_head = head / group_size_ - kv_heads.lower;
                const int64_t slot = row * num_query_heads + (head - query_heads.lower);
                const double* query = q.data() + slot * head_dim;
                // Online softmax over key tiles: running maximum, running denominator and the
                // running weighted sum of values, rescaled whenever the maximum grows. Non-finite
                // inputs (docs/operators.md "Non-finite inputs") follow IEEE arithmetic, with
                // three rules that make the result the same for any split of the keys: the maximum
                // is NaN when a score is NaN; a key of weight 0 reads no value (a NaN there would
                // make 0·v NaN); and a row whose every score is -inf is NaN (0/0), with statistics
                // -inf, so that keys of another block with a larger score still outweigh it.
                double running_max = -std::numeric_limits<double>::infinity();
                double denominator = 0.0;
                std::fill(accumulator.begin(), accumulator.end(), 0.0);
                for (const KeyRun& run : runs) {
                    const Interval keys{run.row_begin,
                                        run.row_begin + run.place_end - run.place_begin};
                    for (int64_t tile = keys.lower; tile < keys.upper; tile += kKeyTile) {
                        const int64_t tile_end = std::min(tile + kKeyTile, keys.upper);
                        double tile_max = -std::numeric_limits<double>::infinity();
                        for (int64_t key = tile; key < tile_end; ++key) {
                            const double* key_vec =
                                k.data() +
                                ((key - keys_block.lower) * num_kv_heads + kv_head) * head_dim;
                            double dot = 0.0;
                            for (int64_t d = 0; d < head_dim; ++d) {
                                dot += query[d] * key_vec[d];
                            }
                            // An empty dot product scores 0 whatever the scale (the default
                            // 1/sqrt(0) is infinite), as the kernels do.
                            scores[key - tile] = head_dim > 0 ? dot * scale_ : 0.0;
                            tile_max = propagating_max(tile_max, scores[key - tile]);
                        }
                        const double new_max = propagating_max(running_max, tile_max);
                        if (new_max == -std::numeric_limits<double>::infinity()) {
                            continue; // every score so far is -inf: no key has weight yet
                        }
                        if (running_max != new_max) {
                            // exp(-inf) = 0 when nothing had weight yet; NaN stays NaN.
                            const double rescale = std::exp(running_max - new_max);
                            denominator *= rescale;
                            for (double& value : accumulator) {
                                value *= rescale;
                            }
                        }
                        for (int64_t key = tile; key < tile_end; ++key) {
                            const double weight = std::exp(scores[key - tile] - new_max);
                            if (weight == 0.0) {
                                continue;
                            }
                            denominator += weight;
                            const double* value_vec =
                                v.data() +
                                ((key - keys_block.lower) * num_kv_heads + kv_head) * value_dim;
                            for (int64_t d = 0; d < value_dim; ++d) {
                                accumulator[d] += weight * value_vec[d];
                            }
                        }
                        running_max = new_max;
                    }
                }
                double* out = partial.values.data() + slot * value_dim;
                if (denominator == 0.0) {
                    // No key has weight: 0 (and -inf, the ⊕'s identity) where the block holds no
                    // key the query sees, NaN where every score is -inf.
                    std::fill(out, out + value_dim,
                              runs.empty() ? 0.0 : std::numeric_limits<double>::quiet_NaN());
                    continue;
                }
                // A NaN denominator (a NaN or +inf score) makes the row and its statistics NaN.
                for (int64_t d = 0; d < value_dim; ++d) {
                    out[d] = accumulator[d] / denominator;
                }
                partial.stats[slot] = running_max + std::log(denominator);
            }
        }
    }
    return partial;
}

std::vector<HostTensor> Attention::compute(absl::Span<const HostTensor> inputs,
                                           const FunctionSpec& function) const {
    absl::StatusOr<std::vector<PartialBlock>> partials = compute_partials(inputs, function);
    EINSUMMABLE_CHECK(partials.ok(), absl::StrCat("attention on ", function.outputs[0].to_string(),
                                                  ": ", partials.status().message()));
    return {std::move((*partials)[0].values)};
}

absl::StatusOr<std::vector<PartialBlock>>
Attention::compute_partials(absl::Span<const HostTensor> inputs, const FunctionSpec&) const {
    std::vector<int64_t> fills;
    std::vector<int64_t> page_table;
    if (inputs.size() >= 4) {
        for (int64_t s = 0; s < inputs[3].size(); ++s) {
            fills.push_back(static_cast<int64_t>(inputs[3].data()[s]));
        }
    }
    if (inputs.size() == 5) {
        for (int64_t entry = 0; entry < inputs[4].size(); ++entry) {
            page_table.push_back(static_cast<int64_t>(inputs[4].data()[entry]));
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        PartialBlock partial, compute_partial(inputs[0], inputs[1], inputs[2], fills, page_table));
    std::vector<PartialBlock> partials;
    partials.push_back(std::move(partial));
    return partials;
}

} // namespace einsummable::ir
