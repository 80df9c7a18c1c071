#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/box.h"

namespace einsummable::ir {

// An index an operator may be split along. Either cut at any position, or only at the listed
// positions (e.g. the ends of packed sequences, where attention never crosses).
struct ShardableIndex {
    std::string name;
    int64_t size = 0;
    bool any_position = true;
    std::vector<int64_t> cut_positions; // sorted, strictly inside (0, size); when !any_position

    static ShardableIndex any(std::string name, int64_t size);
    static ShardableIndex at(std::string name, int64_t size, std::vector<int64_t> cut_positions);

    // The most intervals this index can be split into.
    int64_t max_parts() const;
    // "tokens:4096" or "sequence:4096@{1024,2560}"; past 16 cuts, the first 16 and a count.
    std::string to_string() const;
};

// One list of intervals per shardable index, in the operator's index order. A valid request
// partitions each index into contiguous non-empty intervals cut only where allowed.
using IntervalRequest = std::vector<std::vector<Interval>>;

absl::Status validate_request(absl::Span<const ShardableIndex> indices,
                              const IntervalRequest& request);

// `parts` near-equal intervals of [0, size): sizes differ by at most one, larger ones first.
std::vector<Interval> near_equal_intervals(int64_t size, int64_t parts);

// `parts` intervals for `index`: near-equal for `any`; otherwise parts-1 cuts chosen from the
// allowed positions so the largest interval is as small as possible.
absl::StatusOr<std::vector<Interval>> split_index(const ShardableIndex& index, int64_t parts);

// The request with counts[i] intervals on index i (see split_index).
absl::StatusOr<IntervalRequest> make_request(absl::Span<const ShardableIndex> indices,
                                             absl::Span<const int64_t> counts);

// Every assignment of interval counts to the indices whose product is `devices` and that each
// index allows (count <= max_parts), in lexicographic order.
std::vector<std::vector<int64_t>>
interval_count_assignments(absl::Span<const ShardableIndex> indices, int64_t devices);

std::string request_to_string(absl::Span<const ShardableIndex> indices,
                              const IntervalRequest& request);

} // namespace einsummable::ir
