#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/logical/candidate.h"

namespace einsummable::logical {

// Dimension names that count as tokens (data / sequence parallelism): those containing "token",
// "sequence", "seq" or "batch".
bool is_token_like(const std::string& dimension_name);
// Dimension names that count as attention heads: those containing "head".
bool is_head_like(const std::string& dimension_name);

// What a shardable index of a matmul-like einsum (two inputs and a reduction; the lhs is the
// activation, the rhs the weight) does: a row of the lhs (in the lhs, not the rhs), a column of
// the weight (in the rhs, not the lhs), contracted (in both, not the output) or a batch index
// (in both and the output).
enum class MatmulRole { row, column, contracted, batch };
bool is_matmul_like(const ir::Operator& op);
// One role per shardable index of `op`; empty when op is not matmul-like.
std::vector<MatmulRole> matmul_roles(const ir::Operator& op);

// The dimension each shardable index of `op` splits, by name ("tokens", "heads_kv", ...): for an
// einsum the dimension its index letter labels in the first input that has it.
std::vector<std::string> index_dimension_names(const ir::Operator& op);

// The strategy one operator's split follows: "data parallel" (only token-like dimensions),
// "head parallel", "column tensor parallel" / "row tensor parallel" (a matmul split only on the
// weight's output / contracted index), "data + column/row tensor parallel" (also split on
// tokens), "row sharded" (a matmul split only on lhs rows that are not token-like), "3D matmul",
// "feature parallel" (an operator other than a matmul split only on dimensions that are neither
// tokens nor heads, e.g. an element-wise op on d_ff after a column-parallel matmul), "replicated"
// (no split), or "mixed".
std::string operator_strategy(const ir::Operator& op, const Candidate& candidate);

// The named strategy the whole plan matches, from the operators' strategies: data parallel,
// Ulysses (attention by heads, everything else by tokens), tensor parallel (Megatron
// column/row), tensor + sequence parallel (Megatron column/row, attention and the ops between
// by heads / features, everything else by tokens), data + tensor parallel, row sharded (every
// matmul by its lhs rows), 3D matmul, or "mixed".
std::string plan_strategy(const ir::Graph& graph, const std::vector<std::string>& per_operator);

} // namespace einsummable::logical
