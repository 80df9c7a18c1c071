#include "compiler/ir/batch_rows.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

// "request 1 (rows [5,12))".
std::string request_text(size_t request_idx, const Interval& rows) {
    return absl::StrCat("request ", request_idx, " (rows ", rows.to_string(), ")");
}

// What cutting some shardable indices at the request ends (every other index whole) gives.
struct Attempt {
    bool keeps_rows_apart = false;
    // Some batched input's dimension 0 follows the index (or the index may not be cut there):
    // the reason is about the split a reader would expect, not an unrelated index.
    bool on_rows = false;
    std::string why; // when !keeps_rows_apart
};

Attempt try_index(const Graph& graph, const GraphNode& node, const std::set<TensorId>& batched,
                  absl::Span<const ShardableIndex> indices, absl::Span<const size_t> cut,
                  const std::vector<Interval>& requests) {
    std::vector<std::string> names;
    IntervalRequest request;
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        const bool cut_here = std::find(cut.begin(), cut.end(), idx) != cut.end();
        request.push_back(cut_here ? requests : std::vector<Interval>{{0, indices[idx].size}});
        if (cut_here) {
            names.push_back(absl::StrCat("'", indices[idx].name, "'"));
        }
    }
    const std::string index_names = absl::StrJoin(names, " and ");
    absl::StatusOr<JoinAggSpec> spec = node.op->spec(request);
    if (!spec.ok()) {
        std::string why = absl::StrCat(index_names, " may not be cut at the request ends (",
                                       spec.status().message(), ")");
        if (node.op->attributes().has("sequence_ends")) {
            absl::StrAppend(&why, "; its sequence_ends must include every request end");
        }
        return {false, true, std::move(why)};
    }
    const std::string along = absl::StrCat("split along ", index_names, " at the request ends, ");
    if (spec->functions.size() != requests.size()) {
        // Attention cut along queries and keys pairs blocks across requests that share a
        // sequence.
        const bool sequences = cut.size() > 1 && node.op->attributes().has("sequence_ends");
        std::string why = absl::StrCat(along, "it has ", spec->functions.size(),
                                       " function specs for ", requests.size(), " requests");
        if (sequences) {
            absl::StrAppend(&why, "; its sequence_ends must include every request end");
        }
        return {false, sequences, std::move(why)};
    }
    // Inputs: every batched one must be read on the request's own rows.
    std::optional<std::string> input_why;
    bool on_rows = false;
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
        if (!batched.count(node.inputs[slot])) {
            continue;
        }
        const std::string& name = graph.tensor(node.inputs[slot]).name;
        bool follows = true;
        for (size_t k = 0; k < requests.size() && follows; ++k) {
            const Box& box = spec->functions[k].inputs[slot];
            if (box[0] != requests[k]) {
                follows = false;
                if (!input_why) {
                    input_why = absl::StrCat(along, request_text(k, requests[k]), " reads rows ",
                                             box[0].to_string(), " of input '", name, "'");
                }
            }
        }
        on_rows = on_rows || follows;
    }
    if (input_why) {
        return {false, on_rows, *std::move(input_why)};
    }
    // Outputs: one box per request (nothing aggregated), on the request's own rows.
    for (int output_idx = 0; output_idx < node.op->num_outputs(); ++output_idx) {
        const std::string& name = graph.tensor(node.outputs[output_idx]).name;
        if (spec->output_tiling(output_idx).size() != spec->functions.size()) {
            return {false, on_rows,
                    absl::StrCat(along, "the requests' partial results are combined (",
                                 agg_op_name(spec->aggregations[output_idx]), ") into output '",
                                 name, "'")};
        }
        for (size_t k = 0; k < requests.size(); ++k) {
            const Box& box = spec->functions[k].outputs[output_idx];
            if (box.rank() == 0 || box[0] != requests[k]) {
                return {false, on_rows,
                        absl::StrCat(along, request_text(k, requests[k]), " writes ",
                                     box.rank() == 0 ? std::string("the scalar")
                                                     : absl::StrCat("rows ", box[0].to_string()),
                                     " of output '", name, "'")};
            }
        }
    }
    return {true, on_rows, ""};
}

std::string mixes(const GraphNode& node) {
    return absl::StrCat("operator '", node.name, "' (", node.op->kind(),
                        ") mixes the rows of packed requests: ");
}

// Why no shardable index of `node` keeps the requests apart; nullopt when one does.
std::optional<std::string> rows_mixed(const Graph& graph, const GraphNode& node,
                                      const std::set<TensorId>& batched,
                                      const std::vector<Interval>& requests) {
    const std::vector<ShardableIndex> indices = node.op->shardable_indices();
    const int64_t rows = requests.back().upper;
    // Each index as long as the rows alone, then all of them together: attention's queries
    // and keys keep requests apart only when both are cut at the request ends (the spec then
    // leaves out the pairs of different sequences).
    std::vector<std::vector<size_t>> attempts;
    std::vector<size_t> along_rows;
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        if (indices[idx].size == rows) { // others cannot be cut at the request ends
            attempts.push_back({idx});
            along_rows.push_back(idx);
        }
    }
    if (along_rows.size() > 1) {
        attempts.push_back(along_rows);
    }
    std::optional<std::string> why;
    for (const std::vector<size_t>& cut : attempts) {
        Attempt attempt = try_index(graph, node, batched, indices, cut, requests);
        if (attempt.keeps_rows_apart) {
            return std::nullopt;
        }
        // The joint attempt, last, is the one that could have worked: its reason about the rows
        // wins.
        if (attempt.on_rows && (!why || cut.size() > 1)) {
            why = std::move(attempt.why);
        }
    }
    if (why) {
        return absl::StrCat(mixes(node), "no split keeps each request's rows apart: ", *why);
    }
    std::string first_batched;
    for (TensorId input : node.inputs) {
        if (batched.count(input)) {
            first_batched = graph.tensor(input).name;
            break;
        }
    }
    std::vector<std::string> names;
    for (const ShardableIndex& index : indices) {
        names.push_back(index.to_string());
    }
    return absl::StrCat(mixes(node), "none of its shardable indices (",
                        names.empty() ? std::string("none") : absl::StrJoin(names, ", "),
                        ") runs along dimension 0 of input '", first_batched,
                        "', so it cannot compute one request's rows apart from the others'");
}

// Every request end must be a sequence end of an operator that counts positions within
// sequences (its `sequence_ends` attribute, normalised by the operator to include the default).
std::optional<std::string> positions_mixed(const GraphNode& node,
                                           absl::Span<const int64_t> request_ends) {
    if (!node.op->attributes().has("sequence_ends")) {
        return std::nullopt;
    }
    absl::StatusOr<std::vector<int64_t>> ends = node.op->attributes().get_ints("sequence_ends");
    if (!ends.ok()) {
        return std::nullopt; // not a list of positions: nothing this check knows how to read
    }
    for (size_t k = 0; k + 1 < request_ends.size(); ++k) {
        if (!std::binary_search(ends->begin(), ends->end(), request_ends[k])) {
            return absl::StrCat(
                "operator '", node.name, "' (", node.op->kind(),
                ") counts positions from the start of each of its packed sequences, and request "
                "end ",
                request_ends[k], " is not one of its sequence ends (",
                ends->size() == 1 ? "it has one sequence" : absl::StrCat(ends->size(), " of them"),
                "): request ", k + 1,
                "'s rows would take positions from an earlier request's start; its "
                "sequence_ends must include every request end");
        }
    }
    return std::nullopt;
}

absl::Status check_rows(const GraphTensor& tensor, int64_t rows) {
    if (tensor.type.rank() == 0) {
        return absl::InvalidArgumentError(absl::StrCat("batched tensor '", tensor.name,
                                                       "' is a scalar: it has no dimension 0 "
                                                       "to hold the requests"));
    }
    const Dim& dim = tensor.type.dims[0];
    if (dim.size != rows) {
        return absl::InvalidArgumentError(
            absl::StrCat("batched tensor '", tensor.name, "' has dimension 0 ('", dim.name,
                         "') of size ", dim.size, ", but the requests end at ", rows));
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<std::set<TensorId>> batched_tensors(const Graph& graph,
                                                   const std::set<TensorId>& batched_inputs,
                                                   absl::Span<const int64_t> request_ends) {
    if (request_ends.empty()) {
        return absl::InvalidArgumentError("no request ends: a batch holds at least one request");
    }
    std::vector<Interval> requests;
    int64_t start = 0;
    for (int64_t end : request_ends) {
        if (end <= start) {
            return absl::InvalidArgumentError(
                absl::StrCat("request ends must be strictly increasing and positive: ", end,
                             " follows ", start, " (ends ", absl::StrJoin(request_ends, ","), ")"));
        }
        requests.push_back({start, end});
        start = end;
    }
    const int64_t rows = request_ends.back();

    std::set<TensorId> batched;
    for (TensorId id : batched_inputs) {
        if (id < 0 || id >= static_cast<TensorId>(graph.tensors().size())) {
            return absl::InvalidArgumentError(
                absl::StrCat("batched input ", id, " is not a tensor of the graph"));
        }
        const GraphTensor& tensor = graph.tensor(id);
        if (!tensor.is_input()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "batched input '", tensor.name, "' is not a graph input (it is computed by '",
                graph.node(tensor.producer).name, "')"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(check_rows(tensor, rows));
        batched.insert(id);
    }
    for (const GraphNode& node : graph.nodes()) { // topological order
        if (std::none_of(node.inputs.begin(), node.inputs.end(),
                         [&](TensorId input) { return batched.count(input) > 0; })) {
            continue;
        }
        if (std::optional<std::string> why = rows_mixed(graph, node, batched, requests)) {
            return absl::InvalidArgumentError(*why);
        }
        if (std::optional<std::string> why = positions_mixed(node, request_ends)) {
            return absl::InvalidArgumentError(*why);
        }
        for (TensorId output : node.outputs) {
            EINSUMMABLE_RETURN_IF_ERROR(check_rows(graph.tensor(output), rows));
            batched.insert(output);
        }
    }
    return batched;
}

} // namespace einsummable::ir
