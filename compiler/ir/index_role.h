#pragma once

#include <optional>
#include <vector>

#include "absl/strings/string_view.h"

namespace einsummable::ir {

class Graph;

// What a shardable index is to its operator. Every operator declares the roles of its own
// indices (Operator::index_roles); the strategy labels and the hand-written baselines
// (compiler/logical/strategy.h, baselines.h) read these roles and never a dimension's name, so
// renaming a dimension changes no plan and no label.
enum class IndexRole {
    // The independent rows of the activations (tokens, sequence positions, a batch): the
    // operator computes each row from that row alone, and no weight has the dimension. Data and
    // sequence parallelism split these.
    token,
    // Attention heads (kv heads; the query heads that follow them; heads split out of a
    // projection): what head parallelism (Ulysses, Megatron's attention) splits.
    head,
    // Any other dimension the operator keeps in its output: a hidden width (d_model, d_ff), a
    // weight's output columns, the dimensions of a computation without weights (a matrix
    // chain's). Megatron's column-parallel and feature-parallel splits.
    feature,
    // Summed over and absent from the output: a matmul's inner index. Row-parallel splits.
    contracted,
    // The tokens each row reads and combines (attention's keys, against its queries' `token`
    // index): the operator mixes tokens. Cut where the tokens are it splits nothing of its own
    // (blocks of whole sequences); cut otherwise it is context parallelism.
    context,
};

// "token", "head", "feature", "contracted", "context".
absl::string_view index_role_name(IndexRole role);

// What the graph knows of an operator's operands when the operator declares its roles: for
// every input, the role of each of its dimensions where its producer declared one (nullopt for
// a graph input's dimensions), and whether the input is a weight (GraphTensor::weight). Empty
// vectors (an operator outside a graph) mean nothing is known.
struct OperandRoles {
    std::vector<std::vector<std::optional<IndexRole>>> dims;
    std::vector<bool> weights;
};

// The roles of every node's shardable indices, indexed by NodeId then by index: each operator
// declares them in topological order, given the roles its producers gave the dimensions of
// their outputs (Operator::output_roles).
std::vector<std::vector<IndexRole>> graph_index_roles(const Graph& graph);

} // namespace einsummable::ir
