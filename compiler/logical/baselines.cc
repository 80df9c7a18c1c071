#include "compiler/logical/baselines.h"

#include <algorithm>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/logical/strategy.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {

namespace {

using Indices = std::vector<int>; // positions in op.shardable_indices(), ascending

bool contains(const Indices& indices, int idx) {
    return std::find(indices.begin(), indices.end(), idx) != indices.end();
}

Indices merged(Indices a, const Indices& b) {
    for (int idx : b) {
        if (!contains(a, idx)) {
            a.push_back(idx);
        }
    }
    std::sort(a.begin(), a.end());
    return a;
}

// The indices whose role passes `keep`.
template <typename Keep>
Indices indices_where(const std::vector<ir::IndexRole>& roles, Keep keep) {
    Indices out;
    for (size_t idx = 0; idx < roles.size(); ++idx) {
        if (keep(roles[idx])) {
            out.push_back(static_cast<int>(idx));
        }
    }
    return out;
}

Indices token_indices(const std::vector<ir::IndexRole>& roles) {
    return indices_where(roles, [](ir::IndexRole role) { return role == ir::IndexRole::token; });
}

Indices feature_indices(const std::vector<ir::IndexRole>& roles) { // everything but tokens
    return indices_where(roles, [](ir::IndexRole role) { return role != ir::IndexRole::token; });
}

Indices head_indices(const std::vector<ir::IndexRole>& roles) {
    return indices_where(roles, [](ir::IndexRole role) { return role == ir::IndexRole::head; });
}

// The indices of a matmul-like einsum that play `role`; empty for other operators.
Indices matmul_indices(const ir::Operator& op, MatmulRole role) {
    const std::vector<MatmulRole> roles = matmul_roles(op);
    Indices out;
    for (size_t idx = 0; idx < roles.size(); ++idx) {
        if (roles[idx] == role) {
            out.push_back(static_cast<int>(idx));
        }
    }
    return out;
}

// A matmul's output rows: the first index of the lhs that the output keeps (i of ij,jk->ik).
Indices output_row_index(const ir::Operator& op) {
    const auto& einsum = dynamic_cast<const ir::Einsum&>(op);
    for (char c : einsum.input_terms()[0]) {
        if (einsum.output_term().find(c) != std::string::npos) {
            return {static_cast<int>(einsum.indices().find(c))};
        }
    }
    return {}; // the output keeps nothing of the lhs: left whole
}

// The shared helper of every rule: the candidate that splits only the indices in `allowed`
// (every other index whole) over as many devices as they allow, up to `devices`. Among the
// splits over that many devices it takes the one giving the indices in `preferred` the most
// parts, then the one giving earlier indices more (outer, contiguous blocks). With nothing
// allowed, or nothing splittable, it is the whole spec.
absl::StatusOr<Candidate> split_up_to(const ir::Operator& op, int64_t devices,
                                      const Indices& allowed, const Indices& preferred = {}) {
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    std::vector<ir::ShardableIndex> subset;
    for (int idx : allowed) {
        subset.push_back(indices[idx]);
    }
    std::optional<std::vector<int64_t>> best;
    int64_t best_on_preferred = 0;
    for (int64_t target = devices; target >= 1 && !best.has_value(); --target) {
        for (const std::vector<int64_t>& counts : ir::interval_count_assignments(subset, target)) {
            int64_t on_preferred = 1;
            for (size_t k = 0; k < allowed.size(); ++k) {
                if (contains(preferred, allowed[k])) {
                    on_preferred *= counts[k];
                }
            }
            if (!best.has_value() || on_preferred > best_on_preferred ||
                (on_preferred == best_on_preferred && counts > *best)) {
                best = counts;
                best_on_preferred = on_preferred;
            }
        }
    }
    std::vector<int64_t> counts(indices.size(), 1);
    for (size_t k = 0; k < allowed.size(); ++k) {
        counts[allowed[k]] = (*best)[k]; // target 1 always has the all-ones assignment
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::IntervalRequest request, ir::make_request(indices, counts));
    return make_candidate(op, op.refine_request(std::move(request)));
}

bool splits_any(const Candidate& candidate, const Indices& indices) {
    return std::any_of(indices.begin(), indices.end(),
                       [&](int idx) { return candidate.counts[idx] > 1; });
}

// data-parallel: tokens only, weights replicated.
absl::StatusOr<Candidate> data_parallel(const ir::Operator& op,
                                        const std::vector<ir::IndexRole>& roles, int64_t devices) {
    return split_up_to(op, devices, token_indices(roles));
}

// ulysses: attention (what mixes tokens) by kv heads only (the whole sequence on every device),
// the rest by tokens.
absl::StatusOr<Candidate> ulysses(const ir::Operator& op, const std::vector<ir::IndexRole>& roles,
                                  int64_t devices) {
    if (mixes_tokens(roles)) {
        return split_up_to(op, devices, head_indices(roles));
    }
    return data_parallel(op, roles, devices);
}

// row-sharded: matmuls by their output rows, anything else by its first shardable index.
absl::StatusOr<Candidate> row_sharded(const ir::Operator& op, int64_t devices) {
    if (is_matmul_like(op)) {
        return split_up_to(op, devices, output_row_index(op));
    }
    return split_up_to(op, devices, op.shardable_indices().empty() ? Indices{} : Indices{0});
}

// Operators that keep a feature-sharded input feature-sharded in Megatron, splitting along the
// head / feature indices their input is split on: those that contract nothing and mix no tokens
// (element-wise, broadcast or transposing einsums, RoPE, the head reshapes). A norm or softmax
// also contracts no index, but its only shardable indices are tokens: it splits by tokens.
bool follows_features(const std::vector<ir::IndexRole>& roles) {
    return std::none_of(roles.begin(), roles.end(), [](ir::IndexRole role) {
        return role == ir::IndexRole::contracted || role == ir::IndexRole::context;
    });
}

struct MegatronChoice {
    Candidate candidate;
    bool feature_sharded = false; // whether the output is split on a feature dimension
};

// megatron for one operator, given which of its inputs are feature-sharded. The rule's
// dimensions are preferred; tokens fill in where they cannot reach `devices`.
absl::StatusOr<MegatronChoice> megatron(const ir::Operator& op,
                                        const std::vector<ir::IndexRole>& roles,
                                        const std::vector<bool>& sharded, int64_t devices) {
    const Indices tokens = token_indices(roles);
    auto split_on = [&](const Indices& rule,
                        bool output_follows) -> absl::StatusOr<MegatronChoice> {
        EINSUMMABLE_ASSIGN_OR_RETURN(Candidate candidate,
                                     split_up_to(op, devices, merged(rule, tokens), rule));
        const bool feature_sharded = output_follows && splits_any(candidate, rule);
        return MegatronChoice{std::move(candidate), feature_sharded};
    };
    if (is_matmul_like(op)) {
        if (sharded[0]) { // row-parallel: the activation arrives split on the contracted index
            return split_on(matmul_indices(op, MatmulRole::contracted), false);
        }
        return split_on(matmul_indices(op, MatmulRole::column), true); // column-parallel
    }
    if (mixes_tokens(roles)) { // attention
        return split_on(head_indices(roles), true);
    }
    if (follows_features(roles) &&
        std::find(sharded.begin(), sharded.end(), true) != sharded.end()) {
        return split_on(feature_indices(roles), true);
    }
    return split_on({}, false); // sequence parallelism: tokens
}

} // namespace

bool is_baseline(Planner planner) {
    switch (planner) {
    case Planner::dp:
    case Planner::greedy:
    case Planner::random:
        return false;
    case Planner::data_parallel:
    case Planner::megatron:
    case Planner::ulysses:
    case Planner::row_sharded:
        return true;
    }
    return false;
}

absl::StatusOr<std::vector<Candidate>> choose_baseline(const ir::Graph& graph, Planner planner,
                                                       int64_t devices) {
    if (!is_baseline(planner)) {
        return absl::InvalidArgumentError(
            absl::StrCat("planner '", planner_name(planner), "' is not a hand-written baseline"));
    }
    if (devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    const std::vector<std::vector<ir::IndexRole>> roles = ir::graph_index_roles(graph);
    std::vector<bool> feature_sharded(graph.tensors().size(), false); // megatron's state
    std::vector<Candidate> chosen;
    chosen.reserve(graph.nodes().size());
    for (size_t node_id = 0; node_id < graph.nodes().size(); ++node_id) {
        const ir::GraphNode& node = graph.nodes()[node_id];
        const ir::Operator& op = *node.op;
        const std::vector<ir::IndexRole>& op_roles = roles[node_id];
        absl::StatusOr<Candidate> candidate;
        switch (planner) {
        case Planner::data_parallel:
            candidate = data_parallel(op, op_roles, devices);
            break;
        case Planner::ulysses:
            candidate = ulysses(op, op_roles, devices);
            break;
        case Planner::row_sharded:
            candidate = row_sharded(op, devices);
            break;
        case Planner::megatron: {
            std::vector<bool> sharded;
            for (ir::TensorId input : node.inputs) {
                sharded.push_back(feature_sharded[input]);
            }
            absl::StatusOr<MegatronChoice> choice = megatron(op, op_roles, sharded, devices);
            if (!choice.ok()) {
                candidate = choice.status();
                break;
            }
            for (ir::TensorId output : node.outputs) {
                feature_sharded[output] = choice->feature_sharded;
            }
            candidate = std::move(choice->candidate);
            break;
        }
        default:
            break; // not reached: is_baseline checked above
        }
        if (!candidate.ok()) { // the requests are valid by construction; kept for safety
            return absl::Status(candidate.status().code(),
                                absl::StrCat("node '", node.name, "': ", planner_name(planner),
                                             ": ", candidate.status().message()));
        }
        chosen.push_back(*std::move(candidate));
    }
    return chosen;
}

} // namespace einsummable::logical
