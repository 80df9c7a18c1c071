// server/batch_layout: a batch's bindings and sequence ends, its inputs packed end to end with
// the idle slots repeating the last request, its outputs split back per request, in the order
// each asked for them.
#include <cstddef>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/graph_def.h"
#include "server/batch_layout.h"
#include "server/tensor_limits.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::byte> bytes_of(absl::string_view text) {
    std::vector<std::byte> out;
    for (char c : text) {
        out.push_back(static_cast<std::byte>(c));
    }
    return out;
}

std::string text_of(absl::Span<const std::byte> bytes) {
    return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

// The small FFN at `tokens`, saving h (tokens × 8) as well as y (tokens × 4).
ir::Graph ffn_saving_h(int64_t tokens) {
    v1::GraphDef graph = graphdef::parse_text(testing::kFfn).value();
    graph.add_saved("h");
    return graphdef::build_graph(graph, {{"tokens", tokens}}).value();
}

TEST(BatchLayout, TheBatchDimensionGrowsBySlotsAndEverySlotKeepsItsSequences) {
    absl::StatusOr<BatchLayout> layout =
        BatchLayout::make("m", "tokens", {{"d", 2}, {"tokens", 3}}, {1, 3}, 2, 4);
    ASSERT_TRUE(layout.ok()) << layout.status();
    EXPECT_EQ(layout->requests(), 2);
    EXPECT_EQ(layout->slots(), 4);
    EXPECT_EQ(layout->bindings(), (graphdef::Bindings{{"d", 2}, {"tokens", 12}}));
    EXPECT_THAT(layout->sequence_ends(), ElementsAre(1, 3, 4, 6, 7, 9, 10, 12));

    absl::StatusOr<BatchLayout> plain = BatchLayout::make("m", "tokens", {{"tokens", 3}}, {}, 1, 1);
    ASSERT_TRUE(plain.ok()) << plain.status();
    EXPECT_EQ(plain->bindings(), (graphdef::Bindings{{"tokens", 3}}));
    EXPECT_THAT(plain->sequence_ends(), IsEmpty());
}

TEST(BatchLayout, ABatchPastTheLargestDimensionIsRefused) {
    const int64_t length = kMaxDimensionSize / 2 + 1;
    absl::Status status =
        BatchLayout::make("m", "tokens", {{"tokens", length}}, {length}, 2, 2).status();
    EXPECT_TRUE(absl::IsResourceExhausted(status));
    EXPECT_EQ(status.message(),
              absl::StrCat("model 'm': a batch of 2 requests of 'tokens' = ", length,
                           " exceeds the largest dimension, ", kMaxDimensionSize));
    EXPECT_TRUE(
        BatchLayout::make("m", "tokens", {{"tokens", length - 1}}, {length - 1}, 2, 2).ok());
}

TEST(BatchLayout, InputsPackEndToEndAndIdleSlotsRepeatTheLastRequest) {
    const BatchLayout layout = BatchLayout::make("m", "t", {{"t", 1}}, {1}, 2, 4).value();
    const std::vector<absl::string_view> inputs = {"ab", "cd"};
    EXPECT_EQ(text_of(layout.pack(inputs)), "abcdcdcd");

    const BatchLayout full = BatchLayout::make("m", "t", {{"t", 1}}, {1}, 3, 3).value();
    const std::vector<absl::string_view> three = {"ab", "cd", "ef"};
    EXPECT_EQ(text_of(full.pack(three)), "abcdef");
}

TEST(BatchLayout, OutputsSplitIntoEachSlotsRows) {
    const BatchLayout layout = BatchLayout::make("m", "t", {{"t", 1}}, {1}, 2, 3).value();
    const std::vector<std::byte> output = bytes_of("aabbcc");
    EXPECT_EQ(text_of(layout.rows(output, 0)), "aa");
    EXPECT_EQ(text_of(layout.rows(output, 1)), "bb");
    EXPECT_EQ(text_of(layout.rows(output, 2)), "cc");
}

TEST(BatchLayout, ABatchOffloadsTheUnionOfWhatItsRequestsAskForInGraphOrder) {
    const ir::Graph graph = ffn_saving_h(2);
    const std::vector<std::string> y = {"y"};
    const std::vector<std::string> y_and_h = {"y", "h"};
    const std::vector<std::string> none;
    EXPECT_THAT(BatchLayout::outputs(graph, {&y}), ElementsAre("y"));
    EXPECT_THAT(BatchLayout::outputs(graph, {&y, &y_and_h}), ElementsAre("h", "y"));
    EXPECT_THAT(BatchLayout::outputs(graph, {&none}), IsEmpty());
}

TEST(BatchLayout, AReplyTensorHasOneRequestsRows) {
    const ir::Graph graph = ffn_saving_h(4);
    const ir::GraphTensor& y = graph.tensor(*graph.find_tensor("y"));
    const std::vector<std::byte> bytes = bytes_of("0123456789abcdef");
    v1::NamedTensor out;
    set_output(&out, y, 2, bytes);
    EXPECT_EQ(out.name(), "y");
    EXPECT_EQ(out.tensor().dtype(), v1::F32);
    EXPECT_THAT(out.tensor().shape(), ElementsAre(2, testing::kModel));
    EXPECT_EQ(out.tensor().data(), "0123456789abcdef");

    v1::NamedTensor alone;
    set_output(&alone, y, 1, bytes);
    EXPECT_THAT(alone.tensor().shape(), ElementsAre(4, testing::kModel));
}

TEST(BatchLayout, OutputsComeInTheOrderTheRequestAskedFor) {
    v1::ExecuteResponse response;
    response.add_outputs()->set_name("h");
    response.add_outputs()->set_name("y");
    order_outputs(response, {"y", "h"});
    ASSERT_EQ(response.outputs_size(), 2);
    EXPECT_EQ(response.outputs(0).name(), "y");
    EXPECT_EQ(response.outputs(1).name(), "h");
}

} // namespace
} // namespace einsummable::server
