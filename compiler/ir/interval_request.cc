#include "compiler/ir/interval_request.h"

#include <algorithm>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"

namespace einsummable::ir {

namespace {

// The first cut positions, "1024,2560" or "1,2,...,16 and 65519 more": an index cut at every
// one of a million sequence ends must not make a million-number message.
std::string cut_list(const std::vector<int64_t>& positions) {
    constexpr size_t kShown = 16;
    if (positions.size() <= kShown) {
        return absl::StrJoin(positions, ",");
    }
    return absl::StrCat(absl::StrJoin(positions.begin(), positions.begin() + kShown, ","),
                        ",... and ", positions.size() - kShown, " more");
}

} // namespace

ShardableIndex ShardableIndex::any(std::string name, int64_t size) {
    return ShardableIndex{std::move(name), size, true, {}};
}

ShardableIndex ShardableIndex::at(std::string name, int64_t size,
                                  std::vector<int64_t> cut_positions) {
    return ShardableIndex{std::move(name), size, false, std::move(cut_positions)};
}

int64_t ShardableIndex::max_parts() const {
    return any_position ? size : static_cast<int64_t>(cut_positions.size()) + 1;
}

std::string ShardableIndex::to_string() const {
    if (any_position) {
        return absl::StrCat(name, ":", size);
    }
    return absl::StrCat(name, ":", size, "@{", cut_list(cut_positions), "}");
}

absl::Status validate_request(absl::Span<const ShardableIndex> indices,
                              const IntervalRequest& request) {
    if (request.size() != indices.size()) {
        return absl::InvalidArgumentError(absl::StrCat("interval request has ", request.size(),
                                                       " index lists, the operator has ",
                                                       indices.size(), " shardable indices"));
    }
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        const ShardableIndex& index = indices[idx];
        const std::vector<Interval>& intervals = request[idx];
        const std::string where = absl::StrCat("index '", index.name, "' (size ", index.size, ")");
        if (intervals.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(where, ": no intervals"));
        }
        int64_t expected_lower = 0;
        for (const Interval& interval : intervals) {
            if (interval.lower != expected_lower) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, ": intervals do not partition it: ", interval.to_string(),
                                 " starts at ", interval.lower, ", expected ", expected_lower));
            }
            if (interval.empty()) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, ": empty interval ", interval.to_string()));
            }
            if (interval.upper > index.size) {
                return absl::InvalidArgumentError(absl::StrCat(
                    where, ": interval ", interval.to_string(), " ends past ", index.size));
            }
            if (interval.upper < index.size && !index.any_position &&
                !std::binary_search(index.cut_positions.begin(), index.cut_positions.end(),
                                    interval.upper)) {
                return absl::InvalidArgumentError(
                    absl::StrCat(where, ": may not be cut at ", interval.upper,
                                 " (allowed cuts: ", cut_list(index.cut_positions), ")"));
            }
            expected_lower = interval.upper;
        }
        if (expected_lower != index.size) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": intervals do not partition it: they stop at ", expected_lower));
        }
    }
    return absl::OkStatus();
}

std::vector<Interval> near_equal_intervals(int64_t size, int64_t parts) {
    std::vector<Interval> out;
    out.reserve(parts);
    const int64_t base = size / parts;
    const int64_t larger = size % parts;
    int64_t lower = 0;
    for (int64_t part = 0; part < parts; ++part) {
        const int64_t extent = base + (part < larger ? 1 : 0);
        out.push_back({lower, lower + extent});
        lower += extent;
    }
    return out;
}

namespace {

// Whether [0, points[last]) can be cut into exactly `parts` intervals of at most `longest`,
// cutting only at `points`: greedily, each interval reaching as far as it may, the fewest
// intervals needed must be at most `parts` (intervals can always be split further at unused
// points while parts <= last). O(parts log n).
bool can_cover(const std::vector<int64_t>& points, int64_t last, int64_t parts, int64_t longest) {
    if (parts > last) {
        return false;
    }
    int64_t at = 0;
    for (int64_t used = 0; at < last; ++used) {
        if (used == parts) {
            return false;
        }
        // The farthest point at most `longest` past points[at].
        const auto reach =
            std::upper_bound(points.begin() + at, points.begin() + last + 1, points[at] + longest);
        const int64_t next = static_cast<int64_t>(reach - points.begin()) - 1;
        if (next == at) {
            return false;
        }
        at = next;
    }
    return true;
}

// The smallest possible largest interval covering [0, points[last]) with exactly `parts`
// intervals, known to be at most `upper`: binary search over can_cover.
int64_t smallest_longest(const std::vector<int64_t>& points, int64_t last, int64_t parts,
                         int64_t upper) {
    int64_t lower = (points[last] + parts - 1) / parts - 1; // infeasible: parts·lower < length
    while (upper - lower > 1) {
        const int64_t middle = lower + (upper - lower) / 2;
        if (can_cover(points, last, parts, middle)) {
            upper = middle;
        } else {
            lower = middle;
        }
    }
    return upper;
}

// Chooses parts-1 of the interior positions of `points` (points.front() == 0, back() == size)
// minimising the largest interval. It gives the cuts of the dynamic programme over (parts used,
// last cut) that earlier versions ran in O(parts·n²) (n = points, 64k sequence ends took
// minutes): that programme kept, for each prefix, the first (smallest) last cut reaching the
// prefix's optimum, so walking back from the end, the interval ending at points[i] with j
// intervals left starts at the smallest k >= j-1 with points[i] - points[k] <= OPT(j, i), where
// OPT(j, i) is the optimum for [0, points[i]) in j intervals. (OPT(j-1, ·) is nondecreasing,
// so that k also keeps the prefix within OPT(j, i).) Each OPT is a binary search over
// can_cover, OPT(j-1, k) <= OPT(j, i) bounding the next: O(parts² log(size) log n) in all.
// tests/unit/ir/interval_request_test.cc checks it against the dynamic programme.
std::vector<Interval> balanced_cuts(const std::vector<int64_t>& points, int64_t parts) {
    std::vector<Interval> out(parts);
    int64_t i = static_cast<int64_t>(points.size()) - 1;
    int64_t longest = points[i];
    for (int64_t j = parts; j >= 1; --j) {
        longest = smallest_longest(points, i, j, longest);
        const auto first =
            std::lower_bound(points.begin(), points.begin() + i, points[i] - longest);
        const int64_t k = std::max(j - 1, static_cast<int64_t>(first - points.begin()));
        out[j - 1] = {points[k], points[i]};
        i = k;
    }
    return out;
}

} // namespace

absl::StatusOr<std::vector<Interval>> split_index(const ShardableIndex& index, int64_t parts) {
    if (parts < 1 || parts > index.max_parts()) {
        return absl::InvalidArgumentError(
            absl::StrCat("index ", index.to_string(), " cannot be split into ", parts,
                         " intervals (at most ", index.max_parts(), ")"));
    }
    if (index.any_position) {
        return near_equal_intervals(index.size, parts);
    }
    std::vector<int64_t> points = {0};
    points.insert(points.end(), index.cut_positions.begin(), index.cut_positions.end());
    points.push_back(index.size);
    return balanced_cuts(points, parts);
}

absl::StatusOr<IntervalRequest> make_request(absl::Span<const ShardableIndex> indices,
                                             absl::Span<const int64_t> counts) {
    if (counts.size() != indices.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "got ", counts.size(), " interval counts for ", indices.size(), " shardable indices"));
    }
    IntervalRequest request;
    for (size_t idx = 0; idx < indices.size(); ++idx) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<Interval> intervals,
                                     split_index(indices[idx], counts[idx]));
        request.push_back(std::move(intervals));
    }
    return request;
}

std::vector<std::vector<int64_t>>
interval_count_assignments(absl::Span<const ShardableIndex> indices, int64_t devices) {
    std::vector<std::vector<int64_t>> out;
    std::vector<int64_t> counts(indices.size(), 1);
    // Depth-first over indices; `remaining` is what the later indices must multiply to.
    auto recurse = [&](auto& self, size_t idx, int64_t remaining) -> void {
        if (idx == indices.size()) {
            if (remaining == 1) {
                out.push_back(counts);
            }
            return;
        }
        for (int64_t count = 1; count <= remaining; ++count) {
            if (remaining % count == 0 && count <= indices[idx].max_parts()) {
                counts[idx] = count;
                self(self, idx + 1, remaining / count);
            }
        }
        counts[idx] = 1;
    };
    if (devices >= 1) {
        recurse(recurse, 0, devices);
    }
    return out;
}

std::string request_to_string(absl::Span<const ShardableIndex> indices,
                              const IntervalRequest& request) {
    std::vector<std::string> parts;
    for (size_t idx = 0; idx < indices.size() && idx < request.size(); ++idx) {
        parts.push_back(absl::StrCat(indices[idx].name, "/", request[idx].size()));
    }
    return absl::StrJoin(parts, " ");
}

} // namespace einsummable::ir
