#include "compiler/logical/micro_batches.h"

#include <algorithm>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/ir/index_role.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {
namespace {

// `interval` cut into up to `weights.size()` parts in proportion to `weights`, at the rounded
// positions; empty parts dropped.
std::vector<ir::Interval> cut_interval(const ir::Interval& interval,
                                       const std::vector<int>& weights) {
    int64_t total = 0;
    for (int weight : weights) {
        total += weight;
    }
    std::vector<int64_t> cuts = {interval.lower};
    int64_t sum = 0;
    for (size_t k = 0; k + 1 < weights.size(); ++k) {
        sum += weights[k];
        // The rounded position of the k-th cut (sizes and weights are far below 2^40).
        const int64_t cut = interval.lower + (2 * interval.size() * sum + total) / (2 * total);
        if (cut > cuts.back() && cut < interval.upper) {
            cuts.push_back(cut);
        }
    }
    cuts.push_back(interval.upper);
    std::vector<ir::Interval> parts;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        parts.push_back({cuts[k], cuts[k + 1]});
    }
    return parts;
}

bool nests(const ir::FunctionSpec& inner, const ir::FunctionSpec& outer) {
    for (size_t i = 0; i < inner.inputs.size(); ++i) {
        if (!outer.inputs[i].contains(inner.inputs[i])) {
            return false;
        }
    }
    for (size_t o = 0; o < inner.outputs.size(); ++o) {
        if (!outer.outputs[o].contains(inner.outputs[o])) {
            return false;
        }
    }
    return true;
}

// The finer spec of one operator, with each function's group (the chosen function spec it
// nests in) and micro-batch (its place in the group, in spec order); nullopt where the operator
// stays whole.
struct Refined {
    ir::JoinAggSpec spec;
    std::vector<int> groups;
    std::vector<int> micro_batch;
};

std::optional<Refined> refine(const ir::Operator& op, const std::vector<ir::IndexRole>& roles,
                              const OperatorPlan& chosen, const std::vector<int>& weights) {
    const auto token = std::find(roles.begin(), roles.end(), ir::IndexRole::token);
    if (token == roles.end() || ir::in_place_input(op) >= 0) {
        return std::nullopt;
    }
    const size_t t = static_cast<size_t>(token - roles.begin());
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    ir::IntervalRequest request = chosen.choice.request;
    if (request.size() != indices.size() || t >= request.size() || !indices[t].any_position) {
        return std::nullopt;
    }
    std::vector<ir::Interval> finer;
    for (const ir::Interval& interval : request[t]) {
        const std::vector<ir::Interval> parts = cut_interval(interval, weights);
        finer.insert(finer.end(), parts.begin(), parts.end());
    }
    if (finer.size() == request[t].size()) {
        return std::nullopt;
    }
    request[t] = std::move(finer);
    // The context (attention's keys): cut where the finer queries are when the operator does
    // that for keys asked whole (every finer query block reads keys of its own).
    ir::IntervalRequest whole_context = request;
    bool has_context = false;
    for (size_t idx = 0; idx < roles.size() && idx < request.size(); ++idx) {
        if (roles[idx] == ir::IndexRole::context) {
            whole_context[idx] = {{0, indices[idx].size}};
            has_context = true;
        }
    }
    if (has_context) {
        ir::IntervalRequest refined = op.refine_request(whole_context);
        bool cut = false;
        for (size_t idx = 0; idx < roles.size() && idx < refined.size(); ++idx) {
            cut = cut || (roles[idx] == ir::IndexRole::context && refined[idx].size() > 1);
        }
        if (cut) {
            request = std::move(refined);
        }
    }
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(request);
    if (!spec.ok()) {
        return std::nullopt;
    }
    Refined out;
    std::vector<int> members(chosen.spec.functions.size(), 0);
    for (const ir::FunctionSpec& function : spec->functions) {
        int parent = -1;
        for (size_t p = 0; p < chosen.spec.functions.size(); ++p) {
            if (nests(function, chosen.spec.functions[p])) {
                if (parent >= 0) {
                    return std::nullopt; // nests in two: not a refinement
                }
                parent = static_cast<int>(p);
            }
        }
        if (parent < 0) {
            return std::nullopt;
        }
        out.groups.push_back(parent);
        out.micro_batch.push_back(members[parent]++);
    }
    if (std::find(members.begin(), members.end(), 0) != members.end()) {
        return std::nullopt; // a chosen function spec without work: not a refinement
    }
    out.spec = *std::move(spec);
    return out;
}

// Back to the chosen spec, one function spec per group.
absl::Status uncut(const ir::Graph& graph, OperatorPlan& op) {
    if (op.groups.empty()) {
        return absl::OkStatus();
    }
    absl::StatusOr<ir::JoinAggSpec> chosen = graph.node(op.node).op->spec(op.choice.request);
    if (!chosen.ok()) {
        return chosen.status();
    }
    op.spec = *std::move(chosen);
    op.groups.clear();
    op.micro_batch.clear();
    return absl::OkStatus();
}

// Whether some function spec of `op` reads a block that a cut producer writes in a later
// micro-batch than its own: that part cannot run before the producer's later parts.
bool reads_later_parts(const ir::Graph& graph, const LogicalPlan& plan, const OperatorPlan& op) {
    const ir::GraphNode& node = graph.node(op.node);
    for (size_t k = 0; k < op.spec.functions.size(); ++k) {
        for (size_t i = 0; i < node.inputs.size(); ++i) {
            const ir::GraphTensor& tensor = graph.tensor(node.inputs[i]);
            if (tensor.is_input() || plan.operators[tensor.producer].groups.empty()) {
                continue;
            }
            const OperatorPlan& producer = plan.operators[tensor.producer];
            for (size_t f = 0; f < producer.spec.functions.size(); ++f) {
                if (producer.micro_batch[f] > op.micro_batch[k] &&
                    producer.spec.functions[f]
                        .outputs[tensor.output_idx]
                        .intersect(op.spec.functions[k].inputs[i])
                        .has_value()) {
                    return true;
                }
            }
        }
    }
    return false;
}

} // namespace

int group_count(const OperatorPlan& op) {
    if (op.groups.empty()) {
        return static_cast<int>(op.spec.functions.size());
    }
    return *std::max_element(op.groups.begin(), op.groups.end()) + 1;
}

std::vector<int> equal_micro_batches(int n) {
    return std::vector<int>(std::max(n, 0), 1);
}

absl::Status micro_batch_plan(const ir::Graph& graph, const std::vector<int>& weights,
                              LogicalPlan& plan) {
    if (weights.size() > static_cast<size_t>(kMaxMicroBatches)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "at most ", kMaxMicroBatches, " micro-batches (got ", weights.size(), ")"));
    }
    for (size_t k = 0; k < weights.size(); ++k) {
        if (weights[k] < 1 || weights[k] > kMaxMicroBatchWeight) {
            return absl::InvalidArgumentError(absl::StrCat("micro-batch ", k, "'s weight ",
                                                           weights[k], " is not between 1 and ",
                                                           kMaxMicroBatchWeight));
        }
    }
    if (plan.operators.size() != graph.nodes().size()) {
        return absl::InvalidArgumentError(absl::StrCat("the plan has ", plan.operators.size(),
                                                       " operators; the graph has ",
                                                       graph.nodes().size()));
    }
    const std::vector<std::vector<ir::IndexRole>> roles = ir::graph_index_roles(graph);
    for (OperatorPlan& op : plan.operators) {
        EINSUMMABLE_RETURN_IF_ERROR(uncut(graph, op)); // back to the chosen spec first
        if (weights.size() <= 1) {
            continue;
        }
        std::optional<Refined> refined =
            refine(*graph.node(op.node).op, roles[op.node], op, weights);
        if (refined.has_value()) {
            op.spec = std::move(refined->spec);
            op.groups = std::move(refined->groups);
            op.micro_batch = std::move(refined->micro_batch);
        }
        // A part that needs a later part of what it reads waits for it: the operator's parts
        // would run one after another for nothing (attention cut inside a sequence, after keys
        // cut with it; a head-parallel operator reading token-parallel ones).
        if (!op.groups.empty() && reads_later_parts(graph, plan, op)) {
            EINSUMMABLE_RETURN_IF_ERROR(uncut(graph, op));
        }
    }
    // A cut pays only where its parts reach a saved output part by part: through a cut
    // consumer, or being saved. Whatever only feeds operators left whole is left whole too.
    std::set<ir::TensorId> saved;
    for (ir::TensorId id : graph.saved()) {
        saved.insert(id);
    }
    for (auto op = plan.operators.rbegin(); op != plan.operators.rend(); ++op) {
        if (op->groups.empty()) {
            continue;
        }
        bool feeds = false;
        for (ir::TensorId output : graph.node(op->node).outputs) {
            feeds = feeds || saved.count(output) > 0;
            for (ir::NodeId consumer : graph.tensor(output).consumers) {
                feeds = feeds || !plan.operators[consumer].groups.empty();
            }
        }
        if (!feeds) {
            EINSUMMABLE_RETURN_IF_ERROR(uncut(graph, *op));
        }
    }
    plan.micro_batches = weights.size() <= 1 ? std::vector<int>() : weights;
    return absl::OkStatus();
}

} // namespace einsummable::logical
