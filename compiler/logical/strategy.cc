#include "compiler/logical/strategy.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "compiler/ir/ops/einsum.h"

namespace einsummable::logical {

namespace {

bool token_like(const std::string& name) {
    for (const char* word : {"token", "sequence", "seq", "batch"}) {
        if (absl::StrContains(name, word)) {
            return true;
        }
    }
    return false;
}

bool head_like(const std::string& name) {
    return absl::StrContains(name, "head");
}

} // namespace

std::vector<std::string> index_dimension_names(const ir::Operator& op) {
    std::vector<std::string> names;
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    for (const ir::ShardableIndex& index : indices) {
        std::string name = index.name;
        if (einsum != nullptr) {
            const char letter = index.name[0];
            for (size_t input_idx = 0; input_idx < einsum->input_terms().size(); ++input_idx) {
                const size_t dim = einsum->input_terms()[input_idx].find(letter);
                if (dim != std::string::npos) {
                    name = op.input_types()[input_idx].dims[dim].name;
                    break;
                }
            }
        }
        names.push_back(name);
    }
    return names;
}

std::string operator_strategy(const ir::Operator& op, const Candidate& candidate) {
    const std::vector<std::string> names = index_dimension_names(op);
    std::vector<int> split; // indices cut into more than one interval
    for (size_t idx = 0; idx < candidate.counts.size(); ++idx) {
        if (candidate.counts[idx] > 1) {
            split.push_back(static_cast<int>(idx));
        }
    }
    if (split.empty()) {
        return "replicated";
    }
    auto all_split = [&](auto predicate) {
        return std::all_of(split.begin(), split.end(),
                           [&](int idx) { return predicate(names[idx]); });
    };
    if (all_split(token_like)) {
        return "data parallel";
    }
    if (all_split(head_like)) {
        return "head parallel";
    }
    // A matmul-like einsum: the lhs is the activation, the rhs the weight.
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    if (einsum != nullptr && einsum->input_terms().size() == 2 && einsum->has_reduction()) {
        const std::string& lhs = einsum->input_terms()[0];
        const std::string& rhs = einsum->input_terms()[1];
        const std::string& out = einsum->output_term();
        std::set<char> roles_m, roles_n, roles_k;
        for (int idx : split) {
            const char c = einsum->indices()[idx];
            const bool in_lhs = lhs.find(c) != std::string::npos;
            const bool in_rhs = rhs.find(c) != std::string::npos;
            const bool in_out = out.find(c) != std::string::npos;
            if (in_lhs && in_rhs && !in_out) {
                roles_k.insert(c);
            } else if (in_lhs && !in_rhs) {
                roles_m.insert(c);
            } else if (in_rhs && !in_lhs) {
                roles_n.insert(c);
            }
        }
        const size_t classified = roles_m.size() + roles_n.size() + roles_k.size();
        if (classified == split.size()) {
            if (!roles_m.empty() && !roles_n.empty() && !roles_k.empty()) {
                return "3D matmul";
            }
            if (roles_m.empty() && roles_k.empty()) {
                return "column tensor parallel";
            }
            if (roles_m.empty() && roles_n.empty()) {
                return "row tensor parallel";
            }
            const bool m_tokens = std::all_of(roles_m.begin(), roles_m.end(), [&](char c) {
                return token_like(names[einsum->indices().find(c)]);
            });
            if (!roles_m.empty() && m_tokens && roles_k.empty()) {
                return "data + column tensor parallel";
            }
            if (!roles_m.empty() && m_tokens && roles_n.empty()) {
                return "data + row tensor parallel";
            }
        }
    }
    return "mixed";
}

std::string plan_strategy(const ir::Graph& graph, const std::vector<std::string>& per_operator) {
    std::set<std::string> attention, contractions, others;
    for (size_t node = 0; node < per_operator.size(); ++node) {
        const ir::Operator& op = *graph.node(static_cast<ir::NodeId>(node)).op;
        const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
        if (op.kind() == "attention") {
            attention.insert(per_operator[node]);
        } else if (einsum != nullptr && einsum->input_terms().size() == 2 &&
                   einsum->has_reduction()) {
            contractions.insert(per_operator[node]);
        } else {
            others.insert(per_operator[node]);
        }
    }
    std::set<std::string> all = attention;
    all.insert(contractions.begin(), contractions.end());
    all.insert(others.begin(), others.end());
    auto only = [](const std::set<std::string>& set, std::set<std::string> allowed) {
        return std::all_of(set.begin(), set.end(),
                           [&](const std::string& s) { return allowed.count(s) > 0; });
    };
    if (all == std::set<std::string>{"replicated"}) {
        return "single device (nothing split)";
    }
    if (only(all, {"data parallel", "replicated"})) {
        return "data parallel";
    }
    if (!attention.empty() && attention == std::set<std::string>{"head parallel"} &&
        only(contractions, {"data parallel"}) && only(others, {"data parallel", "replicated"})) {
        return "Ulysses (attention by kv heads, everything else by tokens)";
    }
    if (per_operator.size() == 1) {
        return per_operator[0];
    }
    if (!contractions.empty() &&
        only(contractions, {"data parallel", "column tensor parallel", "row tensor parallel",
                            "data + column tensor parallel", "data + row tensor parallel"}) &&
        (contractions.count("data + column tensor parallel") ||
         contractions.count("data + row tensor parallel"))) {
        return "data + tensor parallel (tokens and Megatron column/row)";
    }
    if (!contractions.empty() &&
        only(contractions, {"column tensor parallel", "row tensor parallel"})) {
        if (only(others, {"data parallel"}) && !others.empty()) {
            return "tensor + sequence parallel (Megatron column/row, tokens elsewhere)";
        }
        return "tensor parallel (Megatron column/row)";
    }
    if (only(all, {"3D matmul"})) {
        return "3D matmul";
    }
    return "mixed";
}

} // namespace einsummable::logical
