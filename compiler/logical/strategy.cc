#include "compiler/logical/strategy.h"

#include <algorithm>
#include <set>

#include "compiler/ir/ops/einsum.h"

namespace einsummable::logical {

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

bool mixes_tokens(const std::vector<ir::IndexRole>& roles) {
    return std::find(roles.begin(), roles.end(), ir::IndexRole::context) != roles.end();
}

namespace {

// The first index with `role`, or -1.
int first_index(const std::vector<ir::IndexRole>& roles, ir::IndexRole role) {
    const auto found = std::find(roles.begin(), roles.end(), role);
    return found == roles.end() ? -1 : static_cast<int>(found - roles.begin());
}

} // namespace

std::string operator_strategy(const ir::Operator& op, const std::vector<ir::IndexRole>& roles,
                              const Candidate& candidate) {
    // A context index (attention's keys) cut where the tokens (its queries) are cut
    // (refine_request: blocks of whole sequences over their own keys) splits nothing of its own.
    const int context = first_index(roles, ir::IndexRole::context);
    const int tokens = first_index(roles, ir::IndexRole::token);
    const bool context_follows =
        context >= 0 && tokens >= 0 && candidate.request[context] == candidate.request[tokens];
    std::vector<int> split; // indices cut into more than one interval
    for (size_t idx = 0; idx < candidate.counts.size(); ++idx) {
        if (candidate.counts[idx] > 1 && !(context_follows && static_cast<int>(idx) == context)) {
            split.push_back(static_cast<int>(idx));
        }
    }
    if (context >= 0 && !context_follows && candidate.counts[context] > 1) {
        return "context parallel"; // partial results over key blocks, combined by log-sum-exp
    }
    if (split.empty()) {
        return "replicated";
    }
    auto all_split = [&](auto predicate) {
        return std::all_of(split.begin(), split.end(),
                           [&](int idx) { return predicate(roles[idx]); });
    };
    auto is_token = [](ir::IndexRole role) { return role == ir::IndexRole::token; };
    if (all_split(is_token)) {
        return "data parallel";
    }
    if (all_split([](ir::IndexRole role) { return role == ir::IndexRole::head; })) {
        return "head parallel";
    }
    const std::vector<MatmulRole> matmul = matmul_roles(op);
    if (matmul.empty()) {
        return all_split([&](ir::IndexRole role) { return !is_token(role); }) ? "feature parallel"
                                                                              : "mixed";
    }
    // A matmul-like einsum: the lhs is the activation, the rhs the weight.
    std::set<MatmulRole> split_roles;
    bool rows_are_tokens = true;
    for (int idx : split) {
        split_roles.insert(matmul[idx]);
        if (matmul[idx] == MatmulRole::row && !is_token(roles[idx])) {
            rows_are_tokens = false;
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
        return "row sharded"; // token rows returned "data parallel" above
    }
    if (rows_are_tokens && !contracted) {
        return "data + column tensor parallel";
    }
    if (rows_are_tokens && !columns) {
        return "data + row tensor parallel";
    }
    return "mixed";
}

std::string plan_strategy(const ir::Graph& graph,
                          const std::vector<std::vector<ir::IndexRole>>& roles,
                          const std::vector<std::string>& per_operator) {
    std::set<std::string> attention, contractions, others;
    for (size_t node = 0; node < per_operator.size(); ++node) {
        const ir::Operator& op = *graph.node(static_cast<ir::NodeId>(node)).op;
        if (mixes_tokens(roles[node])) {
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
