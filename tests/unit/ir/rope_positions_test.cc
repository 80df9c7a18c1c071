// rope with a positions input: each token rotated by its given position — the same as
// sequence_ends' positions where the two agree, a decode step's continued position otherwise —
// for every split of its tokens and heads; what it refuses names the input or the token.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/ir/ops/rope.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;

const TensorType kX{DType::f64, {{"tokens", 7}, {"heads", 3}, {"d", 6}}};

HostTensor positions_tensor(const std::vector<int64_t>& positions) {
    HostTensor tensor{Box({{0, static_cast<int64_t>(positions.size())}})};
    for (size_t t = 0; t < positions.size(); ++t) {
        tensor.data()[t] = static_cast<double>(positions[t]);
    }
    return tensor;
}

double max_difference(const HostTensor& a, const HostTensor& b) {
    double worst = 0.0;
    for (int64_t i = 0; i < a.size(); ++i) {
        worst = std::max(worst, std::abs(a.data()[i] - b.data()[i]));
    }
    return worst;
}

TEST(RopePositions, GivenPositionsEqualTheSequencesAndShiftLikeADecodeStep) {
    std::mt19937_64 rng(11);
    const HostTensor x = HostTensor::random(kX.box(), rng, -1.0, 1.0);
    absl::StatusOr<OperatorPtr> by_ends =
        Rope::make({{"theta", 100.0}, {"sequence_ends", std::vector<int64_t>{3, 7}}}, {kX});
    ASSERT_TRUE(by_ends.ok()) << by_ends.status();
    const TensorType positions_type{DType::i64, {{"tokens", 7}}};
    absl::StatusOr<OperatorPtr> given = Rope::make({{"theta", 100.0}}, {kX, positions_type});
    ASSERT_TRUE(given.ok()) << given.status();
    EXPECT_FALSE((*given)->attributes().has("sequence_ends"));
    const auto* rope = dynamic_cast<const Rope*>(given->get());
    ASSERT_NE(rope, nullptr);
    EXPECT_TRUE(rope->has_positions());

    absl::StatusOr<std::vector<HostTensor>> expected = execute_whole(**by_ends, {x});
    ASSERT_TRUE(expected.ok()) << expected.status();
    const HostTensor same = positions_tensor({0, 1, 2, 0, 1, 2, 3});
    // Every split of tokens and heads: the positions block follows the tokens.
    for (const IntervalRequest& request :
         {IntervalRequest{{{0, 7}}, {{0, 3}}}, IntervalRequest{{{0, 2}, {2, 5}, {5, 7}}, {{0, 3}}},
          IntervalRequest{{{0, 4}, {4, 7}}, {{0, 1}, {1, 3}}}}) {
        absl::StatusOr<JoinAggSpec> spec = (*given)->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        absl::StatusOr<std::vector<HostTensor>> got = execute_spec(**given, *spec, {x, same});
        ASSERT_TRUE(got.ok()) << got.status();
        EXPECT_EQ(max_difference((*got)[0], (*expected)[0]), 0.0);
    }
    // A decode step: the token at position 40 is the 41st token of one sequence of 41.
    absl::StatusOr<OperatorPtr> long_one = Rope::make(
        {{"theta", 100.0}}, {TensorType{DType::f64, {{"tokens", 41}, {"heads", 3}, {"d", 6}}}});
    ASSERT_TRUE(long_one.ok());
    const HostTensor long_x = HostTensor::random(Box({{0, 41}, {0, 3}, {0, 6}}), rng, -1.0, 1.0);
    absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(**long_one, {long_x});
    ASSERT_TRUE(whole.ok());
    std::vector<int64_t> at(7, 40);
    HostTensor step_x{kX.box()};
    for (int64_t t = 0; t < 7; ++t) {
        std::memcpy(step_x.data() + t * 18, long_x.data() + 40 * 18, 18 * sizeof(double));
    }
    absl::StatusOr<std::vector<HostTensor>> step =
        execute_whole(**given, {step_x, positions_tensor(at)});
    ASSERT_TRUE(step.ok());
    for (int64_t t = 0; t < 7; ++t) {
        for (int64_t i = 0; i < 18; ++i) {
            EXPECT_EQ((*step)[0].data()[t * 18 + i], (*whole)[0].data()[40 * 18 + i]);
        }
    }
}

TEST(RopePositions, RefusesWhatItCannotRotateNamingTheCulprit) {
    const TensorType positions{DType::i32, {{"tokens", 7}}};
    EXPECT_THAT(Rope::make({{"sequence_ends", std::vector<int64_t>{7}}}, {kX, positions})
                    .status()
                    .message(),
                HasSubstr("not both"));
    EXPECT_THAT(Rope::make({}, {kX, TensorType{DType::f32, {{"tokens", 7}}}}).status().message(),
                HasSubstr("rope's positions are i32 or i64 [tokens]"));
    EXPECT_THAT(Rope::make({}, {kX, TensorType{DType::i64, {{"t", 5}}}}).status().message(),
                HasSubstr("5 positions for x's 7 tokens"));
    EXPECT_THAT(
        Rope::make({}, {TensorType{DType::i32, {{"tokens", 7}, {"d", 4}}}}).status().message(),
        HasSubstr("rope rotates floating-point values, not i32"));
    absl::StatusOr<OperatorPtr> rope = Rope::make({}, {kX, positions});
    ASSERT_TRUE(rope.ok());
    const std::vector<int32_t> values = {0, 5, -3, 1, 2, 3, 4};
    absl::Status bad = (*rope)->check_input_values(
        1, {reinterpret_cast<const std::byte*>(values.data()), values.size() * 4});
    EXPECT_THAT(bad.message(), HasSubstr("token 2 has position -3, outside [0, 16777216)"));
    const std::vector<int32_t> fine = {0, 5, 3, 1, 2, 3, 16777215};
    EXPECT_TRUE((*rope)
                    ->check_input_values(
                        1, {reinterpret_cast<const std::byte*>(fine.data()), fine.size() * 4})
                    .ok());
}

} // namespace
} // namespace einsummable::ir
