#include "compiler/ir/box.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

Box box2(int64_t a, int64_t b, int64_t c, int64_t d) {
    return Box({{a, b}, {c, d}});
}

TEST(Box, VolumeShapeAndEmpty) {
    const Box box = box2(2, 6, 1, 4);
    EXPECT_EQ(box.volume(), 12);
    EXPECT_EQ(box.shape(), (std::vector<int64_t>{4, 3}));
    EXPECT_EQ(box.lower(), (std::vector<int64_t>{2, 1}));
    EXPECT_FALSE(box.empty());
    EXPECT_TRUE(box2(2, 2, 0, 5).empty());
    EXPECT_EQ(Box().volume(), 1) << "a rank-0 box holds one scalar";
    EXPECT_EQ(box.to_string(), "[2,6)x[1,4)");
}

TEST(Box, Intersection) {
    EXPECT_EQ(box2(0, 4, 0, 4).intersect(box2(2, 6, 1, 3)), box2(2, 4, 1, 3));
    EXPECT_FALSE(box2(0, 4, 0, 4).intersect(box2(4, 6, 0, 4)).has_value())
        << "half-open boxes that only touch are disjoint";
    EXPECT_FALSE(box2(0, 4, 0, 4).intersect(Box({{0, 4}})).has_value()) << "rank mismatch";
}

TEST(Box, Containment) {
    EXPECT_TRUE(box2(0, 4, 0, 4).contains(box2(1, 3, 0, 4)));
    EXPECT_FALSE(box2(0, 4, 0, 4).contains(box2(1, 5, 0, 4)));
    EXPECT_TRUE(box2(0, 4, 0, 4).contains(box2(0, 4, 0, 4)));
}

TEST(Box, TilesAcceptsAPartition) {
    const Box whole = box2(0, 4, 0, 6);
    EXPECT_TRUE(tiles({box2(0, 2, 0, 6), box2(2, 4, 0, 3), box2(2, 4, 3, 6)}, whole));
    EXPECT_TRUE(tiles({whole}, whole));
}

TEST(Box, TilesRejectsOverlapGapsAndStrays) {
    const Box whole = box2(0, 4, 0, 6);
    const absl::Status overlap = check_tiles({box2(0, 3, 0, 6), box2(2, 4, 0, 6)}, whole);
    EXPECT_FALSE(overlap.ok());
    EXPECT_NE(overlap.message().find("overlap"), absl::string_view::npos) << overlap;
    const absl::Status gap = check_tiles({box2(0, 2, 0, 6), box2(3, 4, 0, 6)}, whole);
    EXPECT_FALSE(gap.ok());
    EXPECT_NE(gap.message().find("cover 18 of the 24"), absl::string_view::npos) << gap;
    const absl::Status stray = check_tiles({box2(0, 4, 0, 7)}, whole);
    EXPECT_NE(stray.message().find("leaves"), absl::string_view::npos) << stray;
    // Overlap and gap of equal volume: the volume alone would accept this.
    EXPECT_FALSE(tiles({box2(0, 2, 0, 6), box2(1, 3, 0, 6)}, box2(0, 4, 0, 6)));
}

TEST(Box, OverlayGridUnionsEveryBound) {
    const Box whole = box2(0, 4, 0, 4);
    const Tiling rows = {box2(0, 2, 0, 4), box2(2, 4, 0, 4)};
    const Tiling cols = {box2(0, 4, 0, 1), box2(0, 4, 1, 4)};
    const Tiling odd = {box2(0, 3, 0, 4), box2(3, 4, 0, 4)};
    const std::vector<Box> grid = overlay_grid({rows, cols, odd}, whole);
    // Dimension 0 bounds {0, 2, 3, 4}, dimension 1 bounds {0, 1, 4}: 3 x 2 cells.
    ASSERT_EQ(grid.size(), 6u);
    EXPECT_EQ(grid[0], box2(0, 2, 0, 1));
    EXPECT_EQ(grid[5], box2(3, 4, 1, 4));
    EXPECT_TRUE(tiles(grid, whole));
    // Every box of every tiling is exactly a union of cells.
    for (const Tiling& tiling : {rows, cols, odd}) {
        for (const Box& box : tiling) {
            int64_t covered = 0;
            for (const Box& cell : grid) {
                if (box.contains(cell)) {
                    covered += cell.volume();
                } else {
                    EXPECT_FALSE(box.intersect(cell).has_value()) << "cell straddles a box";
                }
            }
            EXPECT_EQ(covered, box.volume());
        }
    }
}

TEST(Box, DistinctBoxesKeepsFirstAppearanceOrder) {
    const std::vector<Box> boxes = {box2(1, 2, 0, 1), box2(0, 1, 0, 1), box2(1, 2, 0, 1)};
    EXPECT_EQ(distinct_boxes(boxes), (std::vector<Box>{box2(1, 2, 0, 1), box2(0, 1, 0, 1)}));
}

} // namespace
} // namespace einsummable::ir
