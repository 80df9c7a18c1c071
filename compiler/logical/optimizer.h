#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/support/cancellation.h"

namespace einsummable::logical {

// Chooses one join-agg spec per operator for options.devices devices with the planner asked:
//   dp     — the dynamic programme of paper section 4 (choose_dp), minimising bytes;
//   greedy — the same programme without the repartition term;
//   random — uniform over each operator's candidates, seeded;
//   data-parallel, megatron, ulysses, row-sharded — the hand-written baselines of baselines.h,
//            one fixed candidate per operator (costed like any other plan).
// With options.batch_invariant, dp, greedy and random choose only among candidates that
// aggregate nothing (keep_unaggregated); a baseline keeps its fixed candidates.
// Cancelled, naming the stage, once options.cancellation is set: it is polled once per operator
// while enumerating candidates and while the programme fills its table.
absl::StatusOr<LogicalPlan> optimize(const ir::Graph& graph, const PlannerOptions& options);

// The candidates the searching planners choose among: enumerate_graph, then, in this order,
// keep_unaggregated (options.batch_invariant), keep_attention_splits, add_pinned_repartition and
// keep_unreplicated. Cancelled as enumerate_graph.
absl::StatusOr<GraphCandidates> planning_candidates(const ir::Graph& graph,
                                                    const PlannerOptions& options);

// The dynamic programme over given candidates; returns a candidate index per node.
// Opt(op, T) is the cheapest cost of producing op's output with tiling T, over the tilings op's
// candidates produce, computed bottom-up and traced back from the root. The graph is cut where a
// tensor has several consumers (or is saved): each piece is a tree, optimised exactly; trees go
// largest first, each charging repartition against the specs already fixed on both sides of its
// cut edges. On a graph where every tensor has at most one consumer the result is optimal.
// Among plans of equal cost it prefers fewer strided bytes (Candidate::strided_bytes): outer,
// contiguous splits, e.g. tokens over heads for a reshape next to attention.
// Cancelled once `cancellation` (polled per node; null: never) is set.
absl::StatusOr<std::vector<int>> choose_dp(const ir::Graph& graph,
                                           const GraphCandidates& candidates, bool with_repartition,
                                           const support::Cancellation* cancellation = nullptr);

std::vector<int> choose_random(const GraphCandidates& candidates, uint64_t seed);

} // namespace einsummable::logical
