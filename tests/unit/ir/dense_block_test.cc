// Dense host blocks (compiler/ir/dense_block.h): region copies between blocks with non-zero
// origins, and the storage conversions every backend's load and offload use. Replay a failure
// with EINSUMMABLE_TEST_SEED=<printed seed>.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/dense_block.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::ir {
namespace {

// ---- copy_region ----------------------------------------------------------------------------

// The index of `position` in a row-major block covering `box`.
int64_t flat_index(const Box& box, const std::vector<int64_t>& position) {
    int64_t flat = 0;
    for (int dim = 0; dim < box.rank(); ++dim) {
        flat = flat * box[dim].size() + (position[dim] - box[dim].lower);
    }
    return flat;
}

bool inside(const Box& box, const std::vector<int64_t>& position) {
    for (int dim = 0; dim < box.rank(); ++dim) {
        if (position[dim] < box[dim].lower || position[dim] >= box[dim].upper) {
            return false;
        }
    }
    return true;
}

// Copies `region` and checks every element of dst: the region holds src's element at the same
// absolute position, everything else is untouched.
void check_copy(const Box& src_box, const Box& dst_box, const Box& region, int64_t element_bytes) {
    SCOPED_TRACE(absl::StrCat(region.to_string(), " from ", src_box.to_string(), " into ",
                              dst_box.to_string(), ", ", element_bytes, "-byte elements"));
    std::vector<std::byte> src(src_box.volume() * element_bytes);
    for (size_t idx = 0; idx < src.size(); ++idx) {
        src[idx] = static_cast<std::byte>((idx * 7 + 3) % 251);
    }
    std::vector<std::byte> dst(dst_box.volume() * element_bytes, std::byte{0xee});
    copy_region(src.data(), src_box, dst.data(), dst_box, region, element_bytes);

    std::vector<int64_t> position = dst_box.lower();
    for (int64_t flat = 0; flat < dst_box.volume(); ++flat) {
        // Position of dst element `flat`.
        int64_t rest = flat;
        for (int dim = dst_box.rank() - 1; dim >= 0; --dim) {
            position[dim] = dst_box[dim].lower + rest % dst_box[dim].size();
            rest /= dst_box[dim].size();
        }
        for (int64_t byte = 0; byte < element_bytes; ++byte) {
            const std::byte got = dst[flat * element_bytes + byte];
            const std::byte expected =
                inside(region, position) ? src[flat_index(src_box, position) * element_bytes + byte]
                                         : std::byte{0xee};
            ASSERT_EQ(got, expected) << "dst element " << flat << " byte " << byte;
        }
    }
}

TEST(CopyRegionTest, NonZeroOriginBoxes) {
    for (int64_t element_bytes : {2, 4, 8}) {
        // Partial last dimension: one memcpy per row.
        check_copy(Box({{1, 7}, {2, 12}}), Box({{0, 5}, {5, 15}}), Box({{1, 5}, {5, 12}}),
                   element_bytes);
        // Whole trailing dimensions in both blocks: rows merge into longer runs.
        check_copy(Box({{3, 10}, {2, 9}, {0, 5}}), Box({{5, 12}, {2, 9}, {0, 5}}),
                   Box({{5, 10}, {2, 9}, {0, 5}}), element_bytes);
        // Whole last dimension, partial middle one.
        check_copy(Box({{3, 10}, {2, 9}, {4, 9}}), Box({{5, 12}, {4, 8}, {4, 9}}),
                   Box({{5, 10}, {4, 8}, {4, 9}}), element_bytes);
        // A region equal to both blocks: one run.
        check_copy(Box({{2, 4}, {6, 9}}), Box({{2, 4}, {6, 9}}), Box({{2, 4}, {6, 9}}),
                   element_bytes);
        // A single element, a rank-1 block, an empty region, rank 0.
        check_copy(Box({{3, 10}, {2, 9}}), Box({{4, 6}, {8, 10}}), Box({{5, 6}, {8, 9}}),
                   element_bytes);
        check_copy(Box({{10, 30}}), Box({{15, 40}}), Box({{15, 30}}), element_bytes);
        check_copy(Box({{3, 10}, {2, 9}}), Box({{4, 6}, {8, 10}}), Box({{5, 5}, {8, 9}}),
                   element_bytes);
        check_copy(Box(), Box(), Box(), element_bytes);
    }
}

// ---- storage conversions --------------------------------------------------------------------

TEST(ConversionTest, HalfAndBfloatRoundTrips) {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::vector<float> values = {0.0f,
                                 -0.0f,
                                 1.0f,
                                 -2.5f,
                                 65504.0f,
                                 65520.0f,
                                 1e-8f,
                                 6e-5f,
                                 1e-40f,
                                 3.0e38f,
                                 1.0f / 3,
                                 1.00048828125f,
                                 std::numeric_limits<float>::infinity(),
                                 -std::numeric_limits<float>::infinity()};
    std::uniform_real_distribution<float> uniform(-100.0f, 100.0f);
    for (int idx = 0; idx < 1000; ++idx) {
        values.push_back(uniform(rng));
    }
    const auto n = static_cast<int64_t>(values.size());
    for (DType dtype : {DType::f16, DType::bf16, DType::f32, DType::f64}) {
        SCOPED_TRACE(dtype_name(dtype));
        std::vector<std::byte> stored(n * dtype_size(dtype));
        from_f32(dtype, values.data(), stored.data(), n);
        std::vector<float> back(n);
        to_f32(dtype, stored.data(), back.data(), n);
        for (int64_t idx = 0; idx < n; ++idx) {
            const auto expected = static_cast<float>(round_to_dtype(values[idx], dtype));
            EXPECT_EQ(std::bit_cast<uint32_t>(back[idx]), std::bit_cast<uint32_t>(expected))
                << values[idx] << " became " << back[idx];
        }
    }
    // Every f16 and bf16 bit pattern but NaN survives to_f32 then from_f32.
    std::vector<uint16_t> patterns(65536);
    for (uint32_t bits = 0; bits < patterns.size(); ++bits) {
        patterns[bits] = static_cast<uint16_t>(bits);
    }
    std::vector<float> widened(patterns.size());
    std::vector<uint16_t> narrowed(patterns.size());
    for (DType dtype : {DType::f16, DType::bf16}) {
        SCOPED_TRACE(dtype_name(dtype));
        to_f32(dtype, reinterpret_cast<const std::byte*>(patterns.data()), widened.data(),
               static_cast<int64_t>(patterns.size()));
        from_f32(dtype, widened.data(), reinterpret_cast<std::byte*>(narrowed.data()),
                 static_cast<int64_t>(patterns.size()));
        for (size_t bits = 0; bits < patterns.size(); ++bits) {
            if (!std::isnan(widened[bits])) {
                ASSERT_EQ(narrowed[bits], patterns[bits]) << "bits " << bits;
            }
        }
    }
}

} // namespace
} // namespace einsummable::ir
