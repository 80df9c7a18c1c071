#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "compiler/logical/cost_model.h"

namespace einsummable::logical {

// One decomposition an operator offers for p devices, with what the cost model needs of it.
struct Candidate {
    std::vector<int64_t> counts; // intervals per shardable index
    ir::IntervalRequest request; // op.spec(request) rebuilds the spec; candidates do not keep
                                 // it, since at p = 64 the specs of every candidate of a large
                                 // graph take hundreds of MB
    int64_t functions = 0;       // function specs in the spec
    std::vector<ir::Tiling> input_blocks;   // per input: canonical distinct blocks read
    std::vector<ir::Tiling> output_tilings; // per output: canonical tiling produced
    Cost local;                             // join + aggregation, plus the repartition
                                            // of pinned inputs (add_pinned_repartition);
                                            // other repartition depends on the producers
    // Bytes of the blocks the join reads and writes that are strided, not one contiguous range
    // of their row-major tensor. Not a cost of the paper's model: the optimiser uses it only to
    // break ties between plans of equal cost, preferring outer (contiguous) splits.
    double strided_bytes = 0.0;
};

// The index in `list` of the candidate with `candidate`'s request, appending it when absent.
int index_of_or_add(std::vector<Candidate>& list, const Candidate& candidate);

// Whether the candidate's join writes some box of some output more than once, so that the
// aggregation combines partial results (a split contraction index or normalised dimension):
// output_tilings holds each output's distinct boxes, one per function spec when none repeats.
bool aggregates(const Candidate& candidate);

// Whether `block` is one contiguous range of the row-major tensor `whole`: every dimension
// after the first partial one is whole, and every one before it has extent 1.
bool is_contiguous(const ir::Box& block, const ir::Box& whole);

// The candidate for one request: its spec's blocks, tilings, local cost and strided bytes.
// op.spec's error when the request is not valid for the operator.
absl::StatusOr<Candidate> make_candidate(const ir::Operator& op, ir::IntervalRequest request);

// Every candidate for `devices` devices: one per assignment of interval counts to the shardable
// indices whose product is `devices` (ir::interval_count_assignments), near-equal intervals on
// `any` indices and balanced cuts otherwise. When no assignment reaches `devices` (the indices
// are too small or too constrained), the largest reachable product below it is used: the
// operator then runs on fewer devices.
absl::StatusOr<std::vector<Candidate>> enumerate_candidates(const ir::Operator& op,
                                                            int64_t devices);

} // namespace einsummable::logical
