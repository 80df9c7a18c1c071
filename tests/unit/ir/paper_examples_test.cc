// The examples of the Einsummable paper (sections 3 and 4), as tests.

#include <random>

#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/spec_execution.h"
#include "gtest/gtest.h"

namespace einsummable::ir {
namespace {

TensorType f32(std::vector<Dim> dims) {
    return TensorType{DType::f32, std::move(dims)};
}

OperatorPtr paper_matmul() {
    absl::StatusOr<OperatorPtr> op =
        make_matmul(f32({{"i", 256}, {"j", 512}}), f32({{"j", 512}, {"k", 256}}));
    EXPECT_TRUE(op.ok()) << op.status();
    return *std::move(op);
}

std::vector<HostTensor> random_inputs(const Operator& op, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<HostTensor> inputs;
    for (const TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng));
    }
    return inputs;
}

void expect_spec_matches_whole(const Operator& op, const JoinAggSpec& spec, uint64_t seed) {
    const std::vector<HostTensor> inputs = random_inputs(op, seed);
    absl::StatusOr<std::vector<HostTensor>> split = execute_spec(op, spec, inputs);
    absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(op, inputs);
    ASSERT_TRUE(split.ok()) << split.status();
    ASSERT_TRUE(whole.ok()) << whole.status();
    EXPECT_LE(max_relative_error((*split)[0], (*whole)[0]), 1e-12);
}

TEST(PaperExamples, MatmulSplitOnTheContractedIndexIsAJoinThenSum) {
    const OperatorPtr op = paper_matmul();
    // Shardable indices i, j, k; split j (the contracted index) in two.
    ASSERT_EQ(op->shardable_indices().size(), 3u);
    EXPECT_EQ(op->shardable_indices()[1].name, "j");
    const absl::StatusOr<JoinAggSpec> spec =
        op->spec({{{0, 256}}, {{0, 256}, {256, 512}}, {{0, 256}}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 2u);
    EXPECT_EQ(spec->aggregations, (std::vector<AggOp>{AggOp::sum}));
    EXPECT_EQ(spec->output_tiling(0), (std::vector<Box>{Box({{0, 256}, {0, 256}})}));
    EXPECT_EQ(spec->functions[0].inputs[0], Box({{0, 256}, {0, 256}}));
    EXPECT_EQ(spec->functions[1].inputs[0], Box({{0, 256}, {256, 512}}));
    EXPECT_EQ(spec->functions[1].inputs[1], Box({{256, 512}, {0, 256}}));
    EXPECT_DOUBLE_EQ(op->flops(spec->functions[0]), 2.0 * 256 * 256 * 256);
    expect_spec_matches_whole(*op, *spec, 1);
}

TEST(PaperExamples, MatmulSplitOnIAndJHasFourFunctionsAndTwoOutputBoxes) {
    const OperatorPtr op = paper_matmul();
    const absl::StatusOr<JoinAggSpec> spec =
        op->spec({{{0, 128}, {128, 256}}, {{0, 256}, {256, 512}}, {{0, 256}}});
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 4u);
    const std::vector<Box> tiling = spec->output_tiling(0);
    ASSERT_EQ(tiling.size(), 2u);
    EXPECT_EQ(tiling[0], Box({{0, 128}, {0, 256}}));
    EXPECT_EQ(tiling[1], Box({{128, 256}, {0, 256}}));
    int copies_of_first = 0;
    for (const FunctionSpec& function : spec->functions) {
        copies_of_first += function.outputs[0] == tiling[0] ? 1 : 0;
    }
    EXPECT_EQ(copies_of_first, 2) << "each output box is produced twice and summed";
    expect_spec_matches_whole(*op, *spec, 2);
}

OperatorPtr gqa(int64_t sequence, std::vector<int64_t> sequence_ends, bool causal) {
    const Dim seq{"sequence", sequence};
    absl::StatusOr<OperatorPtr> op = make_operator(
        "attention", {{"causal", causal}, {"sequence_ends", sequence_ends}},
        {f32({seq, {"heads_q", 32}, {"d_head", 8}}), f32({seq, {"heads_kv", 8}, {"d_head", 8}}),
         f32({seq, {"heads_kv", 8}, {"d_head", 8}})});
    EXPECT_TRUE(op.ok()) << op.status();
    return *std::move(op);
}

TEST(PaperExamples, GroupedQueryAttentionShardsQueryHeadsThroughKvHeads) {
    const OperatorPtr op = gqa(16, {16}, true);
    const std::vector<ShardableIndex> indices = op->shardable_indices();
    ASSERT_EQ(indices.size(), 3u);
    EXPECT_EQ(indices[1].name, "heads_kv");
    EXPECT_EQ(indices[1].size, 8) << "heads_q is not an index of its own";
    EXPECT_EQ(indices[2].name, "keys");
    IntervalRequest request = {{{0, 16}}, {}, {{0, 16}}};
    for (int64_t m = 0; m < 8; ++m) {
        request[1].push_back({m, m + 1});
    }
    const absl::StatusOr<JoinAggSpec> spec = op->spec(request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_EQ(spec->functions.size(), 8u);
    for (int64_t m = 0; m < 8; ++m) {
        const FunctionSpec& function = spec->functions[m];
        EXPECT_EQ(function.inputs[0][1], (Interval{4 * m, 4 * m + 4})) << "queries of spec " << m;
        EXPECT_EQ(function.inputs[1][1], (Interval{m, m + 1})) << "keys of spec " << m;
        EXPECT_EQ(function.inputs[2][1], (Interval{m, m + 1})) << "values of spec " << m;
        EXPECT_EQ(function.outputs[0][1], (Interval{4 * m, 4 * m + 4}));
    }
    expect_spec_matches_whole(*op, *spec, 3);

    // Every kernel checks the blocks it is given against this layout (has_spec_layout).
    const auto& attention = dynamic_cast<const Attention&>(*op);
    for (const FunctionSpec& function : spec->functions) {
        EXPECT_TRUE(attention.has_spec_layout(function));
    }
    FunctionSpec shifted = spec->functions[1];
    shifted.inputs[0] = Box({{0, 16}, {0, 4}, {0, 8}}); // kv head 1 with query heads of kv head 0
    EXPECT_FALSE(attention.has_spec_layout(shifted));
    FunctionSpec rows = spec->functions[0];
    rows.inputs[1] = Box({{0, 8}, {0, 1}, {0, 8}}); // keys on other rows than the values
    EXPECT_FALSE(attention.has_spec_layout(rows));
    rows.inputs[2] = Box({{0, 8}, {0, 1}, {0, 8}}); // a block of keys: a partial result
    EXPECT_TRUE(attention.has_spec_layout(rows));
    FunctionSpec missing = spec->functions[0];
    missing.inputs.pop_back();
    EXPECT_FALSE(attention.has_spec_layout(missing));
}

// Positions are absolute, so queries and keys may be cut inside a packed sequence; a
// (query block, key block) pair no query of which attends to a key of the other is left out.
TEST(PaperExamples, PackedSequenceIsCutAnywhereAndPairsWithoutWorkAreLeftOut) {
    const OperatorPtr op = gqa(4096, {1024, 2560, 4096}, true);
    const std::vector<ShardableIndex> indices = op->shardable_indices();
    EXPECT_TRUE(indices[0].any_position);
    EXPECT_TRUE(indices[2].any_position);

    const absl::StatusOr<JoinAggSpec> mid_sequence =
        op->spec({{{0, 2000}, {2000, 4096}}, {{0, 8}}, {{0, 4096}}});
    ASSERT_TRUE(mid_sequence.ok()) << mid_sequence.status();
    EXPECT_EQ(mid_sequence->functions.size(), 2u);
    expect_spec_matches_whole(*op, *mid_sequence, 4);

    // Key blocks at the sequence ends: each query block meets only its own sequence's keys.
    const absl::StatusOr<JoinAggSpec> at_ends = op->spec({{{0, 1024}, {1024, 2560}, {2560, 4096}},
                                                          {{0, 4}, {4, 8}},
                                                          {{0, 1024}, {1024, 2560}, {2560, 4096}}});
    ASSERT_TRUE(at_ends.ok()) << at_ends.status();
    EXPECT_EQ(at_ends->functions.size(), 6u) << "3 sequences x 2 head blocks; 12 pairs left out";
    for (const FunctionSpec& function : at_ends->functions) {
        EXPECT_EQ(function.inputs[0][0], function.inputs[1][0]);
    }
    expect_spec_matches_whole(*op, *at_ends, 5);

    // Causal key blocks inside one sequence: the pair above the diagonal is left out, and the
    // query block [1024, 2560) meets both key blocks, so its output box is aggregated.
    const absl::StatusOr<JoinAggSpec> causal =
        op->spec({{{0, 1024}, {1024, 2560}, {2560, 4096}}, {{0, 8}}, {{0, 1800}, {1800, 4096}}});
    ASSERT_TRUE(causal.ok()) << causal.status();
    EXPECT_EQ(causal->aggregations[0], AggOp::log_sum_exp);
    EXPECT_EQ(causal->functions.size(), 4u)
        << "(q0,k0) (q1,k0) (q1,k1) (q2,k1); q0 has no key past 1800, q2 none before 2560";
    expect_spec_matches_whole(*op, *causal, 6);
}

TEST(PaperExamples, RopeRestartsPositionsAtEachPackedSequence) {
    absl::StatusOr<OperatorPtr> op =
        make_operator("rope", {{"sequence_ends", std::vector<int64_t>{3, 8}}},
                      {f32({{"tokens", 8}, {"heads", 2}, {"d_head", 4}})});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<HostTensor> inputs = random_inputs(**op, 5);
    // A block holding only tokens [3, 8): it must read its absolute positions from its box.
    const FunctionSpec block = (*op)->spec({{{0, 3}, {3, 8}}, {{0, 2}}})->functions[1];
    ASSERT_EQ(block.inputs[0][0], (Interval{3, 8}));
    absl::StatusOr<std::vector<HostTensor>> out =
        (*op)->reference({inputs[0].slice(block.inputs[0])}, block);
    ASSERT_TRUE(out.ok()) << out.status();
    // Token 3 starts the second sequence: position 0, no rotation.
    for (int64_t head = 0; head < 2; ++head) {
        for (int64_t d = 0; d < 4; ++d) {
            EXPECT_DOUBLE_EQ((*out)[0].at({3, head, d}), inputs[0].at({3, head, d}));
        }
    }
    // Token 4 is at position 1: rotated, so not equal.
    EXPECT_NE((*out)[0].at({4, 0, 0}), inputs[0].at({4, 0, 0}));
}

} // namespace
} // namespace einsummable::ir
