#pragma once

// Helpers of the attention tests (decode, paged, partial): packed-sequence ends, rows gathered
// from a tensor, the largest difference of two tensors, and partial results combined by the
// log-sum-exp ⊕ in a random order.

#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/partial_block.h"

namespace einsummable::ir::testing {

// The ends of sequences of `lengths`, packed.
std::vector<int64_t> ends_of(const std::vector<int64_t>& lengths);

// Rows `rows` of `whole` (dimension 0), in order, packed into one tensor whose box starts at 0.
HostTensor gather_rows(const HostTensor& whole, const std::vector<int64_t>& rows);

// The largest absolute difference of a's and b's values, element by element (infinity where
// one is NaN); a gtest failure when their sizes differ.
double max_difference(const HostTensor& a, const HostTensor& b);

// `partials` combined by the ⊕ (combine_log_sum_exp) in a random tree: shuffled, then two
// random ones merged until one is left. The first combine error.
absl::StatusOr<PartialBlock> combine_in_random_order(std::vector<PartialBlock> partials,
                                                     std::mt19937_64& rng);

} // namespace einsummable::ir::testing
