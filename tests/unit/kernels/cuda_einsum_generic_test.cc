// The generic CUDA einsum (kernels/cuda/einsum_generic.cc) against the CPU kernel, in every
// storage dtype: seeded random einsums (ir::testing::random_case) on random function specs, then
// targeted cases — element-wise ops large enough for many blocks, broadcasting, transposes,
// reductions with sum/max/min over strided indices, products of three inputs, blocks with
// non-zero lower bounds and reductions over an empty index. GPU tests skip without a GPU; the
// same cases also run anywhere through the kernel's per-element code on the host
// (emulate_generic_einsum), as do the argument checks of prepare and enqueue. Replay a failure with
// EINSUMMABLE_TEST_SEED=<printed seed>.

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/einsum.h"
#include "gtest/gtest.h"
#include "kernels/cuda/einsum_generic.h"
#include "kernels/cuda/einsum_generic_launch.h"
#include "kernels/cuda/kernel.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/cuda_kernel_harness.h"

namespace einsummable::kernels::cuda {
namespace {

namespace harness = ::einsummable::kernels::cuda::testing;

using ir::Box;
using ir::DType;
using ir::HostTensor;
using ir::Interval;

const std::vector<DType> kDTypes = {DType::f16, DType::bf16, DType::f32, DType::f64};

using ::einsummable::kernels::cuda::testing::blocks_of;
using ::einsummable::kernels::cuda::testing::first_mismatch;
using ::einsummable::kernels::cuda::testing::function_string;
using ::einsummable::kernels::cuda::testing::seed_for;

// The kernel's per-element code run on the host (emulate_generic_einsum) with the plan
// prepare_generic_einsum launches: inputs stored in `dtype`, the output read back as f32.
absl::StatusOr<harness::Blocks> run_emulated(const ir::Operator& op,
                                             const ir::FunctionSpec& function, DType dtype,
                                             const harness::Blocks& inputs) {
    KernelRequest request;
    request.op = &op;
    request.function = &function;
    request.input_dtypes.assign(function.inputs.size(), dtype);
    request.output_dtypes.assign(function.outputs.size(), dtype);
    absl::StatusOr<GenericEinsumPlan> plan = plan_generic_einsum(request);
    if (!plan.ok()) {
        return plan.status();
    }
    const auto element_bytes = static_cast<size_t>(ir::dtype_size(dtype));
    std::vector<std::vector<std::byte>> stored;
    std::vector<const void*> pointers;
    for (const std::vector<float>& block : inputs) {
        stored.emplace_back(block.size() * element_bytes);
        ir::from_f32(dtype, block.data(), stored.back().data(), static_cast<int64_t>(block.size()));
        pointers.push_back(stored.back().data());
    }
    const int64_t volume = function.outputs[0].volume();
    // NaN-filled, so that an element the kernel never writes shows up.
    std::vector<float> nan(static_cast<size_t>(volume), std::numeric_limits<float>::quiet_NaN());
    std::vector<std::byte> output(static_cast<size_t>(volume) * element_bytes);
    ir::from_f32(dtype, nan.data(), output.data(), volume);
    emulate_generic_einsum(*plan, dtype, pointers.data(), output.data());
    std::vector<float> values(static_cast<size_t>(volume));
    ir::to_f32(dtype, output.data(), values.data(), volume);
    return harness::Blocks{values};
}

enum class Runner { gpu, emulated };

// `function` through prepare_generic_einsum on the GPU (or its per-element code on the host) and
// through the CPU kernel in `dtype`.
void expect_matches_cpu(const ir::Operator& op, const std::vector<HostTensor>& whole,
                        const ir::FunctionSpec& function, DType dtype,
                        Runner runner = Runner::gpu) {
    SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " function ", function_string(function)));
    const harness::Blocks inputs = blocks_of(whole, function);
    absl::StatusOr<harness::Blocks> expected = harness::run_cpu(op, function, dtype, inputs);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<harness::Blocks> actual =
        runner == Runner::gpu
            ? harness::run_cuda_with(&prepare_generic_einsum, op, function, dtype, inputs)
            : run_emulated(op, function, dtype, inputs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const harness::Tolerance tolerance = harness::tolerance_for(dtype);
    const double error = harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol);
    EXPECT_LE(error, 1.0) << first_mismatch(*actual, *expected, tolerance);
}

std::vector<HostTensor> random_inputs(const ir::Operator& op, std::mt19937_64& rng) {
    std::vector<HostTensor> inputs;
    for (const ir::TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng));
    }
    return inputs;
}

ir::OperatorPtr make_einsum(const std::string& equation, std::vector<ir::TensorType> types,
                            const std::string& join = "", const std::string& agg = "",
                            double constant = 0.0) {
    ir::Attributes attributes = {{"equation", equation}};
    if (!join.empty()) {
        attributes.set("join", join);
        attributes.set("constant", constant);
    }
    if (!agg.empty()) {
        attributes.set("agg", agg);
    }
    absl::StatusOr<ir::OperatorPtr> op = ir::Einsum::make(attributes, std::move(types));
    EXPECT_TRUE(op.ok()) << equation << ": " << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

ir::TensorType type_of(std::vector<std::pair<std::string, int64_t>> dims,
                       DType dtype = DType::f32) {
    ir::TensorType type{dtype, {}};
    for (const auto& [name, size] : dims) {
        type.dims.push_back({name, size});
    }
    return type;
}

// ---- random einsums -------------------------------------------------------------------------

void check_random_einsums(Runner runner) {
    const uint64_t seed = seed_for("generic_einsum_random");
    std::mt19937_64 rng(seed);
    constexpr int kCases = 300;
    for (int case_idx = 0; case_idx < kCases; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case("einsum", rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        std::vector<ir::FunctionSpec> functions;
        if (case_idx % 8 == 0) {
            functions.push_back(random.op->whole_spec().functions[0]);
        }
        const std::vector<ir::ShardableIndex> indices = random.op->shardable_indices();
        absl::StatusOr<ir::JoinAggSpec> spec =
            random.op->spec(ir::testing::random_request(indices, rng));
        ASSERT_TRUE(spec.ok()) << spec.status();
        std::vector<ir::FunctionSpec> picked = spec->functions;
        std::shuffle(picked.begin(), picked.end(), rng);
        picked.resize(std::min<size_t>(picked.size(), 2));
        functions.insert(functions.end(), picked.begin(), picked.end());
        for (const ir::FunctionSpec& function : functions) {
            for (DType dtype : kDTypes) {
                expect_matches_cpu(*random.op, random.inputs, function, dtype, runner);
            }
        }
        if (::testing::Test::HasFailure()) {
            return; // the first failing case is the one worth reading
        }
    }
}

TEST(CudaGenericEinsumTest, RandomEinsumsMatchCpuInEveryDtype) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    check_random_einsums(Runner::gpu);
}

// Without a GPU: the same cases through the plans and the kernel's per-element code on the host.
TEST(CudaGenericEinsumTest, EmulatedKernelMatchesCpuOnRandomEinsums) {
    check_random_einsums(Runner::emulated);
}

// ---- targeted cases -------------------------------------------------------------------------

struct TargetedCase {
    std::string equation;
    std::vector<std::vector<std::pair<std::string, int64_t>>> inputs;
    std::string join;
    std::string agg;
    double constant = 0.0;
};

void PrintTo(const TargetedCase& c, std::ostream* os) {
    *os << c.equation << " join=" << c.join << " agg=" << c.agg;
}

class CudaGenericEinsumTargetedTest : public ::testing::TestWithParam<TargetedCase> {};

// The whole spec and a split into a random request (sub-blocks with non-zero lower bounds and,
// where an index is reduced, partial aggregates), in every dtype.
void check_targeted(const TargetedCase& c, Runner runner) {
    const uint64_t seed = seed_for(c.equation + c.join + c.agg);
    std::mt19937_64 rng(seed);
    std::vector<ir::TensorType> types;
    for (const auto& dims : c.inputs) {
        types.push_back(type_of(dims));
    }
    ir::OperatorPtr op = make_einsum(c.equation, types, c.join, c.agg, c.constant);
    ASSERT_NE(op, nullptr);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    std::vector<ir::FunctionSpec> functions = {op->whole_spec().functions[0]};
    absl::StatusOr<ir::JoinAggSpec> spec =
        op->spec(ir::testing::random_request(op->shardable_indices(), rng));
    ASSERT_TRUE(spec.ok()) << spec.status();
    functions.push_back(spec->functions.back());
    for (const ir::FunctionSpec& function : functions) {
        for (DType dtype : kDTypes) {
            expect_matches_cpu(*op, inputs, function, dtype, runner);
        }
    }
}

TEST_P(CudaGenericEinsumTargetedTest, MatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    check_targeted(GetParam(), Runner::gpu);
}

TEST_P(CudaGenericEinsumTargetedTest, EmulatedMatchesCpu) {
    check_targeted(GetParam(), Runner::emulated);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaGenericEinsumTargetedTest,
    ::testing::Values(
        // Element-wise over many blocks of threads (one merged loop).
        TargetedCase{"ij->ij", {{{"i", 517}, {"j", 301}}}, "gelu", "sum"},
        TargetedCase{
            "ij,ij->ij", {{{"i", 300}, {"j", 257}}, {{"i", 300}, {"j", 257}}}, "sub", "sum"},
        // Broadcasting: one operand constant along the innermost or the outer index.
        TargetedCase{"ij,j->ij", {{{"i", 129}, {"j", 250}}, {{"j", 250}}}, "add", "sum"},
        TargetedCase{"ij,i->ij", {{{"i", 129}, {"j", 250}}, {{"i", 129}}}, "max", "sum"},
        // Transposes, so that reads stride.
        TargetedCase{"ijk->kji", {{{"i", 17}, {"j", 33}, {"k", 65}}}, "identity", "sum"},
        TargetedCase{"abcd->dbca", {{{"a", 5}, {"b", 7}, {"c", 3}, {"d", 11}}}, "silu", "sum"},
        // Reductions: along the innermost, the outermost and both; to a scalar.
        TargetedCase{"ij->i", {{{"i", 64}, {"j", 1000}}}, "identity", "sum"},
        TargetedCase{"ij->j", {{{"i", 700}, {"j", 96}}}, "exp", "max"},
        TargetedCase{"ijk->j", {{{"i", 9}, {"j", 40}, {"k", 31}}}, "abs", "min"},
        TargetedCase{"ij->", {{{"i", 40}, {"j", 50}}}, "square", "sum"},
        TargetedCase{"ij,ij->i", {{{"i", 70}, {"j", 90}}, {{"i", 70}, {"j", 90}}}, "min", "max"},
        // A contraction the generic kernel must also get right (cuBLASLt's fallback).
        TargetedCase{"bij,bjk->bik",
                     {{{"b", 3}, {"i", 20}, {"j", 37}}, {{"b", 3}, {"j", 37}, {"k", 18}}},
                     "mul",
                     "sum"},
        // Three inputs: only mul, multiplied in input order.
        TargetedCase{"ij,jk,k->i",
                     {{{"i", 30}, {"j", 20}}, {{"j", 20}, {"k", 10}}, {{"k", 10}}},
                     "mul",
                     "sum"},
        // Joins with a constant.
        TargetedCase{"ij->ji", {{{"i", 31}, {"j", 45}}}, "leaky_relu", "sum", 0.125},
        TargetedCase{"ij->i", {{{"i", 31}, {"j", 45}}}, "scale", "max", -1.5}));

TEST(CudaGenericEinsumTest, EmptyReductionWritesZeroAndEmptyOutputWritesNothing) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    ir::OperatorPtr op = make_einsum("ij->i", {type_of({{"i", 6}, {"j", 4}})}, "", "max");
    ASSERT_NE(op, nullptr);
    std::mt19937_64 rng(seed_for("generic_einsum_empty"));
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    // j spans [2, 2): every output element aggregates no points, which is 0 as on the CPU.
    const ir::FunctionSpec empty_reduction{{Box({Interval{1, 5}, Interval{2, 2}})},
                                           {Box({Interval{1, 5}})}};
    for (DType dtype : kDTypes) {
        absl::StatusOr<harness::Blocks> actual = harness::run_cuda_with(
            &prepare_generic_einsum, *op, empty_reduction, dtype, {std::vector<float>()});
        ASSERT_TRUE(actual.ok()) << actual.status();
        EXPECT_EQ((*actual)[0], std::vector<float>(4, 0.0f)) << ir::dtype_name(dtype);
    }
    const ir::FunctionSpec empty_output{{Box({Interval{3, 3}, Interval{0, 4}})},
                                        {Box({Interval{3, 3}})}};
    absl::StatusOr<harness::Blocks> actual = harness::run_cuda_with(
        &prepare_generic_einsum, *op, empty_output, DType::f32, {std::vector<float>()});
    ASSERT_TRUE(actual.ok()) << actual.status();
    EXPECT_TRUE((*actual)[0].empty());
}

// ---- argument checks (no GPU needed: they fail before any CUDA call) -----------------------

KernelRequest request_for(const ir::Operator& op, const ir::FunctionSpec& function, DType dtype) {
    KernelRequest request;
    request.op = &op;
    request.function = &function;
    request.input_dtypes.assign(function.inputs.size(), dtype);
    request.output_dtypes.assign(function.outputs.size(), dtype);
    return request;
}

TEST(CudaGenericEinsumTest, RefusesAnOperatorThatIsNoEinsum) {
    absl::StatusOr<ir::OperatorPtr> softmax =
        ir::make_operator("softmax", {{"axis", int64_t{-1}}}, {type_of({{"i", 4}, {"j", 8}})});
    ASSERT_TRUE(softmax.ok()) << softmax.status();
    const ir::FunctionSpec function = (*softmax)->whole_spec().functions[0];
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_generic_einsum(request_for(**softmax, function, DType::f32));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), (*softmax)->describe()))
        << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "softmax")) << kernel.status();
}

TEST(CudaGenericEinsumTest, RefusesMixedDtypesNamingTheInput) {
    ir::OperatorPtr op =
        make_einsum("ij,j->ij", {type_of({{"i", 4}, {"j", 8}}), type_of({{"j", 8}})}, "add");
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    KernelRequest request = request_for(*op, function, DType::bf16);
    request.input_dtypes[1] = DType::f32;
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_generic_einsum(request);
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "input 1")) << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), op->describe())) << kernel.status();
}

// The loop limit is on loops after extent-1 indices drop out and contiguous ones merge: nine
// indices of extent 1 (common in sharded blocks) are one loop, as on the CPU; nine of extent 2
// reversed cannot merge and are refused.
TEST(CudaGenericEinsumTest, LimitsLoopsNotIndices) {
    std::vector<std::pair<std::string, int64_t>> ones;
    std::vector<std::pair<std::string, int64_t>> twos;
    std::string term;
    for (char c = 'a'; c <= 'i'; ++c) {
        ones.emplace_back(std::string(1, c), 1);
        twos.emplace_back(std::string(1, c), 2);
        term.push_back(c);
    }
    ir::OperatorPtr copy = make_einsum(term + "->" + term, {type_of(ones)});
    ASSERT_NE(copy, nullptr);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> merged =
        prepare_generic_einsum(request_for(*copy, copy->whole_spec().functions[0], DType::f32));
    EXPECT_TRUE(merged.ok()) << merged.status();

    const std::string reversed(term.rbegin(), term.rend());
    ir::OperatorPtr transpose = make_einsum(term + "->" + reversed, {type_of(twos)});
    ASSERT_NE(transpose, nullptr);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_generic_einsum(
        request_for(*transpose, transpose->whole_spec().functions[0], DType::f32));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "9 output")) << kernel.status();
}

TEST(CudaGenericEinsumTest, RefusesBlocksThatDisagreeOnAnIndex) {
    ir::OperatorPtr op =
        make_einsum("ij,jk->ik", {type_of({{"i", 4}, {"j", 8}}), type_of({{"j", 8}, {"k", 2}})});
    ASSERT_NE(op, nullptr);
    // j spans 8 in input 0 but 4 in input 1.
    const ir::FunctionSpec function{
        {Box({Interval{0, 4}, Interval{0, 8}}), Box({Interval{0, 4}, Interval{0, 2}})},
        {Box({Interval{0, 4}, Interval{0, 2}})}};
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_generic_einsum(request_for(*op, function, DType::f32));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "index 'j'")) << kernel.status();
}

TEST(CudaGenericEinsumTest, RefusesAFunctionSpecWithTheWrongBlockCount) {
    ir::OperatorPtr op = make_einsum("ij->i", {type_of({{"i", 4}, {"j", 8}})});
    ASSERT_NE(op, nullptr);
    ir::FunctionSpec function = op->whole_spec().functions[0];
    function.inputs.push_back(function.inputs[0]);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_generic_einsum(request_for(*op, function, DType::f32));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaGenericEinsumTest, PreparesWithoutADeviceAndChecksTheLaunch) {
    ir::OperatorPtr op =
        make_einsum("ij,j->ij", {type_of({{"i", 4}, {"j", 8}}), type_of({{"j", 8}})}, "add");
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_generic_einsum(request_for(*op, function, DType::bf16));
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ((*kernel)->scratch_bytes(), 0);
    EXPECT_TRUE(absl::StrContains((*kernel)->describe(), "bf16")) << (*kernel)->describe();
    EXPECT_TRUE(absl::StrContains((*kernel)->describe(), "ij,j->ij")) << (*kernel)->describe();

    // One input pointer for two inputs, and a null output: refused before any launch.
    float host = 0.0f;
    const void* one_input[] = {&host};
    void* outputs[] = {&host};
    KernelLaunch launch;
    launch.inputs = one_input;
    launch.outputs = outputs;
    absl::Status status = (*kernel)->enqueue(launch);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), op->describe())) << status;

    const void* two_inputs[] = {&host, &host};
    void* null_output[] = {nullptr};
    launch.inputs = two_inputs;
    launch.outputs = null_output;
    status = (*kernel)->enqueue(launch);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "output 0 is null")) << status;
}

} // namespace
} // namespace einsummable::kernels::cuda
