#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// A graph as data, with tensors referred to by name and nodes in any order: what a graph file
// or a GraphDef carries. Graph::build checks and orders it.
struct TensorDescription {
    std::string name;
    DType dtype = DType::f32;
    std::vector<Dim> dims;
};

struct NodeDescription {
    std::string name;
    std::string kind;
    Attributes attributes;
    std::vector<std::string> inputs;
    // Names of the outputs; empty means the node's name (one output) or "name:k".
    std::vector<std::string> outputs;
};

struct GraphDescription {
    std::vector<TensorDescription> inputs;
    std::vector<NodeDescription> nodes;
    std::vector<std::string> saved;
};

using TensorId = int;
using NodeId = int;

struct GraphTensor {
    std::string name;
    TensorType type;
    NodeId producer = -1; // -1: a graph input
    int output_idx = 0;   // which output of the producer
    std::vector<NodeId> consumers;
    bool saved = false;
    // A graph input holding model parameters (a weight: the same for every request, e.g.
    // uploaded once to the daemon) rather than activations. Plans do not depend on it except
    // through index roles (index_role.h): the dimensions of the activations that no weight has
    // are tokens. Set by mark_weight.
    bool weight = false;
    bool is_input() const { return producer < 0; }
};

struct GraphNode {
    std::string name;
    OperatorPtr op;
    std::vector<TensorId> inputs;
    std::vector<TensorId> outputs;
};

class Graph;

// Checks the values a request gives graph input `input` (its bytes, in its dtype) against every
// operator that reads it (Operator::check_input_values): InvalidArgument "input 'ids' read by
// node 'embed' (embedding): position 3 holds id 9, outside the table's 8 rows [0, 8)".
absl::Status check_input_values(const Graph& graph, TensorId input,
                                absl::Span<const std::byte> bytes);

// A validated dataflow graph of abstract operators. Nodes are stored in a topological order
// (NodeId order), so every node's inputs are graph inputs or outputs of earlier nodes.
class Graph {
public:
    Graph() = default;
    Graph(Graph&&) = default;
    Graph& operator=(Graph&&) = default;

    // Resolves names, orders the nodes topologically and checks every operator; errors name
    // the node, operator, input and dimension (or the cycle, or the unknown tensor).
    static absl::StatusOr<Graph> build(const GraphDescription& description);

    // Incremental construction, in topological order by construction.
    absl::StatusOr<TensorId> add_input(std::string name, DType dtype, std::vector<Dim> dims);
    absl::StatusOr<std::vector<TensorId>> add_node(std::string name, absl::string_view kind,
                                                   const Attributes& attributes,
                                                   std::vector<TensorId> inputs,
                                                   std::vector<std::string> output_names = {});
    // add_node for a single-output operator.
    absl::StatusOr<TensorId> add(std::string name, absl::string_view kind,
                                 const Attributes& attributes, std::vector<TensorId> inputs);
    absl::Status save(TensorId tensor);
    // Marks a graph input as a weight (GraphTensor::weight). InvalidArgument for an operator's
    // output or an unknown id.
    absl::Status mark_weight(TensorId tensor);
    // Whole-graph checks that incremental construction cannot make as it goes (something saved).
    absl::Status validate() const;

    const std::vector<GraphTensor>& tensors() const { return tensors_; }
    const std::vector<GraphNode>& nodes() const { return nodes_; }
    const GraphTensor& tensor(TensorId id) const { return tensors_[id]; }
    const GraphNode& node(NodeId id) const { return nodes_[id]; }
    std::optional<TensorId> find_tensor(absl::string_view name) const;
    std::vector<TensorId> inputs() const;
    std::vector<TensorId> saved() const;

    // One line per input and node: "mm1 = einsum(equation=ij,jk->ik ...)(x, w1) : f32[...]".
    std::string to_string() const;

private:
    absl::Status check_new_name(const std::string& name, absl::string_view what) const;

    std::vector<GraphTensor> tensors_;
    std::vector<GraphNode> nodes_;
    // Tensor and node names to ids, so that adding a node and looking a name up do not scan
    // the graph (building a graph of n nodes stays linear).
    absl::flat_hash_map<std::string, TensorId> tensor_ids_;
    absl::flat_hash_set<std::string> node_names_;
};

} // namespace einsummable::ir
