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
