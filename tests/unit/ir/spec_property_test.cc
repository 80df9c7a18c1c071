// The core property of the join-agg model (docs/design.md "Join-agg specs"): for every operator and
// every spec, join + aggregate + recompose equals the operator on whole tensors, and the distinct
// output boxes of the spec tile the output. Seeded; the seed is printed and EINSUMMABLE_TEST_SEED
// replays a run.

#include <iostream>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/spec_execution.h"
#include "gtest/gtest.h"
#include "tests/unit/ir/random_cases.h"

namespace einsummable::ir {
namespace {

constexpr int kCasesPerOperator = 300;

class SpecProperty : public ::testing::TestWithParam<std::string> {};

TEST_P(SpecProperty, ExecutedSpecEqualsWholeOperator) {
    const std::string kind = GetParam();
    const uint64_t seed = testing::test_seed();
    std::cout << "spec property for '" << kind << "': seed " << seed
              << " (set EINSUMMABLE_TEST_SEED to replay)\n";
    int64_t total_functions = 0;
    for (int case_idx = 0; case_idx < kCasesPerOperator; ++case_idx) {
        std::mt19937_64 rng(seed * 1000003 + case_idx);
        testing::RandomCase random = testing::random_case(kind, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        const Operator& op = *random.op;
        const std::vector<ShardableIndex> indices = op.shardable_indices();
        const IntervalRequest request = testing::random_request(indices, rng);
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description,
                                  " split ", request_to_string(indices, request)));

        absl::StatusOr<JoinAggSpec> spec = op.spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        size_t expected_functions = 1;
        for (const std::vector<Interval>& intervals : request) {
            expected_functions *= intervals.size();
        }
        // One function per combination, less those an operator leaves out for doing no work
        // (attention's key blocks above the diagonal); the FLOPs check below sees that no work
        // is lost.
        ASSERT_LE(spec->functions.size(), expected_functions);
        ASSERT_GE(spec->functions.size(), spec->output_tiling(0).size());
        ASSERT_EQ(static_cast<int>(spec->aggregations.size()), op.num_outputs());
        for (int output_idx = 0; output_idx < op.num_outputs(); ++output_idx) {
            const absl::Status tiles =
                check_tiles(spec->output_tiling(output_idx), op.output_types()[output_idx].box());
            EXPECT_TRUE(tiles.ok()) << "output " << output_idx << ": " << tiles;
        }
        total_functions += static_cast<int64_t>(spec->functions.size());

        absl::StatusOr<std::vector<HostTensor>> whole = execute_whole(op, random.inputs);
        ASSERT_TRUE(whole.ok()) << whole.status();
        absl::StatusOr<std::vector<HostTensor>> split = execute_spec(op, *spec, random.inputs);
        ASSERT_TRUE(split.ok()) << split.status();
        ASSERT_EQ(split->size(), whole->size());
        for (size_t output_idx = 0; output_idx < whole->size(); ++output_idx) {
            EXPECT_LE(max_relative_error((*split)[output_idx], (*whole)[output_idx]), 1e-9)
                << "output " << output_idx;
        }
        // Every function spec's FLOPs are counted, and together they cover the whole operator's
        // at least once (splitting never loses work).
        double split_flops = 0.0;
        for (const FunctionSpec& function : spec->functions) {
            ASSERT_GE(op.flops(function), 0.0);
            split_flops += op.flops(function);
        }
        EXPECT_GE(split_flops + 1e-9, op.flops(op.whole_spec().functions[0]));
        if (HasFatalFailure()) {
            return;
        }
    }
    std::cout << "  " << kCasesPerOperator << " cases, " << total_functions
              << " function specs executed\n";
}

std::vector<std::string> all_kinds() {
    std::vector<std::string> kinds;
    for (const OperatorKind& kind : operator_kinds()) {
        kinds.emplace_back(kind.name);
    }
    return kinds;
}

INSTANTIATE_TEST_SUITE_P(EveryOperator, SpecProperty, ::testing::ValuesIn(all_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

} // namespace
} // namespace einsummable::ir
