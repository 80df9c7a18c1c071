#include "compiler/logical/strategy.h"

#include <algorithm>
#include <set>

#include "absl/strings/match.h"
#include "compiler/ir/ops/einsum.h"

namespace einsummable::logical {

bool is_token_like(const std::string& dimension_name) {
    for (const char* word : {"token", "sequence", "seq", "batch"}) {
        if (absl::StrContains(dimension_name, word)) {
            return true;
        }
    }
    return false;
}

bool is_head_like(const std::string& dimension_name) {
    return absl::StrContains(dimension_name, "head");
}

bool is_matmul_like(const ir::Operator& op) {
    const auto* einsum = dynamic_cast<const ir::Einsum*>(&op);
    return einsum != nullptr && einsum->input_terms().size() == 2 && einsum->has_reduction();
}

std::vector<MatmulRole> matmul_roles(const ir::Operator& op) {
    if (!is_matmul_like(op)) {
        return {};
    }
    const auto& einsum = dynamic_cast<const ir::Einsum&>(op);
    const std::string& lhs = einsum.input_terms()[0];
    const std::string& rhs = einsum.input_terms()[1];
    const std::string& out = einsum.output_term();
    std::vector<MatmulRole> roles;
    for (char c : einsum.indices()) {
        const bool in_lhs = lhs.find(c) != std::string::npos;
        const bool in_rhs = rhs.find(c) != std::string::npos;
        const bool in_out = out.find(c) != std::string::npos;
        if (in_lhs && in_rhs) {
            roles.push_back(in_out ? MatmulRole::batch : MatmulRole::contracted);
        } else {
            roles.push_back(in_lhs ? MatmulRole::row : MatmulRole::column);
        }
    }
    return roles;
}

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
    // Attention's keys cut where its queries are (refine_request: blocks of whole sequences
    // over their own keys) split nothing of their own.
    const bool keys_follow_queries = op.kind() == "attention" && candidate.request.size() == 3 &&
                                     candidate.request[2] == candidate.request[0];
    std::vector<int> split; // indices cut into more than one interval
    for (size_t idx = 0; idx < candidate.counts.size(); ++idx) {
        if (candidate.counts[idx] > 1 && !(keys_follow_queries && idx == 2)) {
            split.push_back(static_cast<int>(idx));
        }
    }
    if (op.kind() == "attention" && !keys_follow_queries && candidate.counts.size() == 3 &&
        candidate.counts[2] > 1) {
        return "context parallel"; // partial results over key blocks, combined by log-sum-exp
    }
    if (split.empty()) {
        return "replicated";
    }
    auto all_split = [&](auto predicate) {
        return std::all_of(split.begin(), split.end(),
                           [&](int idx) { return predicate(names[idx]); });
    };
    if (all_split(is_token_like)) {
        return "data parallel";
    }
    if (all_split(is_head_like)) {
        return "head parallel";
    }
    const std::vector<MatmulRole> roles = matmul_roles(op);
    if (roles.empty()) {
        return all_split([](const std::string& name) { return !is_token_like(name); })
                   ? "feature parallel"
                   : "mixed";
    }
    // A matmul-like einsum: the lhs is the activation, the rhs the weight.
    std::set<MatmulRole> split_roles;
    bool rows_token_like = true;
    for (int idx : split) {
        split_roles.insert(roles[idx]);
        if (roles[idx] == MatmulRole::row && !is_token_like(names[idx])) {
            rows_token_like = false;
        }
    }
    const bool rows = split_roles.count(MatmulRole::row) > 0;
    const bool columns = split_roles.count(MatmulRole::column) > 0;
    const bool contracted = split_roles.count(MatmulRole::contracted) > 0;
    if (split_roles.count(MatmulRole::batch) > 0) {
        return "mixed";
    }
    if (rows && columns && contracted) {
        return "3D matmul";
    }
    if (!rows && !contracted) {
        return "column tensor parallel";
    }
    if (!rows && !columns) {
        return "row tensor parallel";
    }
    if (!columns && !contracted) {
        return "row sharded"; // token-like rows returned "data parallel" above
    }
    if (rows_token_like && !contracted) {
        return "data + column tensor parallel";
    }
    if (rows_token_like && !columns) {
        return "data + row tensor parallel";
    }
    return "mixed";
}

std::string plan_strategy(const ir::Graph& graph, const std::vector<std::string>& per_operator) {
    std::set<std::string> attention, contractions, others;
    for (size_t node = 0; node < per_operator.size(); ++node) {
        const ir::Operator& op = *graph.node(static_cast<ir::NodeId>(node)).op;
        if (op.kind() == "attention") {
            attention.insert(per_operator[node]);
        } else if (is_matmul_like(op)) {
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
        // Sequence parallelism: what is not split like the matmuls (by heads or features between
        // a column- and a row-parallel matmul) is split by tokens.
        if (others.count("data parallel") > 0 &&
            only(others, {"data parallel", "head parallel", "feature parallel"}) &&
            only(attention, {"head parallel"})) {
            return "tensor + sequence parallel (Megatron column/row, tokens elsewhere)";
        }
        return "tensor parallel (Megatron column/row)";
    }
    if (!contractions.empty() && contractions.count("row sharded") > 0 &&
        only(contractions, {"row sharded", "data parallel", "replicated"})) {
        return "row sharded (every matmul by its lhs rows)";
    }
    if (only(all, {"3D matmul"})) {
        return "3D matmul";
    }
    return "mixed";
}

} // namespace einsummable::logical
