#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "compiler/ir/interval_request.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

TEST(IntervalRequest, NearEqualIntervals) {
    EXPECT_EQ(near_equal_intervals(10, 3), (std::vector<Interval>{{0, 4}, {4, 7}, {7, 10}}));
    EXPECT_EQ(near_equal_intervals(8, 4).back(), (Interval{6, 8}));
    EXPECT_EQ(near_equal_intervals(5, 1), (std::vector<Interval>{{0, 5}}));
}

TEST(IntervalRequest, SplitAtAllowedCutsMinimisesTheLargestPart) {
    // Packed sequences ending at 1024, 2560, 4096 (lengths 1024, 1536, 1536).
    const ShardableIndex sequence = ShardableIndex::at("sequence", 4096, {1024, 2560});
    EXPECT_EQ(*split_index(sequence, 2), (std::vector<Interval>{{0, 2560}, {2560, 4096}}));
    EXPECT_EQ(*split_index(sequence, 3),
              (std::vector<Interval>{{0, 1024}, {1024, 2560}, {2560, 4096}}));
    EXPECT_FALSE(split_index(sequence, 4).ok()) << "only three sequences";
    const ShardableIndex skewed = ShardableIndex::at("s", 100, {10, 20, 30, 90});
    EXPECT_EQ(*split_index(skewed, 2), (std::vector<Interval>{{0, 30}, {30, 100}}));
    // With three parts [30, 90) (60 long, no cut inside) bounds the maximum from below.
    EXPECT_EQ(*split_index(skewed, 3), (std::vector<Interval>{{0, 30}, {30, 90}, {90, 100}}));
}

// The dynamic programme split_index ran before it became near-linear: O(parts·n²) over
// (parts used, last cut), keeping the first last cut that reaches each prefix's optimum.
std::vector<Interval> quadratic_balanced_cuts(const ShardableIndex& index, int64_t parts) {
    std::vector<int64_t> points = {0};
    points.insert(points.end(), index.cut_positions.begin(), index.cut_positions.end());
    points.push_back(index.size);
    const int64_t n = static_cast<int64_t>(points.size());
    constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
    std::vector<std::vector<int64_t>> best(parts + 1, std::vector<int64_t>(n, kInf));
    std::vector<std::vector<int64_t>> from(parts + 1, std::vector<int64_t>(n, -1));
    best[0][0] = 0;
    for (int64_t j = 1; j <= parts; ++j) {
        for (int64_t i = j; i < n; ++i) {
            for (int64_t k = j - 1; k < i; ++k) {
                if (best[j - 1][k] == kInf) {
                    continue;
                }
                const int64_t cost = std::max(best[j - 1][k], points[i] - points[k]);
                if (cost < best[j][i]) {
                    best[j][i] = cost;
                    from[j][i] = k;
                }
            }
        }
    }
    std::vector<Interval> out(parts);
    int64_t i = n - 1;
    for (int64_t j = parts; j >= 1; --j) {
        out[j - 1] = {points[from[j][i]], points[i]};
        i = from[j][i];
    }
    return out;
}

// Same cuts as the quadratic programme, ties included, so no plan changes (the goldens under
// tests/golden check the workloads; this checks random cut sets, many with equal gaps).
TEST(IntervalRequest, SplitAtAllowedCutsMatchesTheDynamicProgramme) {
    const uint64_t seed = 20240611;
    std::mt19937_64 random(seed);
    for (int trial = 0; trial < 1500; ++trial) {
        const int64_t size =
            std::uniform_int_distribution<int64_t>(2, trial % 3 == 0 ? 12 : 300)(random);
        std::vector<int64_t> cuts;
        const int64_t step = std::uniform_int_distribution<int64_t>(1, 4)(random);
        for (int64_t position = 1; position < size; ++position) {
            // Sometimes regular (many ties), sometimes sparse and random.
            if (trial % 2 == 0 ? position % step == 0
                               : std::uniform_int_distribution<int>(0, 5)(random) == 0) {
                cuts.push_back(position);
            }
        }
        const ShardableIndex index = ShardableIndex::at("s", size, cuts);
        for (int64_t parts = 1; parts <= index.max_parts() && parts <= 12; ++parts) {
            ASSERT_EQ(*split_index(index, parts), quadratic_balanced_cuts(index, parts))
                << "seed " << seed << " trial " << trial << " index " << index.to_string()
                << " parts " << parts;
        }
    }
}

// A hostile client can pack 65,536 one-token sequences into 0.5 MB: a quadratic programme took
// about 26 s per split of 8 there, a million ends hours. The bound is four orders above what the
// near-linear split takes (about a millisecond: copying the points), so a loaded machine does not
// make it flaky, and far below the quadratic time.
TEST(IntervalRequest, SplitAtAMillionCutsIsNearLinear) {
    constexpr int64_t kEnds = int64_t{1} << 20;
    std::vector<int64_t> cuts;
    for (int64_t position = 1; position < kEnds; ++position) {
        cuts.push_back(position);
    }
    const ShardableIndex index = ShardableIndex::at("sequence", kEnds, std::move(cuts));
    const auto start = std::chrono::steady_clock::now();
    for (int64_t parts : {2, 3, 8, 64}) {
        absl::StatusOr<std::vector<Interval>> intervals = split_index(index, parts);
        ASSERT_TRUE(intervals.ok()) << intervals.status();
        ASSERT_EQ(intervals->size(), static_cast<size_t>(parts));
        int64_t largest = 0;
        for (const Interval& interval : *intervals) {
            largest = std::max(largest, interval.size());
        }
        EXPECT_EQ(largest, (kEnds + parts - 1) / parts) << parts << " parts";
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_LT(seconds, 10.0);
    // Error messages list a few cuts, not a million.
    std::vector<int64_t> even;
    for (int64_t position = 2; position < kEnds; position += 2) {
        even.push_back(position);
    }
    const ShardableIndex even_index = ShardableIndex::at("sequence", kEnds, std::move(even));
    EXPECT_LT(even_index.to_string().size(), 200u);
    const absl::Status status = validate_request({even_index}, {{{0, 3}, {3, kEnds}}});
    EXPECT_NE(status.message().find("may not be cut at 3"), std::string::npos) << status;
    EXPECT_LT(status.message().size(), 300u) << status;
}

TEST(IntervalRequest, ValidationNamesTheProblem) {
    const std::vector<ShardableIndex> indices = {ShardableIndex::any("i", 8),
                                                 ShardableIndex::at("s", 6, {2, 4})};
    EXPECT_TRUE(validate_request(indices, {{{0, 3}, {3, 8}}, {{0, 2}, {2, 6}}}).ok());

    auto message = [&](const IntervalRequest& request) {
        return std::string(validate_request(indices, request).message());
    };
    EXPECT_NE(
        message({{{0, 3}, {4, 8}}, {{0, 6}}}).find("'i' (size 8): intervals do not partition"),
        std::string::npos);
    EXPECT_NE(message({{{0, 3}, {2, 8}}, {{0, 6}}}).find("starts at 2, expected 3"),
              std::string::npos);
    EXPECT_NE(message({{{0, 3}}, {{0, 6}}}).find("they stop at 3"), std::string::npos);
    EXPECT_NE(message({{{0, 9}}, {{0, 6}}}).find("ends past 8"), std::string::npos);
    EXPECT_NE(message({{{0, 0}, {0, 8}}, {{0, 6}}}).find("empty interval"), std::string::npos);
    EXPECT_NE(message({{{0, 8}}, {{0, 3}, {3, 6}}}).find("'s' (size 6): may not be cut at 3"),
              std::string::npos);
    EXPECT_NE(message({{{0, 8}}}).find("1 index lists"), std::string::npos);
    EXPECT_NE(message({{}, {{0, 6}}}).find("no intervals"), std::string::npos);
}

TEST(IntervalRequest, CountAssignmentsMultiplyToTheDevices) {
    const std::vector<ShardableIndex> indices = {
        ShardableIndex::any("i", 16), ShardableIndex::any("j", 16), ShardableIndex::any("k", 16)};
    const auto assignments = interval_count_assignments(indices, 4);
    EXPECT_EQ(assignments.size(), 6u); // 4 = 4·1·1 (3 ways) or 2·2·1 (3 ways)
    for (const auto& counts : assignments) {
        EXPECT_EQ(counts[0] * counts[1] * counts[2], 4);
    }
    EXPECT_EQ(interval_count_assignments(indices, 6).size(), 9u); // 6·1·1 ×3, 3·2·1 ×6
    // An index limited to 2 parts cannot take 4.
    const std::vector<ShardableIndex> limited = {ShardableIndex::at("s", 10, {5}),
                                                 ShardableIndex::any("h", 2)};
    const auto limited_assignments = interval_count_assignments(limited, 4);
    ASSERT_EQ(limited_assignments.size(), 1u);
    EXPECT_EQ(limited_assignments[0], (std::vector<int64_t>{2, 2}));
    EXPECT_TRUE(interval_count_assignments(limited, 8).empty());
}

} // namespace
} // namespace einsummable::ir
