#include "compiler/ir/index_role.h"

#include "compiler/ir/graph.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

absl::string_view index_role_name(IndexRole role) {
    switch (role) {
    case IndexRole::token:
        return "token";
    case IndexRole::head:
        return "head";
    case IndexRole::feature:
        return "feature";
    case IndexRole::contracted:
        return "contracted";
    case IndexRole::context:
        return "context";
    }
    return "unknown";
}

std::vector<IndexRole> Operator::index_roles(const OperandRoles& /*operands*/) const {
    return std::vector<IndexRole>(shardable_indices().size(), IndexRole::feature);
}

std::vector<std::vector<IndexRole>>
Operator::output_roles(const std::vector<IndexRole>& roles) const {
    const SpecLayout bindings = layout();
    std::vector<std::vector<IndexRole>> out;
    for (const std::vector<DimBinding>& output : bindings.outputs) {
        std::vector<IndexRole>& dims = out.emplace_back();
        for (const DimBinding& binding : output) {
            const bool follows = binding.index != DimBinding::kWhole &&
                                 binding.index < static_cast<int>(roles.size());
            dims.push_back(follows ? roles[binding.index] : IndexRole::feature);
        }
    }
    return out;
}

std::vector<std::vector<IndexRole>> graph_index_roles(const Graph& graph) {
    // The roles of every tensor's dimensions as its producer declared them; none for inputs.
    std::vector<std::vector<std::optional<IndexRole>>> dims(graph.tensors().size());
    for (size_t id = 0; id < graph.tensors().size(); ++id) {
        dims[id].resize(graph.tensors()[id].type.dims.size());
    }
    std::vector<std::vector<IndexRole>> roles;
    roles.reserve(graph.nodes().size());
    for (const GraphNode& node : graph.nodes()) { // topological order
        OperandRoles operands;
        for (TensorId input : node.inputs) {
            operands.dims.push_back(dims[input]);
            operands.weights.push_back(graph.tensor(input).weight);
        }
        std::vector<IndexRole> node_roles = node.op->index_roles(operands);
        const std::vector<std::vector<IndexRole>> outputs = node.op->output_roles(node_roles);
        for (size_t output = 0; output < node.outputs.size() && output < outputs.size(); ++output) {
            std::vector<std::optional<IndexRole>>& out = dims[node.outputs[output]];
            for (size_t dim = 0; dim < out.size() && dim < outputs[output].size(); ++dim) {
                out[dim] = outputs[output][dim];
            }
        }
        roles.push_back(std::move(node_roles));
    }
    return roles;
}

} // namespace einsummable::ir
