#include "compiler/logical/logical_plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/internal_error.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/logical/strategy.h"
#include "compiler/support/json.h"

namespace einsummable::logical {

using support::json_string;

const std::vector<Planner>& all_planners() {
    static const std::vector<Planner> planners = {
        Planner::dp,       Planner::greedy,  Planner::random,     Planner::data_parallel,
        Planner::megatron, Planner::ulysses, Planner::row_sharded};
    return planners;
}

absl::string_view planner_name(Planner planner) {
    switch (planner) {
    case Planner::dp:
        return "dp";
    case Planner::greedy:
        return "greedy";
    case Planner::random:
        return "random";
    case Planner::data_parallel:
        return "data-parallel";
    case Planner::megatron:
        return "megatron";
    case Planner::ulysses:
        return "ulysses";
    case Planner::row_sharded:
        return "row-sharded";
    }
    return "?";
}

absl::StatusOr<Planner> parse_planner(absl::string_view name) {
    std::vector<absl::string_view> names;
    for (Planner planner : all_planners()) {
        if (name == planner_name(planner)) {
            return planner;
        }
        names.push_back(planner_name(planner));
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown planner '", name, "' (expected ", absl::StrJoin(names, ", "), ")"));
}

const std::vector<Objective>& all_objectives() {
    static const std::vector<Objective> objectives = {Objective::bytes, Objective::time,
                                                      Objective::search};
    return objectives;
}

absl::string_view objective_name(Objective objective) {
    switch (objective) {
    case Objective::bytes:
        return "bytes";
    case Objective::time:
        return "time";
    case Objective::search:
        return "search";
    }
    return "unknown";
}

absl::StatusOr<Objective> parse_objective(absl::string_view name) {
    if (name == "cost") { // the bytes objective's name before the time programme
        return Objective::bytes;
    }
    for (Objective objective : all_objectives()) {
        if (name == objective_name(objective)) {
            return objective;
        }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown objective '", name, "' (expected bytes, time or search; cost means bytes)"));
}

Objective planned_objective(Planner planner, Objective asked) {
    return planner == Planner::dp ? asked : Objective::bytes;
}

absl::StatusOr<GraphCandidates> enumerate_graph(const ir::Graph& graph, int64_t devices,
                                                const support::Cancellation* cancellation) {
    GraphCandidates candidates;
    candidates.reserve(graph.nodes().size());
    for (const ir::GraphNode& node : graph.nodes()) {
        if (support::is_cancelled(cancellation)) {
            return support::cancelled_error(
                absl::StrCat("the enumeration of operator '", node.name, "'"));
        }
        absl::StatusOr<std::vector<Candidate>> options = enumerate_candidates(*node.op, devices);
        if (!options.ok()) {
            return absl::Status(options.status().code(), absl::StrCat("node '", node.name, "': ",
                                                                      options.status().message()));
        }
        candidates.push_back(*std::move(options));
    }
    return candidates;
}

void add_pinned_repartition(const ir::Graph& graph,
                            const std::map<ir::TensorId, ir::Tiling>& pinned,
                            GraphCandidates& candidates) {
    if (pinned.empty()) {
        return;
    }
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        const std::vector<ir::TensorId>& inputs = graph.node(node).inputs;
        for (Candidate& candidate : candidates[node]) {
            for (size_t slot = 0; slot < inputs.size(); ++slot) {
                auto it = pinned.find(inputs[slot]);
                if (it != pinned.end()) {
                    candidate.local += repartition_cost(graph.tensor(inputs[slot]).type,
                                                        candidate.input_blocks[slot], it->second);
                }
            }
        }
    }
}

double replicated_bytes(const ir::Graph& graph, ir::NodeId node, const Candidate& candidate,
                        const std::set<ir::TensorId>& unreplicated) {
    double bytes = 0.0;
    const std::vector<ir::TensorId>& inputs = graph.node(node).inputs;
    for (size_t slot = 0; slot < inputs.size(); ++slot) {
        const size_t blocks = candidate.input_blocks[slot].size();
        if (!unreplicated.count(inputs[slot]) || blocks == 0 ||
            candidate.functions <= static_cast<int64_t>(blocks)) {
            continue;
        }
        const double copies =
            static_cast<double>(candidate.functions) / static_cast<double>(blocks);
        bytes += static_cast<double>(graph.tensor(inputs[slot]).type.bytes()) * (copies - 1.0);
    }
    return bytes;
}

void keep_unreplicated(const ir::Graph& graph, const std::set<ir::TensorId>& unreplicated,
                       GraphCandidates& candidates) {
    if (unreplicated.empty()) {
        return;
    }
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        std::vector<Candidate>& options = candidates[node];
        std::vector<double> extra;
        extra.reserve(options.size());
        for (const Candidate& candidate : options) {
            extra.push_back(replicated_bytes(graph, node, candidate, unreplicated));
        }
        if (extra.empty()) {
            continue;
        }
        const double least = *std::min_element(extra.begin(), extra.end());
        std::vector<Candidate> kept;
        for (size_t idx = 0; idx < options.size(); ++idx) {
            if (extra[idx] == least) {
                kept.push_back(std::move(options[idx]));
            }
        }
        options = std::move(kept);
    }
}

namespace {

// Keeps node's candidates that `keep` admits; where none is left, those of the largest device
// count below `devices` that has some (one device always has the whole spec).
template <typename Keep>
void keep_or_fewer(const ir::Graph& graph, ir::NodeId node, int64_t devices, Keep keep,
                   std::vector<Candidate>& options) {
    std::erase_if(options, [&](const Candidate& candidate) { return !keep(candidate); });
    for (int64_t fewer = devices - 1; options.empty() && fewer >= 1; --fewer) {
        absl::StatusOr<std::vector<Candidate>> enumerated =
            enumerate_candidates(*graph.node(node).op, fewer);
        // The operator enumerated at `devices` already: its requests are valid at fewer.
        EINSUMMABLE_CHECK(enumerated.ok(), enumerated.status().ToString());
        // enumerate_candidates falls back below `fewer` itself when the indices cannot reach
        // it: the counts down to the one it reached need no second try.
        if (!enumerated->empty()) {
            fewer = std::min(fewer, enumerated->front().functions);
        }
        options = *std::move(enumerated);
        std::erase_if(options, [&](const Candidate& candidate) { return !keep(candidate); });
    }
}

} // namespace

void keep_unaggregated(const ir::Graph& graph, int64_t devices, GraphCandidates& candidates) {
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        keep_or_fewer(
            graph, node, devices, [](const Candidate& candidate) { return !aggregates(candidate); },
            candidates[node]);
    }
}

absl::string_view attention_splits_name(AttentionSplits splits) {
    switch (splits) {
    case AttentionSplits::any:
        return "any";
    case AttentionSplits::no_key_blocks:
        return "no key blocks";
    case AttentionSplits::whole_sequences:
        return "whole sequences";
    case AttentionSplits::key_blocks:
        return "key blocks";
    }
    return "?";
}

void keep_attention_splits(const ir::Graph& graph, int64_t devices, AttentionSplits allowed,
                           GraphCandidates& candidates) {
    if (allowed == AttentionSplits::any) {
        return;
    }
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        const auto* attention = dynamic_cast<const ir::Attention*>(graph.node(node).op.get());
        if (attention == nullptr) {
            continue;
        }
        auto keep = [&](const Candidate& candidate) {
            const ir::IntervalRequest& request = candidate.request;
            // Partial results over key blocks, combined by the log-sum-exp ⊕, are exactly
            // where the join writes an output box more than once.
            if (allowed == AttentionSplits::no_key_blocks) {
                return !aggregates(candidate);
            }
            if (allowed == AttentionSplits::key_blocks) {
                return aggregates(candidate);
            }
            absl::StatusOr<ir::JoinAggSpec> spec = attention->spec(request);
            EINSUMMABLE_CHECK(spec.ok(), spec.status().ToString());
            return std::all_of(spec->functions.begin(), spec->functions.end(),
                               [&](const ir::FunctionSpec& function) {
                                   return attention->holds_whole_sequences(function);
                               });
        };
        keep_or_fewer(graph, node, devices, keep, candidates[node]);
    }
}

namespace {

// The pinned tiling of the state `node` updates in place, or null.
const ir::Tiling* pinned_state(const ir::Graph& graph, ir::NodeId node,
                               const std::map<ir::TensorId, ir::Tiling>& pinned) {
    const ir::GraphNode& info = graph.node(node);
    const int in_place = ir::in_place_input(*info.op);
    if (in_place < 0) {
        return nullptr;
    }
    auto it = pinned.find(info.inputs[in_place]);
    return it == pinned.end() ? nullptr : &it->second;
}

} // namespace

void keep_state_tilings(const ir::Graph& graph, int64_t devices,
                        const std::map<ir::TensorId, ir::Tiling>& pinned,
                        GraphCandidates& candidates) {
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        const ir::Tiling* tiling = pinned_state(graph, node, pinned);
        if (tiling == nullptr) {
            continue;
        }
        const auto slot = static_cast<size_t>(ir::in_place_input(*graph.node(node).op));
        auto keep = [&](const Candidate& candidate) {
            return candidate.input_blocks[slot] == *tiling;
        };
        std::vector<Candidate>& options = candidates[node];
        const std::vector<Candidate> given = options;
        std::erase_if(options, [&](const Candidate& candidate) { return !keep(candidate); });
        if (options.empty()) {
            // A baseline's one candidate: the layout's tiling is among all of them.
            absl::StatusOr<std::vector<Candidate>> all =
                enumerate_candidates(*graph.node(node).op, devices);
            EINSUMMABLE_CHECK(all.ok(), all.status().ToString());
            options = *std::move(all);
        }
        keep_or_fewer(graph, node, devices, keep, options);
        if (options.empty()) {
            options = given; // no candidate writes the layout's blocks: placement says so
        }
    }
}

namespace {

// Repartition of every input of `node` against its producers' chosen tilings.
Cost input_repartition(const ir::Graph& graph, const GraphCandidates& candidates,
                       const std::vector<int>& choice, ir::NodeId node) {
    Cost cost;
    const Candidate& chosen = candidates[node][choice[node]];
    const std::vector<ir::TensorId>& inputs = graph.node(node).inputs;
    for (size_t slot = 0; slot < inputs.size(); ++slot) {
        const ir::GraphTensor& tensor = graph.tensor(inputs[slot]);
        if (tensor.is_input()) {
            continue;
        }
        const Candidate& producer = candidates[tensor.producer][choice[tensor.producer]];
        cost += repartition_cost(tensor.type, chosen.input_blocks[slot],
                                 producer.output_tilings[tensor.output_idx]);
    }
    return cost;
}

} // namespace

Cost evaluate_choice(const ir::Graph& graph, const GraphCandidates& candidates,
                     const std::vector<int>& choice) {
    Cost total;
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        total += candidates[node][choice[node]].local;
        total += input_repartition(graph, candidates, choice, node);
    }
    return total;
}

LogicalPlan make_plan(const ir::Graph& graph, const PlannerOptions& options,
                      const GraphCandidates& candidates, const std::vector<int>& choice) {
    LogicalPlan plan;
    plan.options = options;
    plan.options.cancellation = nullptr;
    std::vector<std::string> strategies;
    const std::vector<std::vector<ir::IndexRole>> roles = ir::graph_index_roles(graph);
    for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph.nodes().size()); ++node) {
        OperatorPlan op_plan;
        op_plan.node = node;
        op_plan.choice = candidates[node][choice[node]];
        // Candidates were built from valid requests, so the spec rebuilds without error.
        op_plan.spec = *graph.node(node).op->spec(op_plan.choice.request);
        op_plan.cost = op_plan.choice.local;
        op_plan.cost += input_repartition(graph, candidates, choice, node);
        op_plan.strategy = operator_strategy(*graph.node(node).op, roles[node], op_plan.choice);
        plan.total += op_plan.cost;
        strategies.push_back(op_plan.strategy);
        plan.operators.push_back(std::move(op_plan));
    }
    plan.strategy = plan_strategy(graph, roles, strategies);
    return plan;
}

std::string split_string(const ir::Operator& op, const Candidate& candidate) {
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    std::vector<std::string> parts;
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        parts.push_back(absl::StrCat(indices[idx].name, "/", candidate.counts[idx]));
    }
    return parts.empty() ? std::string("-") : absl::StrJoin(parts, " ");
}

namespace {

std::string number(double value) {
    return absl::StrFormat("%.0f", value);
}

std::string json_breakdown(const CostBreakdown& cost) {
    return absl::StrCat("{\"join\": ", number(cost.join),
                        ", \"aggregation\": ", number(cost.aggregation),
                        ", \"repartition\": ", number(cost.repartition),
                        ", \"total\": ", number(cost.total()), "}");
}

std::string json_cost(const Cost& cost) {
    return absl::StrCat("{\"elements\": ", json_breakdown(cost.elements),
                        ", \"bytes\": ", json_breakdown(cost.bytes), "}");
}

} // namespace

namespace {

std::string pad_right(absl::string_view text, size_t width) {
    std::string out(text);
    out.resize(std::max(width, out.size()), ' ');
    return out;
}

std::string pad_left(absl::string_view text, size_t width) {
    return std::string(width > text.size() ? width - text.size() : 0, ' ') + std::string(text);
}

// "objective: time, predicted 1.234 ms, from time dp\n" for a plan whose objective is set
// (the prediction and origin where known); empty otherwise.
std::string objective_line(const LogicalPlan& plan) {
    if (!plan.objective.has_value()) {
        return "";
    }
    const PlanObjective& made = *plan.objective;
    std::string line = absl::StrCat("objective: ", objective_name(made.objective));
    if (made.predicted_s > 0.0) {
        absl::StrAppend(&line, absl::StrFormat(", predicted %.3f ms", made.predicted_s * 1e3));
    }
    if (!made.origin.empty()) {
        absl::StrAppend(&line, ", from ", made.origin);
    }
    return absl::StrCat(line, "\n");
}

// The operators micro_batch_plan cut (micro_batches.h).
int cut_operators(const LogicalPlan& plan) {
    return static_cast<int>(
        std::count_if(plan.operators.begin(), plan.operators.end(),
                      [](const OperatorPlan& op) { return !op.groups.empty(); }));
}

// "micro-batches: 7:1 (11 of 13 operators' token rows cut; each device runs them one after
// another)\n" for a plan with micro-batches; empty otherwise.
std::string micro_batches_line(const LogicalPlan& plan) {
    if (plan.micro_batches.empty()) {
        return "";
    }
    return absl::StrCat("micro-batches: ", absl::StrJoin(plan.micro_batches, ":"), " (",
                        cut_operators(plan), " of ", plan.operators.size(),
                        " operators' token rows cut; each device runs them one after another)\n");
}

} // namespace

std::string explain_text(const ir::Graph& graph, const LogicalPlan& plan) {
    std::string out = absl::StrCat("logical plan: planner=", planner_name(plan.options.planner));
    if (plan.options.planner == Planner::random) {
        absl::StrAppend(&out, " seed=", plan.options.seed);
    }
    absl::StrAppend(&out, " devices=", plan.options.devices, "\n", objective_line(plan),
                    micro_batches_line(plan), "strategy: ", plan.strategy, "\n\n");
    std::vector<std::vector<std::string>> rows = {
        {"operator", "split", "join", "agg", "repart", "strategy"}};
    for (const OperatorPlan& op_plan : plan.operators) {
        const ir::GraphNode& node = graph.node(op_plan.node);
        const CostBreakdown& cost = op_plan.cost.elements;
        rows.push_back({absl::StrCat(node.name, " (", node.op->kind(), ")"),
                        split_string(*node.op, op_plan.choice), number(cost.join),
                        number(cost.aggregation), number(cost.repartition), op_plan.strategy});
    }
    std::vector<size_t> widths(6, 0);
    for (const std::vector<std::string>& row : rows) {
        for (size_t col = 0; col < row.size(); ++col) {
            widths[col] = std::max(widths[col], row[col].size());
        }
    }
    for (const std::vector<std::string>& row : rows) {
        absl::StrAppend(&out, pad_right(row[0], widths[0]), "  ", pad_right(row[1], widths[1]));
        for (size_t col = 2; col < 5; ++col) {
            absl::StrAppend(&out, "  ", pad_left(row[col], widths[col]));
        }
        absl::StrAppend(&out, "  ", row[5], "\n");
    }
    const CostBreakdown& elements = plan.total.elements;
    const CostBreakdown& bytes = plan.total.bytes;
    absl::StrAppend(&out, "\ntotal elements: join=", number(elements.join),
                    " agg=", number(elements.aggregation), " repart=", number(elements.repartition),
                    " total=", number(elements.total()),
                    "\ntotal bytes:    join=", number(bytes.join),
                    " agg=", number(bytes.aggregation), " repart=", number(bytes.repartition),
                    " total=", number(bytes.total()), "\n");
    return out;
}

std::string explain_json(const ir::Graph& graph, const LogicalPlan& plan) {
    std::string out =
        absl::StrCat("{\n  \"planner\": ", json_string(planner_name(plan.options.planner)),
                     ",\n  \"devices\": ", plan.options.devices);
    if (plan.options.planner == Planner::random) {
        absl::StrAppend(&out, ",\n  \"seed\": ", plan.options.seed);
    }
    if (plan.objective.has_value()) {
        absl::StrAppend(&out, ",\n  \"objective\": {\"name\": ",
                        json_string(objective_name(plan.objective->objective)),
                        ", \"predicted_s\": ", absl::StrFormat("%.9g", plan.objective->predicted_s),
                        ", \"origin\": ", json_string(plan.objective->origin), "}");
    }
    if (!plan.micro_batches.empty()) {
        absl::StrAppend(&out, ",\n  \"micro_batches\": {\"weights\": [",
                        absl::StrJoin(plan.micro_batches, ", "),
                        "], \"operators_cut\": ", cut_operators(plan), "}");
    }
    absl::StrAppend(&out, ",\n  \"strategy\": ", json_string(plan.strategy),
                    ",\n  \"total\": ", json_cost(plan.total), ",\n  \"operators\": [");
    for (size_t idx = 0; idx < plan.operators.size(); ++idx) {
        const OperatorPlan& op_plan = plan.operators[idx];
        const ir::GraphNode& node = graph.node(op_plan.node);
        const std::vector<ir::ShardableIndex> indices = node.op->shardable_indices();
        const std::vector<std::string> dims = index_dimension_names(*node.op);
        std::vector<std::string> index_json;
        for (size_t i = 0; i < indices.size(); ++i) {
            std::vector<std::string> intervals;
            for (const ir::Interval& interval : op_plan.choice.request[i]) {
                intervals.push_back(absl::StrCat("[", interval.lower, ", ", interval.upper, "]"));
            }
            index_json.push_back(absl::StrCat("{\"name\": ", json_string(indices[i].name),
                                              ", \"dimension\": ", json_string(dims[i]),
                                              ", \"parts\": ", op_plan.choice.counts[i],
                                              ", \"intervals\": [", absl::StrJoin(intervals, ", "),
                                              "]}"));
        }
        absl::StrAppend(&out, idx == 0 ? "\n" : ",\n", "    {\"node\": ", json_string(node.name),
                        ", \"kind\": ", json_string(node.op->kind()),
                        ", \"split\": ", json_string(split_string(*node.op, op_plan.choice)),
                        ", \"functions\": ", op_plan.spec.functions.size(),
                        ", \"strategy\": ", json_string(op_plan.strategy), ",\n     \"indices\": [",
                        absl::StrJoin(index_json, ", "),
                        "],\n     \"cost\": ", json_cost(op_plan.cost), "}");
    }
    absl::StrAppend(&out, "\n  ]\n}\n");
    return out;
}

} // namespace einsummable::logical
