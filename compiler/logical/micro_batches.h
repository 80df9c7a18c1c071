#pragma once

#include "absl/status/status.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"

namespace einsummable::logical {

// Micro-batches: more than one function spec per device and operator, so that a plan can
// deliver its first rows' outputs while it still computes the next (docs/planner.md
// "Micro-batches").
//
// A logical plan runs each operator's function specs one per device. micro_batch_plan cuts every
// interval of each operator's first token index (ir::IndexRole::token: the activations'
// independent rows; attention's queries) into up to `weights.size()` parts, their sizes in
// proportion to `weights` (rounded; {1, 1}: halves; {7, 1}: seven eighths, then one eighth);
// parts that would be empty are dropped. Each function spec becomes the group of the function
// specs inside it (every box of each contained in its own), which one device runs one after
// another: micro-batch 0 first. Attention cuts its keys where the finer queries are when each
// finer query block still reads keys of its own (blocks of whole sequences); otherwise a finer
// function reads its parent's whole key block. A cut is kept only where it pays: an operator
// one of whose parts reads a later part of a cut producer (attention cut inside a sequence,
// whose first part needs the keys of the second; a head-parallel operator reading token-
// parallel ones) is left whole, and then, from the last operator back, so is every operator
// whose output is not saved and whose consumers are all whole. The lowering orders each device's
// nodes by micro-batch (physical/lower.h order_by_micro_batch): the first micro-batch of every
// operator runs before the second of any, so the blocks of a saved output that the first
// micro-batch writes go to the host while the second is computed.
//
// Left whole (a group of one): operators without a token index (a matrix chain), or whose
// token index may only be cut at given positions (ir::ShardableIndex::any_position false: no
// operator declares one today), operators that update a state in place (their blocks are the
// resident layout's), intervals of one row, and operators whose finer spec does not nest in the
// chosen one. The
// choice, cost and strategy of each operator stay the chosen ones: they describe the groups.
// Sets plan.micro_batches to `weights`. InvalidArgument when there are more than
// kMaxMicroBatches weights or one is not in [1, kMaxMicroBatchWeight]; none or one weight
// restores every operator's chosen spec (and leaves plan.micro_batches empty).
inline constexpr int kMaxMicroBatches = 64;
inline constexpr int kMaxMicroBatchWeight = 1 << 20;
absl::Status micro_batch_plan(const ir::Graph& graph, const std::vector<int>& weights,
                              LogicalPlan& plan);

// `n` micro-batches of equal size: n weights of 1.
std::vector<int> equal_micro_batches(int n);

} // namespace einsummable::logical
