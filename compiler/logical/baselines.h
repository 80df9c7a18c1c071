#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/candidate.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::logical {

// Hand-written strategies (the paper's baselines), as one fixed candidate per operator built
// with make_candidate, so that their plans go through the same cost model, physical compilation
// and simulation as the dynamic programme's. Every rule splits some of an operator's shardable
// indices "as much as allowed up to p": the largest product of interval counts <= p that those
// indices allow (a restricted index, e.g. attention's packed sequence, takes at most one more
// part than it has cut positions, with balanced cuts). An operator that cannot reach p that way
// runs on fewer devices; one whose rule allows no split at all gets its whole spec (one function
// spec, replicated), so a baseline never fails on an operator.
//
//   data-parallel  every operator split only on its token indices (ir::IndexRole::token:
//                  tokens, sequence positions, a batch; the activations' rows that no weight
//                  has), weights replicated (PyTorch's data / sequence parallelism).
//   megatron       Megatron-LM tensor parallelism with sequence parallelism. Walking the
//                  operators in topological order, a tensor is "feature-sharded" when its
//                  producer split it on an index that is not a token:
//                  - a matmul-like einsum (two inputs and a reduction; lhs the activation, rhs
//                    the weight) whose lhs is feature-sharded is row-parallel (split on the
//                    contracted indices; output not feature-sharded), otherwise column-parallel
//                    (split on the weight's output indices; output feature-sharded);
//                  - attention (an operator that mixes tokens: it has a context index) splits
//                    by its head indices, the kv heads (output feature-sharded);
//                  - an operator that contracts nothing (element-wise einsums, rope,
//                    split_heads, merge_heads) with a feature-sharded input splits on its
//                    indices that are not tokens (output feature-sharded);
//                  - everything else (norms, softmax, residual adds of unsharded inputs, ...)
//                    splits by tokens.
//                  Where the rule's indices cannot reach p (too few heads, a narrow weight),
//                  the split with the most devices over the rule's and the token indices is
//                  taken, giving the rule's indices as many parts as possible.
//   ulysses        DeepSpeed-Ulysses: attention (what mixes tokens) split only by its head
//                  indices, the kv heads (the whole sequence on every device; with fewer kv
//                  heads than p it runs on fewer devices), every other operator as
//                  data-parallel.
//   row-sharded    the paper's matrix-chain baseline: every matmul-like einsum split only on its
//                  output rows (the first index of the lhs that the output keeps), other
//                  operators on their first shardable index.
//
// A feature-sharded output is one whose chosen split actually cuts a feature index, so at p = 1
// (nothing split) megatron makes every matmul column-parallel, i.e. whole. The rules read the
// roles each operator declares for its indices (ir::graph_index_roles), never dimension names:
// renaming a dimension changes no baseline.
bool is_baseline(Planner planner);

// One candidate per node (indexed by NodeId) for the baseline `planner` on `devices` devices.
// InvalidArgument when `planner` is not a baseline or devices < 1.
absl::StatusOr<std::vector<Candidate>> choose_baseline(const ir::Graph& graph, Planner planner,
                                                       int64_t devices);

} // namespace einsummable::logical
