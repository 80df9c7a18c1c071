#include "compiler/ir/graph.h"

#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

absl::Status Graph::check_new_name(const std::string& name, absl::string_view what) const {
    if (name.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " has an empty name"));
    }
    if (std::optional<TensorId> id = find_tensor(name)) {
        const GraphTensor& existing = tensors_[*id];
        return absl::InvalidArgumentError(absl::StrCat(
            what, " '", name, "': a tensor with this name already exists (",
            existing.is_input() ? std::string("a graph input")
                                : absl::StrCat("output ", existing.output_idx, " of node '",
                                               nodes_[existing.producer].name, "'"),
            ")"));
    }
    return absl::OkStatus();
}

std::optional<TensorId> Graph::find_tensor(absl::string_view name) const {
    auto it = tensor_ids_.find(name);
    if (it == tensor_ids_.end()) {
        return std::nullopt;
    }
    return it->second;
}

absl::StatusOr<TensorId> Graph::add_input(std::string name, DType dtype, std::vector<Dim> dims) {
    EINSUMMABLE_RETURN_IF_ERROR(check_new_name(name, "input"));
    for (size_t dim = 0; dim < dims.size(); ++dim) {
        if (dims[dim].size <= 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", name, "' dimension ", dim, " ('", dims[dim].name,
                             "') has size ", dims[dim].size, "; sizes must be positive"));
        }
    }
    GraphTensor tensor;
    tensor.name = std::move(name);
    tensor.type = TensorType{dtype, std::move(dims)};
    tensors_.push_back(std::move(tensor));
    const TensorId id = static_cast<TensorId>(tensors_.size() - 1);
    tensor_ids_.emplace(tensors_.back().name, id);
    return id;
}

absl::StatusOr<std::vector<TensorId>> Graph::add_node(std::string name, absl::string_view kind,
                                                      const Attributes& attributes,
                                                      std::vector<TensorId> inputs,
                                                      std::vector<std::string> output_names) {
    std::vector<TensorType> input_types;
    std::vector<std::string> input_names;
    for (size_t input_idx = 0; input_idx < inputs.size(); ++input_idx) {
        const TensorId id = inputs[input_idx];
        if (id < 0 || id >= static_cast<TensorId>(tensors_.size())) {
            return absl::InvalidArgumentError(
                absl::StrCat("node '", name, "' input ", input_idx, ": no tensor with id ", id));
        }
        input_types.push_back(tensors_[id].type);
        input_names.push_back(tensors_[id].name);
    }
    const std::string where = absl::StrCat("node '", name, "' (", kind, ", inputs ",
                                           absl::StrJoin(input_names, ", "), "): ");
    if (node_names_.contains(name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("node '", name, "': a node with this name already exists"));
    }
    absl::StatusOr<OperatorPtr> op = make_operator(kind, attributes, std::move(input_types));
    if (!op.ok()) {
        return absl::Status(op.status().code(), absl::StrCat(where, op.status().message()));
    }
    const int num_outputs = (*op)->num_outputs();
    if (output_names.empty()) {
        if (num_outputs == 1) {
            output_names.push_back(name);
        } else {
            for (int output_idx = 0; output_idx < num_outputs; ++output_idx) {
                output_names.push_back(absl::StrCat(name, ":", output_idx));
            }
        }
    }
    if (static_cast<int>(output_names.size()) != num_outputs) {
        return absl::InvalidArgumentError(absl::StrCat(where, "names ", output_names.size(),
                                                       " outputs, the operator has ", num_outputs));
    }
    for (int output_idx = 0; output_idx < num_outputs; ++output_idx) {
        const TensorType& type = (*op)->output_types()[output_idx];
        for (int dim = 0; dim < type.rank(); ++dim) {
            if (type.dims[dim].size <= 0) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, "output ", output_idx, " dimension ", dim, " ('",
                                 type.dims[dim].name, "') has size ", type.dims[dim].size));
            }
        }
        EINSUMMABLE_RETURN_IF_ERROR(
            check_new_name(output_names[output_idx], absl::StrCat(where, "output ", output_idx)));
    }
    const NodeId node_id = static_cast<NodeId>(nodes_.size());
    GraphNode node{std::move(name), *std::move(op), inputs, {}};
    for (TensorId id : inputs) {
        if (tensors_[id].consumers.empty() || tensors_[id].consumers.back() != node_id) {
            tensors_[id].consumers.push_back(node_id);
        }
    }
    for (int output_idx = 0; output_idx < num_outputs; ++output_idx) {
        GraphTensor tensor;
        tensor.name = std::move(output_names[output_idx]);
        tensor.type = node.op->output_types()[output_idx];
        tensor.producer = node_id;
        tensor.output_idx = output_idx;
        tensors_.push_back(std::move(tensor));
        node.outputs.push_back(static_cast<TensorId>(tensors_.size() - 1));
        tensor_ids_.emplace(tensors_.back().name, node.outputs.back());
    }
    node_names_.insert(node.name);
    nodes_.push_back(std::move(node));
    return nodes_.back().outputs;
}

absl::StatusOr<TensorId> Graph::add(std::string name, absl::string_view kind,
                                    const Attributes& attributes, std::vector<TensorId> inputs) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<TensorId> outputs,
                                 add_node(std::move(name), kind, attributes, std::move(inputs)));
    if (outputs.size() != 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("operator '", kind, "' has ", outputs.size(), " outputs; use add_node"));
    }
    return outputs.front();
}

absl::Status Graph::save(TensorId tensor) {
    if (tensor < 0 || tensor >= static_cast<TensorId>(tensors_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot save tensor id ", tensor, ": no such tensor"));
    }
    tensors_[tensor].saved = true;
    return absl::OkStatus();
}

absl::Status Graph::mark_weight(TensorId tensor) {
    if (tensor < 0 || tensor >= static_cast<TensorId>(tensors_.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot mark tensor id ", tensor, " as a weight: no such tensor"));
    }
    if (!tensors_[tensor].is_input()) {
        return absl::InvalidArgumentError(absl::StrCat("cannot mark tensor '",
                                                       tensors_[tensor].name,
                                                       "' as a weight: it is not a graph input"));
    }
    tensors_[tensor].weight = true;
    return absl::OkStatus();
}

absl::Status Graph::validate() const {
    if (saved().empty()) {
        return absl::InvalidArgumentError("graph saves no tensor: nothing would be computed");
    }
    return absl::OkStatus();
}

std::vector<TensorId> Graph::inputs() const {
    std::vector<TensorId> out;
    for (size_t id = 0; id < tensors_.size(); ++id) {
        if (tensors_[id].is_input()) {
            out.push_back(static_cast<TensorId>(id));
        }
    }
    return out;
}

std::vector<TensorId> Graph::saved() const {
    std::vector<TensorId> out;
    for (size_t id = 0; id < tensors_.size(); ++id) {
        if (tensors_[id].saved) {
            out.push_back(static_cast<TensorId>(id));
        }
    }
    return out;
}

namespace {

// Which node produces each tensor name, after checking that node names are unique and that no
// node names an output twice or after a graph input. Two nodes giving the same output name are
// refused when the second is added (add_node), not here: a node that names more outputs than
// its operator has ("outputs: [h, a]" on an einsum, then a node 'a') must be the one the error
// names, and add_node checks the count before the names.
absl::StatusOr<std::map<std::string, size_t>> output_producers(const GraphDescription& description,
                                                               const Graph& graph) {
    std::map<std::string, size_t> producer;
    std::set<std::string> node_names;
    for (size_t node_idx = 0; node_idx < description.nodes.size(); ++node_idx) {
        const NodeDescription& node = description.nodes[node_idx];
        if (!node_names.insert(node.name).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("node '", node.name, "': a node with this name already exists"));
        }
        std::vector<std::string> outputs = node.outputs;
        if (outputs.empty()) {
            outputs.push_back(node.name);
        }
        std::set<std::string> own_outputs;
        for (const std::string& output : outputs) {
            if (!own_outputs.insert(output).second) {
                return absl::InvalidArgumentError(
                    absl::StrCat("node '", node.name, "' output '", output, "': named twice"));
            }
            if (graph.find_tensor(output)) {
                return absl::InvalidArgumentError(
                    absl::StrCat("node '", node.name, "' output '", output,
                                 "': tensor name already used by a graph input"));
            }
            producer.emplace(output, node_idx);
        }
    }
    return producer;
}

// Why some nodes could not be added: an input no graph input or node gives, else a cycle
// among the nodes not added.
absl::Status unordered_error(const GraphDescription& description, const Graph& graph,
                             const std::map<std::string, size_t>& producer,
                             const std::vector<bool>& added) {
    for (const NodeDescription& node : description.nodes) {
        for (size_t input_idx = 0; input_idx < node.inputs.size(); ++input_idx) {
            const std::string& name = node.inputs[input_idx];
            if (!graph.find_tensor(name) && !producer.count(name)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "node '", node.name, "' input ", input_idx, ": unknown tensor '", name, "'"));
            }
        }
    }
    std::vector<std::string> stuck;
    for (size_t node_idx = 0; node_idx < description.nodes.size(); ++node_idx) {
        if (!added[node_idx]) {
            stuck.push_back(absl::StrCat("'", description.nodes[node_idx].name, "'"));
        }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("graph has a cycle: nodes ", absl::StrJoin(stuck, ", "),
                     " each wait, directly or not, for one another's outputs"));
}

// Kahn's algorithm: adds a node once all the tensors it reads exist. Inputs no node gives are
// reported only once no more nodes can be added, so that a node whose own mistake hides a
// tensor is the one named: an einsum given outputs [h1, h2] leaves the next node's input 'h'
// unknown, and the einsum's "names 2 outputs" is the error, not that input.
//
// The order is that of passes over the description in index order, each adding every node
// whose inputs exist when the pass reaches it (so the first error is the same whatever the
// description's order), but each node is looked at only when its last missing input appears:
// a node that becomes ready ahead of the pass joins this pass, one behind it the next.
absl::Status add_nodes_in_order(const GraphDescription& description,
                                const std::map<std::string, size_t>& producer, Graph& graph) {
    const size_t n = description.nodes.size();
    std::vector<size_t> missing(n, 0); // per node: distinct input names that do not exist yet
    absl::flat_hash_map<std::string, std::vector<size_t>> waiting; // by name: nodes missing it
    using MinHeap = std::priority_queue<size_t, std::vector<size_t>, std::greater<>>;
    MinHeap this_pass;
    MinHeap next_pass;
    for (size_t node_idx = 0; node_idx < n; ++node_idx) {
        absl::flat_hash_set<std::string> seen;
        for (const std::string& name : description.nodes[node_idx].inputs) {
            if (!graph.find_tensor(name) && seen.insert(name).second) {
                ++missing[node_idx];
                waiting[name].push_back(node_idx);
            }
        }
        if (missing[node_idx] == 0) {
            this_pass.push(node_idx);
        }
    }
    std::vector<bool> added(n, false);
    size_t num_added = 0;
    while (!this_pass.empty()) {
        const size_t node_idx = this_pass.top();
        this_pass.pop();
        const NodeDescription& node = description.nodes[node_idx];
        std::vector<TensorId> inputs;
        for (const std::string& name : node.inputs) {
            inputs.push_back(*graph.find_tensor(name));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(
            const std::vector<TensorId> outputs,
            graph.add_node(node.name, node.kind, node.attributes, inputs, node.outputs));
        added[node_idx] = true;
        ++num_added;
        for (TensorId output : outputs) {
            auto it = waiting.find(graph.tensor(output).name);
            if (it == waiting.end()) {
                continue;
            }
            for (size_t consumer : it->second) {
                if (--missing[consumer] == 0) {
                    (consumer > node_idx ? this_pass : next_pass).push(consumer);
                }
            }
            waiting.erase(it);
        }
        if (this_pass.empty()) {
            std::swap(this_pass, next_pass);
        }
    }
    if (num_added < n) {
        return unordered_error(description, graph, producer, added);
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<Graph> Graph::build(const GraphDescription& description) {
    Graph graph;
    for (const TensorDescription& input : description.inputs) {
        EINSUMMABLE_RETURN_IF_ERROR(graph.add_input(input.name, input.dtype, input.dims));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const auto producer, output_producers(description, graph));
    EINSUMMABLE_RETURN_IF_ERROR(add_nodes_in_order(description, producer, graph));
    for (const std::string& name : description.saved) {
        std::optional<TensorId> id = graph.find_tensor(name);
        if (!id) {
            return absl::InvalidArgumentError(
                absl::StrCat("saved output '", name, "': unknown tensor"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(graph.save(*id));
    }
    EINSUMMABLE_RETURN_IF_ERROR(graph.validate());
    return graph;
}

std::string Graph::to_string() const {
    std::string out;
    for (TensorId id : inputs()) {
        absl::StrAppend(&out, "input ", tensors_[id].name, " : ", tensors_[id].type.to_string(),
                        tensors_[id].saved ? " (saved)" : "", "\n");
    }
    for (const GraphNode& node : nodes_) {
        std::vector<std::string> ins;
        for (TensorId id : node.inputs) {
            ins.push_back(tensors_[id].name);
        }
        std::vector<std::string> outs;
        for (TensorId id : node.outputs) {
            outs.push_back(absl::StrCat(tensors_[id].name, " : ", tensors_[id].type.to_string(),
                                        tensors_[id].saved ? " (saved)" : ""));
        }
        absl::StrAppend(&out, absl::StrJoin(outs, ", "), " = ", node.op->describe(), "(",
                        absl::StrJoin(ins, ", "), ")\n");
    }
    return out;
}

absl::Status check_input_values(const Graph& graph, TensorId input,
                                absl::Span<const std::byte> bytes) {
    const GraphTensor& tensor = graph.tensor(input);
    for (NodeId consumer : tensor.consumers) {
        const GraphNode& node = graph.node(consumer);
        for (int idx = 0; idx < static_cast<int>(node.inputs.size()); ++idx) {
            if (node.inputs[idx] != input) {
                continue;
            }
            if (absl::Status status = node.op->check_input_values(idx, bytes); !status.ok()) {
                return absl::Status(status.code(),
                                    absl::StrCat("input '", tensor.name, "' read by node '",
                                                 node.name, "' (", node.op->kind(),
                                                 "): ", status.message()));
            }
        }
    }
    return absl::OkStatus();
}

} // namespace einsummable::ir
