// The CUDA row-wise kernels (kernels/cuda/rowwise.cc) and the flash attention fallback
// (kernels/cuda/attention_flash.cc) against the CPU kernels, in every storage dtype: seeded
// random cases of every row-wise kind and of attention with random function specs, then
// targeted cases — rows long enough for CTA-wide reductions, RoPE at large positions and
// mid-sequence, GQA 32/8, causal masks over packed sequences, blocks that start mid-sequence,
// head dimensions 64 to 256, paged attention against ir::Attention::compute_partial. GPU tests
// skip without a GPU; the registry and argument checks and the work lists run anywhere. Replay a
// failure with the EINSUMMABLE_TEST_SEED that seed_for prints.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/partial_block.h"
#include "gtest/gtest.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_flash.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/cuda/kernel.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/cuda_kernel_harness.h"

namespace einsummable::kernels::cuda {
namespace {

namespace harness = ::einsummable::kernels::cuda::testing;

using ir::Box;
using ir::DType;
using ir::HostTensor;

// Every registered operator kind but einsum and attention, whose kernels have random tests of
// their own (cuda_einsum_generic_test.cc, cuda_library_kernels_test.cc, and attention's below):
// today the row-wise kinds, and any new operator's CUDA kernel without an edit here.
std::vector<std::string> random_tested_kinds() {
    std::vector<std::string> kinds;
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        if (kind.name != ir::Einsum::kKind && kind.name != ir::Attention::kKind) {
            kinds.emplace_back(kind.name);
        }
    }
    return kinds;
}
const std::vector<std::string> kRowwiseKinds = random_tested_kinds();
const std::vector<DType> kDTypes = {DType::f16, DType::bf16, DType::f32, DType::f64};

using ::einsummable::kernels::cuda::testing::blocks_of;
using ::einsummable::kernels::cuda::testing::first_mismatch;
using ::einsummable::kernels::cuda::testing::function_string;
using ::einsummable::kernels::cuda::testing::seed_for;

// Runs `function` through `factory` on the GPU and through the CPU kernel in `dtype`, and
// expects the same outputs within the dtype's tolerance.
void expect_matches_cpu(const CudaKernelFactory& factory, const ir::Operator& op,
                        const std::vector<HostTensor>& whole, const ir::FunctionSpec& function,
                        DType dtype) {
    SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " function ", function_string(function)));
    const harness::Blocks inputs = blocks_of(whole, function);
    absl::StatusOr<harness::Blocks> expected = harness::run_cpu(op, function, dtype, inputs);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<harness::Blocks> actual =
        harness::run_cuda_with(factory, op, function, dtype, inputs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const harness::Tolerance tolerance = harness::tolerance_for(dtype);
    const double error = harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol);
    EXPECT_LE(error, 1.0) << first_mismatch(*actual, *expected, tolerance);
}

// Up to `count` function specs of a random request of `op`, and sometimes the whole spec.
std::vector<ir::FunctionSpec> random_functions(const ir::Operator& op, std::mt19937_64& rng,
                                               size_t count) {
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(ir::testing::random_request(indices, rng));
    EXPECT_TRUE(spec.ok()) << spec.status();
    if (!spec.ok()) {
        return {};
    }
    std::vector<ir::FunctionSpec> functions = spec->functions;
    std::shuffle(functions.begin(), functions.end(), rng);
    functions.resize(std::min(functions.size(), count));
    if (std::uniform_int_distribution<int>(0, 4)(rng) == 0) {
        functions.push_back(op.whole_spec().functions[0]);
    }
    return functions;
}

ir::OperatorPtr make_op(absl::string_view kind, const ir::Attributes& attributes,
                        std::vector<ir::TensorType> inputs) {
    absl::StatusOr<ir::OperatorPtr> op = ir::make_operator(kind, attributes, std::move(inputs));
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

std::vector<HostTensor> random_inputs(const ir::Operator& op, std::mt19937_64& rng,
                                      double low = -1.0, double high = 1.0) {
    std::vector<HostTensor> inputs;
    for (const ir::TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng, low, high));
    }
    return inputs;
}

// Every function spec of `request`, then the whole operator, in every dtype.
void expect_every_function_matches(const CudaKernelFactory& factory, const ir::Operator& op,
                                   const std::vector<HostTensor>& inputs,
                                   const ir::IntervalRequest& request) {
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    std::vector<ir::FunctionSpec> functions = spec->functions;
    functions.push_back(op.whole_spec().functions[0]);
    for (DType dtype : kDTypes) {
        for (const ir::FunctionSpec& function : functions) {
            expect_matches_cpu(factory, op, inputs, function, dtype);
            if (::testing::Test::HasFailure()) {
                return; // the first failure is the one worth reading
            }
        }
    }
}

// ---- without a GPU ----------------------------------------------------------------------------

TEST(CudaRowwiseRegistryTest, EveryRowwiseKindIsRegistered) {
    for (const std::string& kind : kRowwiseKinds) {
        EXPECT_NE(cuda_kernels().find(kind), nullptr) << kind;
    }
}

// Factories that need no device check their arguments before touching CUDA, so these run
// anywhere.
TEST(CudaRowwiseRegistryTest, MixedDtypesAreRefusedNamingTheOperator) {
    ir::OperatorPtr op =
        make_op("softmax", {{"axis", int64_t{-1}}}, {{DType::f32, {{"rows", 4}, {"cols", 8}}}});
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    DeviceLibraries libraries(0);
    KernelRequest request{op.get(), &function, {DType::bf16}, {DType::f32}, &libraries};
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_kernel(request);
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), op->describe())) << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "bf16")) << kernel.status();
}

TEST(CudaRowwiseRegistryTest, BlocksOfDifferentHeadsAreRefused) {
    ir::OperatorPtr op =
        make_op("split_heads", {{"heads", int64_t{4}}}, {{DType::f32, {{"t", 3}, {"hd", 8}}}});
    ASSERT_NE(op, nullptr);
    // Heads [0, 2) of the output, but the input block holds three heads' worth.
    const ir::FunctionSpec function{{Box({{0, 3}, {0, 6}})}, {Box({{0, 3}, {0, 2}, {0, 2}})}};
    DeviceLibraries libraries(0);
    const CudaKernelFactory* factory = cuda_kernels().find("split_heads");
    ASSERT_NE(factory, nullptr);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        (*factory)({op.get(), &function, {DType::f32}, {DType::f32}, &libraries});
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "do not hold the same heads"))
        << kernel.status();
}

TEST(CudaRowwiseRegistryTest, FlashAttentionRefusesOtherOperators) {
    ir::OperatorPtr op =
        make_op("softmax", {{"axis", int64_t{-1}}}, {{DType::f32, {{"rows", 4}, {"cols", 8}}}});
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    DeviceLibraries libraries(0);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_flash_attention({op.get(), &function, {DType::f32}, {DType::f32}, &libraries});
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), op->describe())) << kernel.status();
}

// ---- row-wise kinds on random cases -----------------------------------------------------------

class RowwiseRandomTest : public ::testing::TestWithParam<std::tuple<std::string, DType>> {};

TEST_P(RowwiseRandomTest, RandomFunctionSpecsMatchCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const auto& [kind, dtype] = GetParam();
    const uint64_t seed = seed_for(absl::StrCat(kind, ir::dtype_name(dtype)));
    std::mt19937_64 rng(seed);
    for (int case_idx = 0; case_idx < 40; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case(kind, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        for (const ir::FunctionSpec& function : random_functions(*random.op, rng, 3)) {
            expect_matches_cpu(&prepare_kernel, *random.op, random.inputs, function, dtype);
        }
        if (HasFailure()) {
            return;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(CudaKernels, RowwiseRandomTest,
                         ::testing::Combine(::testing::ValuesIn(kRowwiseKinds),
                                            ::testing::ValuesIn(kDTypes)),
                         [](const ::testing::TestParamInfo<std::tuple<std::string, DType>>& info) {
                             return absl::StrCat(std::get<0>(info.param), "_",
                                                 ir::dtype_name(std::get<1>(info.param)));
                         });

// ---- row-wise kinds, targeted -----------------------------------------------------------------

// Rows longer than a warp takes (CTA-wide reductions), along the last axis and a middle one,
// with values large enough that exp overflows f32 unless the maximum is subtracted first.
TEST(CudaSoftmaxTest, LongRowsAndStridedAxes) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("softmax long rows");
    std::mt19937_64 rng(seed);
    struct Case {
        std::vector<int64_t> shape;
        int64_t axis;
    };
    for (const Case& c : {Case{{3, 5000}, -1}, Case{{4, 700, 3}, 1}, Case{{300, 7}, 0},
                          Case{{2, 257}, 1}, Case{{1, 256}, 1}}) {
        ir::TensorType type{DType::f32, {}};
        for (size_t dim = 0; dim < c.shape.size(); ++dim) {
            type.dims.push_back({absl::StrCat("d", dim), c.shape[dim]});
        }
        ir::OperatorPtr op = make_op("softmax", {{"axis", c.axis}}, {type});
        ASSERT_NE(op, nullptr);
        SCOPED_TRACE(op->describe() + " on " + type.to_string());
        const std::vector<HostTensor> inputs = random_inputs(*op, rng, -100.0, 100.0);
        ir::IntervalRequest request;
        for (const ir::ShardableIndex& index : op->shardable_indices()) {
            request.push_back(index.size > 1 ? std::vector<ir::Interval>{{0, 1}, {1, index.size}}
                                             : std::vector<ir::Interval>{{0, index.size}});
        }
        expect_every_function_matches(&prepare_kernel, *op, inputs, request);
    }
}

TEST(CudaNormTest, LongRowsWithAndWithoutBeta) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("norms long rows");
    std::mt19937_64 rng(seed);
    for (int64_t length : {int64_t{4096}, int64_t{1000}, int64_t{300}}) {
        const ir::TensorType x{DType::f32, {{"tokens", 5}, {"heads", 2}, {"d", length}}};
        const ir::TensorType param{DType::f32, {{"d", length}}};
        for (const auto& [kind, inputs] :
             std::vector<std::pair<std::string, std::vector<ir::TensorType>>>{
                 {"rmsnorm", {x, param}},
                 {"layernorm", {x, param}},
                 {"layernorm", {x, param, param}}}) {
            ir::OperatorPtr op = make_op(kind, {{"eps", 1e-5}}, inputs);
            ASSERT_NE(op, nullptr);
            SCOPED_TRACE(
                absl::StrCat(op->describe(), " with ", inputs.size(), " inputs, d ", length));
            // A mean far from zero against a spread of one checks that the variance does not
            // cancel.
            const std::vector<HostTensor> values = random_inputs(*op, rng, 5.0, 7.0);
            expect_every_function_matches(&prepare_kernel, *op, values,
                                          {{{0, 2}, {2, 5}}, {{0, 1}, {1, 2}}});
        }
    }
}

// Positions in the thousands (angles the f32 path would get wrong), a block that starts in the
// middle of a sequence, and head dimensions 128 and 256.
TEST(CudaRopeTest, LargePositionsAndBlocksStartingMidSequence) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("rope large positions");
    std::mt19937_64 rng(seed);
    for (int64_t head_dim : {int64_t{128}, int64_t{256}}) {
        const ir::TensorType x{DType::f32, {{"tokens", 4096}, {"heads", 4}, {"d_head", head_dim}}};
        ir::OperatorPtr op = make_op(
            "rope", {{"theta", 10000.0}, {"sequence_ends", std::vector<int64_t>{1000, 4096}}}, {x});
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng);
        for (DType dtype : kDTypes) {
            // Tokens [2000, 4096): positions 1000..3095 of the sequence that starts at 1000.
            expect_matches_cpu(&prepare_kernel, *op, inputs,
                               {{Box({{2000, 4096}, {1, 3}, {0, head_dim}})},
                                {Box({{2000, 4096}, {1, 3}, {0, head_dim}})}},
                               dtype);
            expect_matches_cpu(&prepare_kernel, *op, inputs,
                               {{Box({{997, 1003}, {0, 4}, {0, head_dim}})},
                                {Box({{997, 1003}, {0, 4}, {0, head_dim}})}},
                               dtype);
            if (HasFailure()) {
                return;
            }
        }
        expect_matches_cpu(&prepare_kernel, *op, inputs, op->whole_spec().functions[0], DType::f32);
    }
}

TEST(CudaHeadsLayoutTest, SplitAndMergeBlocksOfHeads) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("heads layout");
    std::mt19937_64 rng(seed);
    ir::OperatorPtr split =
        make_op("split_heads", {{"heads", int64_t{8}}}, {{DType::f32, {{"t", 300}, {"hd", 512}}}});
    ir::OperatorPtr merge =
        make_op("merge_heads", {}, {{DType::f32, {{"t", 300}, {"heads", 8}, {"d_head", 64}}}});
    ASSERT_NE(split, nullptr);
    ASSERT_NE(merge, nullptr);
    const ir::IntervalRequest request = {{{0, 123}, {123, 300}}, {{0, 2}, {2, 5}, {5, 8}}};
    expect_every_function_matches(&prepare_kernel, *split, random_inputs(*split, rng), request);
    expect_every_function_matches(&prepare_kernel, *merge, random_inputs(*merge, rng), request);
}

// ---- flash attention --------------------------------------------------------------------------

ir::OperatorPtr make_attention(int64_t sequence, int64_t heads_kv, int64_t group, int64_t head_dim,
                               int64_t value_dim, bool causal, std::vector<int64_t> ends,
                               double scale = 0.0) {
    const ir::Dim seq{"sequence", sequence};
    const ir::TensorType q{DType::f32, {seq, {"heads_q", heads_kv * group}, {"d_head", head_dim}}};
    const ir::TensorType k{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_head", head_dim}}};
    const ir::TensorType v{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_v", value_dim}}};
    ir::Attributes attributes = {{"causal", causal}, {"sequence_ends", std::move(ends)}};
    if (scale != 0.0) {
        attributes.set("scale", scale);
    }
    return make_op("attention", attributes, {q, k, v});
}

class FlashAttentionRandomTest : public ::testing::TestWithParam<DType> {};

TEST_P(FlashAttentionRandomTest, RandomFunctionSpecsMatchCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const DType dtype = GetParam();
    const uint64_t seed = seed_for(absl::StrCat("flash attention ", ir::dtype_name(dtype)));
    std::mt19937_64 rng(seed);
    for (int case_idx = 0; case_idx < 60; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case("attention", rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        for (const ir::FunctionSpec& function : random_functions(*random.op, rng, 3)) {
            expect_matches_cpu(&prepare_flash_attention, *random.op, random.inputs, function,
                               dtype);
        }
        if (HasFailure()) {
            return;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(CudaKernels, FlashAttentionRandomTest, ::testing::ValuesIn(kDTypes),
                         [](const ::testing::TestParamInfo<DType>& info) {
                             return std::string(ir::dtype_name(info.param));
                         });

TEST(FlashAttentionTest, Gqa32QueryHeadsOver8KvHeads) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash gqa 32/8");
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = make_attention(150, 8, 4, 128, 128, causal, {150});
        ASSERT_NE(op, nullptr);
        expect_every_function_matches(&prepare_flash_attention, *op, random_inputs(*op, rng),
                                      {{{0, 150}}, {{0, 3}, {3, 8}}});
    }
}

TEST(FlashAttentionTest, CausalPackedSequencesSplitAtSequenceEnds) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash packed sequences");
    std::mt19937_64 rng(seed);
    // Sequences longer than a tile of queries and of keys, and one of a single token.
    const std::vector<int64_t> ends = {37, 110, 111, 250};
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = make_attention(250, 2, 3, 64, 24, causal, ends);
        ASSERT_NE(op, nullptr);
        expect_every_function_matches(&prepare_flash_attention, *op, random_inputs(*op, rng),
                                      {{{0, 37}, {37, 111}, {111, 250}}, {{0, 1}, {1, 2}}});
    }
}

// A block may start and end inside a sequence: the CPU kernel clips each sequence to the
// block's rows (Attention::key_range), and so must the GPU.
TEST(FlashAttentionTest, BlockStartingMidSequence) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash mid sequence");
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = make_attention(250, 4, 2, 64, 64, causal, {10, 100, 250});
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng);
        const ir::FunctionSpec function{{Box({{17, 190}, {2, 6}, {0, 64}}),
                                         Box({{17, 190}, {1, 3}, {0, 64}}),
                                         Box({{17, 190}, {1, 3}, {0, 64}})},
                                        {Box({{17, 190}, {2, 6}, {0, 64}})}};
        for (DType dtype : kDTypes) {
            expect_matches_cpu(&prepare_flash_attention, *op, inputs, function, dtype);
        }
    }
}

// Attention split along its keys: the work list gives each tile of queries the rows
// of the key block it attends to, clipped to its sequence and, when causal, to its last query.
TEST(FlashAttentionWorkTest, ItemsClipKeyBlocksToSequencesAndCausality) {
    ir::OperatorPtr causal = make_attention(250, 2, 3, 8, 8, true, {37, 110, 111, 250});
    ir::OperatorPtr bidirectional = make_attention(250, 2, 3, 8, 8, false, {37, 110, 111, 250});
    ASSERT_NE(causal, nullptr);
    ASSERT_NE(bidirectional, nullptr);
    // Queries [50, 180) over keys [20, 120): three sequences meet the query block.
    const ir::FunctionSpec function{{Box({{50, 180}, {0, 6}, {0, 8}}),
                                     Box({{20, 120}, {0, 2}, {0, 8}}),
                                     Box({{20, 120}, {0, 2}, {0, 8}})},
                                    {Box({{50, 180}, {0, 6}, {0, 8}})}};
    auto items_of = [&](const ir::Operator& op) {
        std::vector<std::vector<int32_t>> items;
        for (const FlashWorkItem& item :
             flash_work_items(dynamic_cast<const ir::Attention&>(op), function, 32)) {
            items.push_back({item.row_begin, item.row_end, item.key_begin, item.key_end});
        }
        return items;
    };
    // Rows count from 50, keys from 20. Sequence [37, 110) in two tiles of queries, causal keys
    // up to each tile's end; the one-token sequence 110; sequence [111, 250) cut at the key
    // block's end, 120.
    const std::vector<std::vector<int32_t>> causal_items = {
        {0, 32, 17, 62},   {32, 60, 17, 90},   {60, 61, 90, 91},
        {61, 93, 91, 100}, {93, 125, 91, 100}, {125, 130, 91, 100}};
    EXPECT_EQ(items_of(*causal), causal_items);
    const std::vector<std::vector<int32_t>> bidirectional_items = {
        {0, 32, 17, 90},   {32, 60, 17, 90},   {60, 61, 90, 91},
        {61, 93, 91, 100}, {93, 125, 91, 100}, {125, 130, 91, 100}};
    EXPECT_EQ(items_of(*bidirectional), bidirectional_items);

    // Causal queries before every key of the block see none: empty key ranges.
    const ir::FunctionSpec before{{Box({{40, 60}, {0, 6}, {0, 8}}),
                                   Box({{70, 100}, {0, 2}, {0, 8}}),
                                   Box({{70, 100}, {0, 2}, {0, 8}})},
                                  {Box({{40, 60}, {0, 6}, {0, 8}})}};
    for (const FlashWorkItem& item :
         flash_work_items(dynamic_cast<const ir::Attention&>(*causal), before, 32)) {
        EXPECT_EQ(item.key_begin, item.key_end) << item.row_begin;
    }
}

// Each function's partial result (output and log-sum-exp) from the flash kernel matches the CPU
// kernel's in every dtype; stops at the first dtype that fails.
void expect_partials_match_cpu(const ir::Operator& op, const std::vector<HostTensor>& whole,
                               const std::vector<ir::FunctionSpec>& functions) {
    for (DType dtype : kDTypes) {
        const harness::Tolerance tolerance = harness::tolerance_for(dtype);
        for (const ir::FunctionSpec& function : functions) {
            SCOPED_TRACE(
                absl::StrCat(ir::dtype_name(dtype), " function ", function_string(function)));
            const harness::Blocks inputs = blocks_of(whole, function);
            absl::StatusOr<harness::Blocks> expected =
                harness::run_cpu_partial(op, function, dtype, inputs);
            ASSERT_TRUE(expected.ok()) << expected.status();
            absl::StatusOr<harness::Blocks> actual =
                harness::run_cuda_partial(&prepare_flash_attention, op, function, dtype, inputs);
            ASSERT_TRUE(actual.ok()) << actual.status();
            ASSERT_EQ(actual->size(), 2u);
            EXPECT_LE(harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol), 1.0)
                << first_mismatch(*actual, *expected, tolerance);
        }
        if (::testing::Test::HasFailure()) {
            return;
        }
    }
}

// Each function of specs that cut queries inside sequences and split the keys, over packed
// sequences, causal or not, writes a partial result: its values and log-sum-exp match the CPU
// kernel's (partial_f32), -inf where a row saw no key, in every storage dtype.
TEST(FlashAttentionTest, KeyBlocksWritePartialResultsLikeTheCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash key blocks");
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> ends = {37, 110, 111, 250};
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = make_attention(250, 2, 3, 64, 24, causal, ends);
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> whole = random_inputs(*op, rng);
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(
            {{{0, 50}, {50, 180}, {180, 250}}, {{0, 1}, {1, 2}}, {{0, 20}, {20, 120}, {120, 250}}});
        ASSERT_TRUE(spec.ok()) << spec.status();
        expect_partials_match_cpu(*op, whole, spec->functions);
        if (HasFailure()) {
            return;
        }
    }
}

// The same with NaN, +inf and -inf in q, k and v (docs/operators.md "Non-finite
// inputs"): NaN rows and statistics, rows of only -inf scores, masked or weightless keys whose
// values are NaN, all as the CPU kernel gives them.
TEST(FlashAttentionTest, NonFiniteInputsWritePartialResultsLikeTheCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash key blocks non-finite");
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> ends = {37, 110, 111, 250};
    for (bool causal : {true, false}) {
        SCOPED_TRACE(absl::StrCat("seed ", seed, causal ? ", causal" : ", bidirectional"));
        ir::OperatorPtr op = make_attention(250, 2, 3, 64, 24, causal, ends);
        ASSERT_NE(op, nullptr);
        std::vector<HostTensor> whole = random_inputs(*op, rng);
        for (HostTensor& input : whole) {
            std::uniform_int_distribution<int64_t> position(0, input.size() - 1);
            const double special[] = {std::numeric_limits<double>::quiet_NaN(),
                                      std::numeric_limits<double>::infinity(),
                                      -std::numeric_limits<double>::infinity()};
            for (double value : special) {
                input.data()[position(rng)] = value;
            }
        }
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(
            {{{0, 50}, {50, 180}, {180, 250}}, {{0, 1}, {1, 2}}, {{0, 20}, {20, 120}, {120, 250}}});
        ASSERT_TRUE(spec.ok()) << spec.status();
        std::vector<ir::FunctionSpec> functions = spec->functions;
        functions.push_back(op->whole_spec().functions[0]);
        expect_partials_match_cpu(*op, whole, functions);
        if (HasFailure()) {
            return;
        }
    }
}

TEST(FlashAttentionTest, HeadDimensions64To256) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash head dims");
    std::mt19937_64 rng(seed);
    for (int64_t head_dim : {int64_t{64}, int64_t{128}, int64_t{256}}) {
        for (bool causal : {true, false}) {
            SCOPED_TRACE(absl::StrCat("d ", head_dim, causal ? " causal" : " bidirectional"));
            ir::OperatorPtr op = make_attention(200, 2, 2, head_dim, head_dim, causal, {77, 200});
            ASSERT_NE(op, nullptr);
            const std::vector<HostTensor> inputs = random_inputs(*op, rng);
            for (DType dtype : kDTypes) {
                expect_matches_cpu(&prepare_flash_attention, *op, inputs,
                                   op->whole_spec().functions[0], dtype);
            }
            if (HasFailure()) {
                return;
            }
        }
    }
}

// The scale attribute, eight query heads per kv head and head dimensions that fill no warp.
TEST(FlashAttentionTest, ScaleAttributeAndWideGroups) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash scale");
    std::mt19937_64 rng(seed);
    ir::OperatorPtr op = make_attention(70, 1, 8, 5, 3, true, {20, 70}, 0.7);
    ASSERT_NE(op, nullptr);
    expect_every_function_matches(&prepare_flash_attention, *op, random_inputs(*op, rng),
                                  {{{0, 20}, {20, 70}}, {{0, 1}}});
}

// Many key tiles per query tile, where the running maximum must rescale earlier sums: scores
// of a wide spread (inputs up to ±3, logits spread over about ±10) over a long causal sequence.
TEST(FlashAttentionTest, LongSequenceWithLargeScores) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash long");
    std::mt19937_64 rng(seed);
    ir::OperatorPtr op = make_attention(600, 2, 4, 128, 128, true, {600});
    ASSERT_NE(op, nullptr);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng, -3.0, 3.0);
    for (DType dtype : kDTypes) {
        expect_matches_cpu(&prepare_flash_attention, *op, inputs, op->whole_spec().functions[0],
                           dtype);
    }
}

// ---- paged flash attention --------------------------------------------------------------------

// Paged attention (ir::Attention::has_pages) over sequences ending at `ends`: k and v a pool of
// `pool_pages` pages of `page_size` keys, each sequence reading up to `pages_per_sequence` of them
// through a page table of `table_dtype`, its fill from key_lengths of `lengths_dtype`.
ir::OperatorPtr make_paged_attention(std::vector<int64_t> ends, int64_t pool_pages,
                                     int64_t page_size, int64_t pages_per_sequence,
                                     int64_t heads_kv, int64_t group, int64_t head_dim,
                                     int64_t value_dim, bool causal, DType table_dtype,
                                     DType lengths_dtype) {
    const auto sequences = static_cast<int64_t>(ends.size());
    const ir::Dim pool{"pool", pool_pages * page_size};
    const ir::TensorType q{
        DType::f32,
        {{"sequence", ends.back()}, {"heads_q", heads_kv * group}, {"d_head", head_dim}}};
    const ir::TensorType k{DType::f32, {pool, {"heads_kv", heads_kv}, {"d_head", head_dim}}};
    const ir::TensorType v{DType::f32, {pool, {"heads_kv", heads_kv}, {"d_v", value_dim}}};
    const ir::TensorType lengths{lengths_dtype, {{"sequences", sequences}}};
    const ir::TensorType table{table_dtype,
                               {{"sequences", sequences}, {"pages", pages_per_sequence}}};
    return make_op(
        "attention",
        {{"causal", causal}, {"sequence_ends", std::move(ends)}, {"page_size", page_size}},
        {q, k, v, lengths, table});
}

// The work list of a paged function: each tile of queries gets its sequence's places from 0
// (up to its last query's when causal, by the capacity), whatever the key block, since the page
// table may put any place in it; none for an empty key block.
TEST(FlashAttentionWorkTest, PagedItemsCoverEachSequencesPlaces) {
    // Sequences of 3, 1 and 6 queries; pages of 5 keys, 6 per sequence: capacity 30.
    ir::OperatorPtr causal =
        make_paged_attention({3, 4, 10}, 20, 5, 6, 2, 3, 8, 8, true, DType::i32, DType::i32);
    ir::OperatorPtr bidirectional =
        make_paged_attention({3, 4, 10}, 20, 5, 6, 2, 3, 8, 8, false, DType::i32, DType::i32);
    ASSERT_NE(causal, nullptr);
    ASSERT_NE(bidirectional, nullptr);
    auto function_of = [](ir::Interval keys) {
        return ir::FunctionSpec{{Box({{2, 10}, {0, 6}, {0, 8}}), Box({keys, {0, 2}, {0, 8}}),
                                 Box({keys, {0, 2}, {0, 8}}), Box({{0, 3}}), Box({{0, 3}, {0, 6}})},
                                {Box({{2, 10}, {0, 6}, {0, 8}})}};
    };
    auto items_of = [](const ir::Operator& op, const ir::FunctionSpec& function) {
        std::vector<std::vector<int32_t>> items;
        for (const FlashWorkItem& item :
             flash_work_items(dynamic_cast<const ir::Attention&>(op), function, 4)) {
            items.push_back({item.row_begin, item.row_end, item.key_begin, item.key_end,
                             item.sequence, item.capacity, item.fill_base, item.position_base});
        }
        return items;
    };
    // Queries [2, 10): the last query of sequence 0, sequence 1, and sequence 2 in tiles of 4
    // and 2. position_base is the block's first row minus the sequence's query end (query
    // row r sees places up to r + position_base + fill). Causal: query 7, the fourth of six,
    // sees two places fewer than the capacity.
    const std::vector<std::vector<int32_t>> causal_items = {{0, 1, 0, 30, 0, 30, 0, -1},
                                                            {1, 2, 0, 30, 1, 30, 0, -2},
                                                            {2, 6, 0, 28, 2, 30, 0, -8},
                                                            {6, 8, 0, 30, 2, 30, 0, -8}};
    const std::vector<std::vector<int32_t>> bidirectional_items = {{0, 1, 0, 30, 0, 30, 0, -1},
                                                                   {1, 2, 0, 30, 1, 30, 0, -2},
                                                                   {2, 6, 0, 30, 2, 30, 0, -8},
                                                                   {6, 8, 0, 30, 2, 30, 0, -8}};
    // A block cutting inside a page, one starting at a page, and the whole pool.
    for (const ir::Interval keys :
         {ir::Interval{37, 100}, ir::Interval{0, 37}, ir::Interval{45, 50}, ir::Interval{0, 100}}) {
        SCOPED_TRACE(absl::StrCat("keys [", keys.lower, ", ", keys.upper, ")"));
        EXPECT_EQ(items_of(*causal, function_of(keys)), causal_items);
        EXPECT_EQ(items_of(*bidirectional, function_of(keys)), bidirectional_items);
    }
    for (const std::vector<int32_t>& item : items_of(*causal, function_of({50, 50}))) {
        EXPECT_EQ(item[2], item[3]) << "an empty key block, rows from " << item[0];
    }
}

// The page table reaches the kernel as i32 or i64; cuDNN leaves paged attention to the flash
// kernel. Both are decided before any device call.
TEST(FlashAttentionWorkTest, PagedBlocksAreCheckedBeforeTheDevice) {
    ir::OperatorPtr op =
        make_paged_attention({3, 4, 10}, 20, 5, 6, 2, 3, 8, 8, true, DType::i64, DType::i32);
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    ASSERT_EQ(function.inputs.size(), 5u);
    DeviceLibraries libraries(0);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> flash =
        prepare_flash_attention({op.get(),
                                 &function,
                                 {DType::f32, DType::f32, DType::f32, DType::i32, DType::f32},
                                 {DType::f32},
                                 &libraries});
    ASSERT_FALSE(flash.ok());
    EXPECT_EQ(flash.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(flash.status().message(), "page_table")) << flash.status();
    absl::StatusOr<std::unique_ptr<PreparedKernel>> cudnn =
        prepare_cudnn_attention({op.get(),
                                 &function,
                                 {DType::f16, DType::f16, DType::f16, DType::i32, DType::i64},
                                 {DType::f16},
                                 &libraries});
    ASSERT_FALSE(cudnn.ok());
    EXPECT_EQ(cudnn.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_TRUE(absl::StrContains(cudnn.status().message(), "page")) << cudnn.status();
}

// ir::Attention::compute_partial's partial result for `function` on the inputs as stored in
// `dtype`: its values in `dtype`, then its log-sum-exp statistics as f32 (the blocks
// run_cuda_partial returns).
absl::StatusOr<harness::Blocks> reference_partial(const ir::Attention& op,
                                                  const ir::FunctionSpec& function, DType dtype,
                                                  const harness::Blocks& inputs) {
    const harness::Blocks rounded = harness::round_to(dtype, {inputs[0], inputs[1], inputs[2]});
    std::vector<HostTensor> qkv;
    for (size_t idx = 0; idx < 3; ++idx) {
        qkv.emplace_back(function.inputs[idx],
                         std::vector<double>(rounded[idx].begin(), rounded[idx].end()));
    }
    const std::vector<int64_t> fills(inputs[3].begin(), inputs[3].end());
    const std::vector<int64_t> table(inputs[4].begin(), inputs[4].end());
    absl::StatusOr<ir::PartialBlock> partial =
        op.compute_partial(qkv[0], qkv[1], qkv[2], fills, table);
    if (!partial.ok()) {
        return partial.status();
    }
    const std::vector<float> values(partial->values.values().begin(),
                                    partial->values.values().end());
    return harness::Blocks{harness::round_to(dtype, {values})[0],
                           std::vector<float>(partial->stats.begin(), partial->stats.end())};
}

// The flash kernel on paged attention against the reference: pages of 5 keys laid out in the
// pool in a shuffled order, two sequences sharing their first page, GQA (two kv heads, three
// query heads each), causal or not, key blocks cut inside pages and at them, query blocks cut
// inside sequences, and every fill from 0 (causal: the sequence's queries) to the capacity. A
// function reads the places whose rows its key block holds; one holding none of a query's gives
// 0 with statistics -inf.
TEST(FlashAttentionTest, PagedAttentionMatchesTheReference) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("flash paged");
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> ends = {3, 4, 10};
    const std::vector<int64_t> queries = {3, 1, 6};
    constexpr int64_t kPoolPages = 20;
    constexpr int64_t kPageSize = 5;
    constexpr int64_t kPerSequence = 6;
    constexpr int64_t kCapacity = kPageSize * kPerSequence;
    const std::vector<ir::IntervalRequest> requests = {
        {{{0, 10}}, {{0, 2}}, {{0, 100}}},
        {{{0, 2}, {2, 7}, {7, 10}}, {{0, 1}, {1, 2}}, {{0, 37}, {37, 100}}},
        {{{0, 10}}, {{0, 2}}, {{0, 13}, {13, 50}, {50, 51}, {51, 100}}},
        {{{0, 4}, {4, 10}}, {{0, 2}}, {{0, 45}, {45, 100}}}};
    for (bool causal : {true, false}) {
        SCOPED_TRACE(absl::StrCat("seed ", seed, causal ? ", causal" : ", bidirectional"));
        ir::OperatorPtr op = make_paged_attention(ends, kPoolPages, kPageSize, kPerSequence, 2, 3,
                                                  16, 8, causal, causal ? DType::i64 : DType::i32,
                                                  causal ? DType::i32 : DType::i64);
        ASSERT_NE(op, nullptr);
        const auto& attention = dynamic_cast<const ir::Attention&>(*op);
        std::vector<HostTensor> whole;
        for (size_t idx = 0; idx < 3; ++idx) {
            whole.push_back(HostTensor::random(op->input_types()[idx].box(), rng));
        }
        // Each sequence's pages from a shuffled pool; sequence 2 starts with sequence 0's first
        // page (a shared prefix).
        std::vector<int64_t> pages(kPoolPages);
        for (int64_t page = 0; page < kPoolPages; ++page) {
            pages[static_cast<size_t>(page)] = page;
        }
        std::shuffle(pages.begin(), pages.end(), rng);
        HostTensor table(op->input_types()[4].box());
        for (int64_t entry = 0; entry < table.size(); ++entry) {
            table.data()[entry] = static_cast<double>(pages[static_cast<size_t>(entry)]);
        }
        table.data()[2 * kPerSequence] = table.data()[0];
        for (int64_t fill = 0; fill <= kCapacity; ++fill) {
            // The sequences' fills differ; causal ones hold at least their queries.
            HostTensor lengths(op->input_types()[3].box());
            for (size_t s = 0; s < ends.size(); ++s) {
                const int64_t own = (fill + 11 * static_cast<int64_t>(s)) % (kCapacity + 1);
                lengths.data()[s] = static_cast<double>(causal ? std::max(own, queries[s]) : own);
            }
            std::vector<HostTensor> inputs = whole;
            inputs.push_back(lengths);
            inputs.push_back(table);
            const DType dtype = kDTypes[static_cast<size_t>(fill) % kDTypes.size()];
            const harness::Tolerance tolerance = harness::tolerance_for(dtype);
            for (const ir::IntervalRequest& request : requests) {
                absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
                ASSERT_TRUE(spec.ok()) << spec.status();
                for (const ir::FunctionSpec& function : spec->functions) {
                    SCOPED_TRACE(absl::StrCat("fill ", fill, ", ", ir::dtype_name(dtype),
                                              " function ", function_string(function)));
                    const harness::Blocks blocks = blocks_of(inputs, function);
                    absl::StatusOr<harness::Blocks> expected =
                        reference_partial(attention, function, dtype, blocks);
                    ASSERT_TRUE(expected.ok()) << expected.status();
                    absl::StatusOr<harness::Blocks> actual = harness::run_cuda_partial(
                        &prepare_flash_attention, *op, function, dtype, blocks);
                    ASSERT_TRUE(actual.ok()) << actual.status();
                    EXPECT_LE(
                        harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol),
                        1.0)
                        << first_mismatch(*actual, *expected, tolerance);
                    if (HasFailure()) {
                        return;
                    }
                }
            }
        }
        // The whole operator in one function writes the attention itself (no statistics).
        HostTensor lengths(op->input_types()[3].box());
        for (size_t s = 0; s < ends.size(); ++s) {
            lengths.data()[s] = static_cast<double>(kCapacity - 3 * static_cast<int64_t>(s));
        }
        std::vector<HostTensor> inputs = whole;
        inputs.push_back(lengths);
        inputs.push_back(table);
        for (DType dtype : kDTypes) {
            expect_matches_cpu(&prepare_flash_attention, *op, inputs, op->whole_spec().functions[0],
                               dtype);
        }
    }
}

} // namespace
} // namespace einsummable::kernels::cuda
