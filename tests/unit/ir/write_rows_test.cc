// write_rows: the state with the given rows written at their slots — for every split of the
// state's rows and trailing dimensions — and what it refuses, named: inputs that do not fit, a
// slot outside the state or written twice.
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/write_rows.h"
#include "compiler/ir/spec_execution.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

using ::testing::HasSubstr;

const TensorType kState{DType::f32, {{"cache", 10}, {"heads", 2}, {"d", 3}}};
const TensorType kRows{DType::f32, {{"new", 3}, {"heads", 2}, {"d", 3}}};
const TensorType kSlots{DType::i64, {{"new", 3}}};

TEST(WriteRows, WritesEachRowAtItsSlotForEverySplit) {
    absl::StatusOr<OperatorPtr> op = make_operator("write_rows", {}, {kState, kRows, kSlots});
    ASSERT_TRUE(op.ok()) << op.status();
    EXPECT_EQ((*op)->output_types()[0], kState);
    std::mt19937_64 rng(3);
    const HostTensor state = HostTensor::random(kState.box(), rng, -1.0, 1.0);
    const HostTensor rows = HostTensor::random(kRows.box(), rng, -1.0, 1.0);
    // Row 1's slot is -1: it is written nowhere.
    const HostTensor slots(kSlots.box(), {7.0, -1.0, 4.0});
    // What it must give: the state, rows 7 and 4 replaced.
    HostTensor expected = state;
    const int64_t width = 6;
    for (int i = 0; i < 3; i += 2) {
        const auto slot = static_cast<int64_t>(slots.data()[i]);
        std::memcpy(expected.data() + slot * width, rows.data() + i * width,
                    width * sizeof(double));
    }
    for (const IntervalRequest& request :
         {IntervalRequest{{{0, 10}}, {{0, 2}}, {{0, 3}}},
          IntervalRequest{{{0, 3}, {3, 5}, {5, 10}}, {{0, 2}}, {{0, 3}}},
          IntervalRequest{{{0, 5}, {5, 10}}, {{0, 1}, {1, 2}}, {{0, 2}, {2, 3}}}}) {
        absl::StatusOr<JoinAggSpec> spec = (*op)->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        absl::StatusOr<std::vector<HostTensor>> got =
            execute_spec(**op, *spec, {state, rows, slots});
        ASSERT_TRUE(got.ok()) << got.status();
        for (int64_t i = 0; i < expected.size(); ++i) {
            ASSERT_EQ((*got)[0].data()[i], expected.data()[i]) << "element " << i;
        }
    }
}

TEST(WriteRows, RefusesWhatItCannotWriteNamingTheCulprit) {
    auto message = [](std::vector<TensorType> inputs) {
        return std::string(make_operator("write_rows", {}, std::move(inputs)).status().message());
    };
    EXPECT_THAT(message({kState, kRows}), HasSubstr("takes 3 inputs"));
    EXPECT_THAT(message({TensorType{DType::i32, {{"r", 4}}}, kRows, kSlots}),
                HasSubstr("state is a floating-point tensor"));
    EXPECT_THAT(
        message({kState, TensorType{DType::f64, {{"new", 3}, {"heads", 2}, {"d", 3}}}, kSlots}),
        HasSubstr("rows are [n, ...] of the state's dtype (f32)"));
    EXPECT_THAT(
        message({kState, TensorType{DType::f32, {{"new", 3}, {"heads", 2}, {"e", 4}}}, kSlots}),
        HasSubstr("dimension 2 ('e') is 4, the state's is 3"));
    EXPECT_THAT(message({kState, kRows, TensorType{DType::i32, {{"new", 2}}}}),
                HasSubstr("slots are i32 or i64 [n], one per row (3)"));
    EXPECT_THAT(message({kState, kRows, TensorType{DType::f32, {{"new", 3}}}}),
                HasSubstr("slots are i32 or i64"));

    absl::StatusOr<OperatorPtr> op = make_operator("write_rows", {}, {kState, kRows, kSlots});
    ASSERT_TRUE(op.ok());
    auto check = [&](std::vector<int64_t> slots) {
        return (*op)->check_input_values(
            2, {reinterpret_cast<const std::byte*>(slots.data()), slots.size() * 8});
    };
    EXPECT_TRUE(check({9, 0, 4}).ok());
    EXPECT_THAT(check({9, 10, 4}).message(),
                HasSubstr("slots[1] = 10 is outside the state's 10 rows [0, 10)"));
    EXPECT_THAT(check({-2, 0, 4}).message(), HasSubstr("slots[0] = -2"));
    EXPECT_TRUE(check({-1, 0, -1}).ok()) << "-1: not written, as often as wanted";
    EXPECT_THAT(check({3, 5, 3}).message(), HasSubstr("slot 3 is written twice, by rows 0 and 2"));
}

} // namespace
} // namespace einsummable::ir
