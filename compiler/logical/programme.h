#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/support/cancellation.h"

namespace einsummable::logical {

// What the dynamic programme of dynamic_programme.cc minimises: a price per candidate and a
// price per edge (an input an operator reads from another operator's output), summed over the
// plan. The paper's bytes (choose_dp) and the predicted time (time_dp.h) are two pricings of one
// programme.
// The price of an edge: `work` the devices do for it (kernels that run beside the operators'
// and so add to theirs), `wait` what the consumer waits for beyond that (transfers, which can
// overlap other branches' work). The bytes pricing has only `wait`.
struct EdgePrice {
    double work = 0.0;
    double wait = 0.0;
    double total() const { return work + wait; }
};

class ProgrammePricing {
public:
    virtual ~ProgrammePricing() = default;
    // The candidate's own price (for bytes: join + aggregation + pinned repartition).
    virtual double local(ir::NodeId node, int candidate) const = 0;
    // Reading input `slot` of `consumer` (with its candidate) from the output of `producer`
    // (with its candidate) that the slot names.
    virtual EdgePrice edge(ir::NodeId producer, int producer_candidate, ir::NodeId consumer,
                           int consumer_candidate, int slot) const = 0;
    // Whether an operator's inputs from different producers compose as branches that overlap
    // (compose_branches) rather than as a plain sum.
    virtual bool overlaps_branches() const { return false; }
};

// One input branch of an operator: the producer, the price of everything the devices do for
// the branch (its subtree, 0 for a producer outside the tree, already done; plus the edge's
// work), what the consumer then waits for (the edge's wait), and whether the branch frees
// buffers of an exchange when it ends (its producer, in the tree, received an input by
// transfers: `assembles` of the producer's own branches).
struct Branch {
    ir::NodeId producer = 0;
    double work = 0.0;
    double wait = 0.0;
    bool frees = false;
};

// When the operator's inputs are all ready: the branches run one after another in producer
// order (every candidate places function spec k on device k, so branches share the devices:
// their work does not overlap), each branch's edge overlapping the work of the branches after
// it — max over branches of (when its transfers start + its wait). Its transfers start when
// its work is done or, where a later branch frees an exchange's buffers, when the last such
// branch is done: lowering's memory plan places the consumer's exchange buffers (made after
// every branch, in node order) first fit into the bytes that dead buffers held, and the
// exchange's large assembled buffer dies with the kernel that read it, so a copy waits for that
// kernel (physical/lower.h plan_memory). Branches whose producer lies outside the tree go
// first. Sorts `branches`.
double compose_branches(std::vector<Branch>& branches);

// Whether an operator whose input branches are `branches` receives an input by transfers (a
// branch that waits).
bool assembles(const std::vector<Branch>& branches);

// The trees the programme cuts the graph into: per node, the consumer whose tree it belongs to
// (all its outputs unsaved and read by that one consumer only), or -1 for the root of a tree.
std::vector<ir::NodeId> tree_parents(const ir::Graph& graph);

// The programme of choose_dp (optimizer.h) under `pricing`: among plans of equal price it
// prefers fewer strided bytes (Candidate::strided_bytes). Opt(op, T) keeps, per output tiling T,
// the cheapest candidate; the edges to a producer are priced against the candidate that entry
// keeps. Cancelled once `cancellation` (polled per node; null: never) is set.
absl::StatusOr<std::vector<int>> choose_by_pricing(const ir::Graph& graph,
                                                   const GraphCandidates& candidates,
                                                   const ProgrammePricing& pricing,
                                                   const support::Cancellation* cancellation);

} // namespace einsummable::logical
