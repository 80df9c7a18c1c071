#pragma once

#include <string>
#include <vector>

#include "compiler/ir/graph.h"
#include "compiler/logical/candidate.h"

namespace einsummable::logical {

// The dimension each shardable index of `op` splits, by name ("tokens", "heads_kv", ...): for an
// einsum the dimension its index letter labels in the first input that has it.
std::vector<std::string> index_dimension_names(const ir::Operator& op);

// The strategy one operator's split follows: "data parallel" (only token-like dimensions),
// "head parallel", "column tensor parallel" / "row tensor parallel" (a matmul split only on the
// weight's output / contracted index), "data + column/row tensor parallel" (also split on
// tokens), "3D matmul", "replicated" (no split), or "mixed".
std::string operator_strategy(const ir::Operator& op, const Candidate& candidate);

// The named strategy the whole plan matches, from the operators' strategies: data parallel,
// Ulysses (attention by heads, everything else by tokens), tensor parallel (Megatron
// column/row), tensor + sequence parallel, data + tensor parallel, 3D matmul, or "mixed".
std::string plan_strategy(const ir::Graph& graph, const std::vector<std::string>& per_operator);

} // namespace einsummable::logical
