#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/logical/candidate.h"

namespace einsummable::logical {

// What a shardable index of a matmul-like einsum (two inputs and a reduction; the lhs is the
// activation, the rhs the weight) does: a row of the lhs (in the lhs, not the rhs), a column of
// the weight (in the rhs, not the lhs), contracted (in both, not the output) or a batch index
// (in both and the output).
enum class MatmulRole { row, column, contracted, batch };
bool is_matmul_like(const ir::Operator& op);
// One role per shardable index of `op`; empty when op is not matmul-like.
std::vector<MatmulRole> matmul_roles(const ir::Operator& op);

// The dimension each shardable index of `op` splits, by name ("tokens", "heads_kv", ...): for an
// einsum the dimension its index letter labels in the first input that has it. For explaining a
// plan only: labels and baselines read index roles (ir::IndexRole), never names.
std::vector<std::string> index_dimension_names(const ir::Operator& op);

// Whether an operator whose indices have `roles` mixes tokens (it has a context index:
// attention). Ulysses and Megatron split such an operator by heads, and plans name its strategy
// apart from the others'.
bool mixes_tokens(const std::vector<ir::IndexRole>& roles);

// The strategy one operator's split follows, from the roles of its indices
// (ir::graph_index_roles): "data parallel" (only token indices), "head parallel" (only heads),
// "context parallel" (a context index split other than where the tokens are),
// "column tensor parallel" / "row tensor parallel" (a matmul split only on the weight's output /
// contracted index), "data + column/row tensor parallel" (also split on token rows), "row
// sharded" (a matmul split only on lhs rows that are not tokens), "3D matmul", "feature
// parallel" (an operator other than a matmul split only on indices that are not tokens, e.g. an
// element-wise op on d_ff after a column-parallel matmul), "replicated" (no split), or "mixed".
std::string operator_strategy(const ir::Operator& op, const std::vector<ir::IndexRole>& roles,
                              const Candidate& candidate);

// The named strategy the whole plan matches, from the operators' strategies (`roles`: each
// node's index roles, ir::graph_index_roles): data parallel, Ulysses (attention by heads,
// everything else by tokens), tensor parallel (Megatron column/row), tensor + sequence parallel
// (Megatron column/row, attention and the ops between by heads / features, everything else by
// tokens), data + tensor parallel, row sharded (every matmul by its lhs rows), 3D matmul, or
// "mixed".
std::string plan_strategy(const ir::Graph& graph,
                          const std::vector<std::vector<ir::IndexRole>>& roles,
                          const std::vector<std::string>& per_operator);

} // namespace einsummable::logical
