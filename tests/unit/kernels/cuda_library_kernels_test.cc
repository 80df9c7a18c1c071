// cuBLASLt contractions (kernels/cuda/contraction_cublaslt.h) and cuDNN fused attention
// (kernels/cuda/attention_cudnn.h) against the CPU kernels, in every dtype: random einsum
// contractions on random function specs, explicit gemm shapes (1x1, odd sizes, batched,
// transposed, packed, broadcast batch), operands that are only element-aligned, launches
// captured into a CUDA graph, GQA attention with and without causal masks, and the fallbacks
// (packed sequences, blocks cut inside a sequence and f32 attention to the flash kernel).
// Device tests skip without a GPU; the registry and the refusals that come before any library
// call run everywhere. A block the GPU machine's cuDNN refuses is checked on the flash kernel
// instead, and the refusal recorded, never skipped. Replay a failure with
// EINSUMMABLE_TEST_SEED=<printed seed>.

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "gtest/gtest.h"
#include "kernels/contraction_plan.h"
#include "kernels/cuda/attention_cudnn.h"
#include "kernels/cuda/attention_cudnn_cache.h"
#include "kernels/cuda/contraction_cublaslt.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_libraries.h"
#include "kernels/cuda/kernel.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/cuda_kernel_harness.h"

namespace einsummable::kernels::cuda {
namespace {

namespace harness = einsummable::kernels::cuda::testing;
using harness::Blocks;
using ir::Box;
using ir::DType;
using ir::HostTensor;

constexpr DType kAllDtypes[] = {DType::f16, DType::bf16, DType::f32, DType::f64};
constexpr DType kHalfDtypes[] = {DType::f16, DType::bf16};

using ::einsummable::kernels::cuda::testing::function_string;
using ::einsummable::kernels::cuda::testing::seed_for;

ir::OperatorPtr make_einsum(const std::string& equation, std::vector<ir::TensorType> types) {
    absl::StatusOr<ir::OperatorPtr> op =
        ir::Einsum::make({{"equation", equation}}, std::move(types));
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

// Input types for `equation` with the given extent per letter.
std::vector<ir::TensorType> types_for(const std::string& equation,
                                      const std::vector<std::pair<char, int64_t>>& extents) {
    std::vector<ir::TensorType> types(1);
    for (char c : equation.substr(0, equation.find("->"))) {
        if (c == ',') {
            types.emplace_back();
            continue;
        }
        int64_t size = 0;
        for (const auto& [letter, extent] : extents) {
            if (letter == c) {
                size = extent;
            }
        }
        types.back().dims.push_back({std::string(1, c), size});
    }
    return types;
}

ir::OperatorPtr make_attention(int64_t sequence, int64_t heads_q, int64_t heads_kv, int64_t dim,
                               int64_t value_dim, bool causal,
                               std::vector<int64_t> sequence_ends = {}) {
    const ir::Dim seq{"sequence", sequence};
    ir::TensorType q{DType::f32, {seq, {"heads_q", heads_q}, {"d_head", dim}}};
    ir::TensorType k{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_head", dim}}};
    ir::TensorType v{DType::f32, {seq, {"heads_kv", heads_kv}, {"d_v", value_dim}}};
    ir::Attributes attributes = {{"causal", causal}};
    if (!sequence_ends.empty()) {
        attributes.set("sequence_ends", std::move(sequence_ends));
    }
    absl::StatusOr<ir::OperatorPtr> op = ir::Attention::make(attributes, {q, k, v});
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

std::vector<HostTensor> random_inputs(const ir::Operator& op, std::mt19937_64& rng,
                                      double range = 1.0) {
    std::vector<HostTensor> inputs;
    for (const ir::TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng, -range, range));
    }
    return inputs;
}

// The blocks of `function` cut from whole inputs, as f32.
Blocks blocks_of(const std::vector<HostTensor>& whole, const ir::FunctionSpec& function) {
    Blocks blocks;
    for (size_t idx = 0; idx < whole.size(); ++idx) {
        const HostTensor block = whole[idx].slice(function.inputs[idx]);
        blocks.emplace_back(block.values().begin(), block.values().end());
    }
    return blocks;
}

// cuDNN itself refusing a block (not the way attention_cudnn.cc builds its graph, which
// Graph::validate checks): the GPU machine's cuDNN may be older than the one this was built
// against. The registry then runs the flash kernel.
bool cudnn_refused(const absl::Status& status) {
    return absl::IsUnimplemented(status) &&
           absl::StrContains(status.message(), "cudnn_frontend Graph::") &&
           !absl::StrContains(status.message(), "Graph::validate");
}

// prepare_cudnn_attention, except that a block cuDNN itself refuses (cudnn_refused) gets the
// registry's kernel, which falls back to the flash kernel as the backend would: the case is
// still checked against the CPU, on the kernel that runs it. Each refusal is printed and
// recorded as a property of the test (cudnn_refused_<n> in the XML report), so that a machine
// whose cuDNN refuses shows which cases cuDNN did not run, and the other cases run on.
absl::StatusOr<std::unique_ptr<PreparedKernel>>
prepare_cudnn_or_fallback(const KernelRequest& request) {
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_cudnn_attention(request);
    if (!cudnn_refused(kernel.status())) {
        return kernel;
    }
    static std::atomic<int> refusals{0};
    const std::string what =
        absl::StrCat(kernel.status().ToString(), "; checked on the registry's kernel instead");
    std::cout << "cuDNN refused a block: " << what << std::endl;
    ::testing::Test::RecordProperty(absl::StrCat("cudnn_refused_", ++refusals), what);
    return prepare_kernel(request);
}

// The GPU result of `factory` on `function` matches the CPU kernel's within dtype tolerance.
void expect_matches_cpu(const CudaKernelFactory& factory, const ir::Operator& op,
                        const ir::FunctionSpec& function, DType dtype, const Blocks& inputs) {
    SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " ", function_string(function)));
    absl::StatusOr<Blocks> expected = harness::run_cpu(op, function, dtype, inputs);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<Blocks> actual = harness::run_cuda_with(factory, op, function, dtype, inputs);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const harness::Tolerance tolerance = harness::tolerance_for(dtype);
    EXPECT_LE(harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol), 1.0);
}

CudaKernelFactory cublaslt_factory() {
    return [](const KernelRequest& request) -> absl::StatusOr<std::unique_ptr<PreparedKernel>> {
        std::optional<ContractionPlan> plan = plan_contraction(*request.op);
        if (!plan) {
            return absl::InvalidArgumentError("the test picked an einsum that is no contraction");
        }
        return prepare_cublaslt_contraction(request, *plan);
    };
}

KernelRequest request_for(const ir::Operator& op, const ir::FunctionSpec& function, DType dtype,
                          DeviceLibraries& libraries) {
    KernelRequest request;
    request.op = &op;
    request.function = &function;
    request.input_dtypes.assign(function.inputs.size(), dtype);
    request.output_dtypes.assign(function.outputs.size(), dtype);
    request.libraries = &libraries;
    return request;
}

// Rows [16, 40) of one sequence of 48 (make_attention(48, 4, 2, 64, 64, ...)), with the
// same rows of keys: a block that starts and ends inside its sequence.
ir::FunctionSpec mid_sequence_block() {
    ir::FunctionSpec function;
    function.inputs = {Box({{16, 40}, {0, 4}, {0, 64}}), Box({{16, 40}, {0, 2}, {0, 64}}),
                       Box({{16, 40}, {0, 2}, {0, 64}})};
    function.outputs = {Box({{16, 40}, {0, 4}, {0, 64}})};
    return function;
}

// ---- without a GPU --------------------------------------------------------------------------

TEST(LibraryKernelsRegistryTest, EinsumAndAttentionAreRegistered) {
    EXPECT_NE(cuda_kernels().find("einsum"), nullptr);
    EXPECT_NE(cuda_kernels().find("attention"), nullptr);
    std::cout << "cuDNN attention " << (cudnn_attention_built() ? "built" : "not built") << "\n";
}

TEST(CublasLtRefusalTest, MixedDtypesFallBackAndBadBlocksAreNamed) {
    ir::OperatorPtr op =
        make_einsum("ij,jk->ik", types_for("ij,jk->ik", {{'i', 4}, {'j', 5}, {'k', 6}}));
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    DeviceLibraries libraries(0);
    KernelRequest request = request_for(*op, function, DType::f16, libraries);
    request.input_dtypes[1] = DType::f32;
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_cublaslt_contraction(request, *plan_contraction(*op));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented) << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), op->describe())) << kernel.status();

    // j spans 5 in the lhs and 4 in the rhs: not a function spec of this einsum.
    ir::FunctionSpec bad = function;
    bad.inputs[1] = Box({{0, 4}, {0, 6}});
    request = request_for(*op, bad, DType::f16, libraries);
    kernel = prepare_cublaslt_contraction(request, *plan_contraction(*op));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument) << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "index 'j'")) << kernel.status();
}

TEST(CublasLtRefusalTest, EmptyBlocksNeedNoLibrary) {
    ir::OperatorPtr op =
        make_einsum("ij,jk->ik", types_for("ij,jk->ik", {{'i', 4}, {'j', 5}, {'k', 6}}));
    ASSERT_NE(op, nullptr);
    DeviceLibraries libraries(0);
    ir::FunctionSpec empty_output;
    empty_output.inputs = {Box({{0, 0}, {0, 5}}), Box({{0, 5}, {0, 6}})};
    empty_output.outputs = {Box({{0, 0}, {0, 6}})};
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_cublaslt_contraction(
        request_for(*op, empty_output, DType::bf16, libraries), *plan_contraction(*op));
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_EQ((*kernel)->scratch_bytes(), 0);
    EXPECT_TRUE(absl::StrContains((*kernel)->describe(), "empty")) << (*kernel)->describe();

    ir::FunctionSpec empty_k;
    empty_k.inputs = {Box({{0, 4}, {2, 2}}), Box({{2, 2}, {0, 6}})};
    empty_k.outputs = {Box({{0, 4}, {0, 6}})};
    kernel = prepare_cublaslt_contraction(request_for(*op, empty_k, DType::f32, libraries),
                                          *plan_contraction(*op));
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_TRUE(absl::StrContains((*kernel)->describe(), "zero fill")) << (*kernel)->describe();
}

TEST(CudnnAttentionRefusalTest, RefusesWhatFlashRuns) {
    DeviceLibraries libraries(0);
    ir::OperatorPtr op = make_attention(16, 4, 2, 64, 64, true);
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec whole = op->whole_spec().functions[0];
    for (DType dtype : {DType::f32, DType::f64}) {
        absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
            prepare_cudnn_attention(request_for(*op, whole, dtype, libraries));
        ASSERT_FALSE(kernel.ok());
        EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented) << kernel.status();
        EXPECT_TRUE(absl::StrContains(kernel.status().message(), ir::dtype_name(dtype)))
            << kernel.status();
    }

    // Two packed sequences in one block.
    ir::OperatorPtr packed = make_attention(16, 4, 2, 64, 64, true, {5, 16});
    ASSERT_NE(packed, nullptr);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel = prepare_cudnn_attention(
        request_for(*packed, packed->whole_spec().functions[0], DType::bf16, libraries));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented) << kernel.status();
    EXPECT_TRUE(absl::StrContains(kernel.status().message(), "packed sequences"))
        << kernel.status();

    // Query heads that do not follow the kv heads: not a function spec.
    ir::FunctionSpec bad = whole;
    bad.inputs[0] = Box({{0, 16}, {0, 2}, {0, 64}});
    bad.outputs[0] = Box({{0, 16}, {0, 2}, {0, 64}});
    kernel = prepare_cudnn_attention(request_for(*op, bad, DType::bf16, libraries));
    ASSERT_FALSE(kernel.ok());
    EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument) << kernel.status();
}

// cuDNN takes only blocks of whole sequences over their own keys; one cut inside its sequence is
// refused (Unimplemented, so that the registry falls back to the flash kernel) before any
// library call, saying why.
TEST(CudnnAttentionRefusalTest, RefusesABlockStartingMidSequence) {
    DeviceLibraries libraries(0);
    ir::OperatorPtr op = make_attention(48, 4, 2, 64, 64, true);
    ASSERT_NE(op, nullptr);
    for (DType dtype : kHalfDtypes) {
        absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
            prepare_cudnn_attention(request_for(*op, mid_sequence_block(), dtype, libraries));
        ASSERT_FALSE(kernel.ok());
        EXPECT_EQ(kernel.status().code(), absl::StatusCode::kUnimplemented) << kernel.status();
        EXPECT_TRUE(absl::StrContains(kernel.status().message(), "cut inside a sequence"))
            << kernel.status();
        EXPECT_TRUE(absl::StrContains(kernel.status().message(), "whole sequences"))
            << kernel.status();
    }
}

// ---- the cache of cuDNN graphs, without a GPU ---------------------------------------------------

// The key of LLaMA's attention on GPU 0 (attention_cudnn_cache.h).
SdpaGraphKey llama_key() {
    SdpaGraphKey key;
    key.physical_device = 0;
    key.dtype = DType::bf16;
    key.sequence = 256;
    key.heads_q = 32;
    key.heads_kv = 8;
    key.head_dim = 128;
    key.value_dim = 128;
    key.causal = true;
    key.scale = 0.08838835f;
    return key;
}

using TestGraphCache = BuildOnceCache<SdpaGraphKey, int, SdpaGraphKeyHash>;

// A build that counts its calls and gives each a value of its own.
std::function<TestGraphCache::Result()> counting_build(int& builds) {
    return [&builds]() -> TestGraphCache::Result {
        ++builds;
        return std::make_shared<const int>(builds);
    };
}

TEST(SdpaGraphCacheTest, EqualKeysHashAlikeAndShareOneBuild) {
    const SdpaGraphKey a = llama_key();
    const SdpaGraphKey b = llama_key();
    EXPECT_EQ(a, b);
    EXPECT_EQ(SdpaGraphKeyHash()(a), SdpaGraphKeyHash()(b));
    TestGraphCache cache;
    int builds = 0;
    TestGraphCache::Result first = cache.get_or_build(a, counting_build(builds));
    TestGraphCache::Result second = cache.get_or_build(b, counting_build(builds));
    ASSERT_TRUE(first.ok() && second.ok());
    EXPECT_EQ(first->get(), second->get()) << "one shared value";
    EXPECT_EQ(builds, 1);
    EXPECT_EQ(cache.size(), 1u);
    EXPECT_EQ(a.to_string(), "gpu 0 bf16 s=256 heads_q=32 heads_kv=8 d=128 d_v=128 causal "
                             "scale=0.0883884");
}

TEST(SdpaGraphCacheTest, AnyFieldDifferingIsAnotherEntry) {
    const std::vector<std::pair<std::string, std::function<void(SdpaGraphKey&)>>> changes = {
        {"physical_device", [](SdpaGraphKey& key) { key.physical_device = 1; }},
        {"dtype", [](SdpaGraphKey& key) { key.dtype = DType::f16; }},
        {"sequence", [](SdpaGraphKey& key) { key.sequence = 255; }},
        {"heads_q", [](SdpaGraphKey& key) { key.heads_q = 16; }},
        {"heads_kv", [](SdpaGraphKey& key) { key.heads_kv = 4; }},
        {"head_dim", [](SdpaGraphKey& key) { key.head_dim = 64; }},
        {"value_dim", [](SdpaGraphKey& key) { key.value_dim = 64; }},
        {"causal", [](SdpaGraphKey& key) { key.causal = false; }},
        {"scale by one ulp",
         [](SdpaGraphKey& key) { key.scale = std::nextafter(key.scale, 1.0f); }},
    };
    TestGraphCache cache;
    int builds = 0;
    const SdpaGraphKey base = llama_key();
    TestGraphCache::Result base_value = cache.get_or_build(base, counting_build(builds));
    ASSERT_TRUE(base_value.ok());
    std::vector<const int*> values = {base_value->get()};
    for (const auto& [field, change] : changes) {
        SCOPED_TRACE(field);
        SdpaGraphKey key = llama_key();
        change(key);
        EXPECT_NE(key, base);
        EXPECT_NE(SdpaGraphKeyHash()(key), SdpaGraphKeyHash()(base));
        TestGraphCache::Result value = cache.get_or_build(key, counting_build(builds));
        ASSERT_TRUE(value.ok());
        for (const int* other : values) {
            EXPECT_NE(value->get(), other) << "a new entry, not one built for another key";
        }
        values.push_back(value->get());
        // Asked again, the same entry.
        TestGraphCache::Result again = cache.get_or_build(key, counting_build(builds));
        ASSERT_TRUE(again.ok());
        EXPECT_EQ(again->get(), value->get());
    }
    EXPECT_EQ(builds, static_cast<int>(changes.size()) + 1);
    EXPECT_EQ(cache.size(), changes.size() + 1);
    // -0.0 and 0.0 compare equal as floats but are different graphs' scales.
    SdpaGraphKey zero = llama_key();
    zero.scale = 0.0f;
    SdpaGraphKey negative_zero = llama_key();
    negative_zero.scale = -0.0f;
    EXPECT_NE(zero, negative_zero);
}

TEST(SdpaGraphCacheTest, AFailedBuildIsAnsweredWithoutBuildingAgain) {
    TestGraphCache cache;
    int builds = 0;
    const auto refuse = [&builds]() -> TestGraphCache::Result {
        ++builds;
        return absl::UnimplementedError("this cuDNN does not take the shape");
    };
    TestGraphCache::Result first = cache.get_or_build(llama_key(), refuse);
    TestGraphCache::Result second = cache.get_or_build(llama_key(), refuse);
    EXPECT_EQ(first.status().code(), absl::StatusCode::kUnimplemented);
    EXPECT_EQ(second.status(), first.status());
    EXPECT_EQ(builds, 1);
}

// Virtual devices prepare on their own threads: those asking for one key at once wait for one
// build and get its value.
TEST(SdpaGraphCacheTest, ConcurrentCallersOfOneKeyShareOneBuild) {
    TestGraphCache cache;
    std::atomic<int> builds{0};
    const auto slow_build = [&builds]() -> TestGraphCache::Result {
        const int value = ++builds;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return std::make_shared<const int>(value);
    };
    std::vector<const int*> values(8, nullptr);
    std::vector<std::thread> threads;
    for (size_t idx = 0; idx < values.size(); ++idx) {
        threads.emplace_back([&, idx] {
            TestGraphCache::Result value = cache.get_or_build(llama_key(), slow_build);
            values[idx] = value.ok() ? value->get() : nullptr;
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(builds.load(), 1);
    for (const int* value : values) {
        EXPECT_NE(value, nullptr);
        EXPECT_EQ(value, values[0]);
    }
}

// ---- cuBLASLt contractions on the GPU -------------------------------------------------------

TEST(CublasLtContractionTest, RandomContractionsMatchCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("cublaslt random contractions");
    std::mt19937_64 rng(seed);
    int found = 0;
    for (int attempt = 0; attempt < 20000 && found < 120; ++attempt) {
        ir::testing::RandomCase random = ir::testing::random_case("einsum", rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        if (!plan_contraction(*random.op)) {
            continue;
        }
        ++found;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " attempt ", attempt, ": ", random.description));
        const std::vector<ir::ShardableIndex> indices = random.op->shardable_indices();
        absl::StatusOr<ir::JoinAggSpec> spec =
            random.op->spec(ir::testing::random_request(indices, rng));
        ASSERT_TRUE(spec.ok()) << spec.status();
        std::uniform_int_distribution<size_t> pick(0, spec->functions.size() - 1);
        const ir::FunctionSpec& function = spec->functions[pick(rng)];
        const Blocks inputs = blocks_of(random.inputs, function);
        for (DType dtype : kAllDtypes) {
            expect_matches_cpu(cublaslt_factory(), *random.op, function, dtype, inputs);
        }
    }
    EXPECT_GE(found, 50) << "too few contractions among the random einsums";
}

struct GemmCase {
    std::string equation;
    std::vector<std::pair<char, int64_t>> extents;
};

void PrintTo(const GemmCase& c, std::ostream* os) {
    *os << c.equation;
}

class CublasLtShapeTest : public ::testing::TestWithParam<GemmCase> {};

TEST_P(CublasLtShapeTest, MatchesCpuInEveryDtype) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const GemmCase& c = GetParam();
    ir::OperatorPtr op = make_einsum(c.equation, types_for(c.equation, c.extents));
    ASSERT_NE(op, nullptr);
    const uint64_t seed = seed_for(c.equation);
    std::mt19937_64 rng(seed);
    const std::vector<HostTensor> whole = random_inputs(*op, rng);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    const Blocks inputs = blocks_of(whole, function);
    for (DType dtype : kAllDtypes) {
        expect_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs);
        // The registry takes cuBLASLt for contractions.
        expect_matches_cpu(&prepare_kernel, *op, function, dtype, inputs);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CublasLtShapeTest,
    ::testing::Values(
        GemmCase{"ij,jk->ik", {{'i', 1}, {'j', 1}, {'k', 1}}},                 // 1x1x1
        GemmCase{"ij,jk->ik", {{'i', 1}, {'j', 77}, {'k', 1}}},                // dot as gemm
        GemmCase{"ij,jk->ik", {{'i', 17}, {'j', 33}, {'k', 65}}},              // odd sizes
        GemmCase{"ij,jk->ik", {{'i', 129}, {'j', 257}, {'k', 63}}},            // odd, larger
        GemmCase{"ij,jk->ik", {{'i', 256}, {'j', 384}, {'k', 512}}},           // aligned
        GemmCase{"ji,jk->ik", {{'i', 31}, {'j', 45}, {'k', 23}}},              // lhs transposed
        GemmCase{"ij,kj->ik", {{'i', 31}, {'j', 45}, {'k', 23}}},              // rhs transposed
        GemmCase{"ij,jk->ki", {{'i', 31}, {'j', 45}, {'k', 23}}},              // output transposed
        GemmCase{"bij,bjk->bik", {{'b', 3}, {'i', 19}, {'j', 21}, {'k', 17}}}, // batched
        GemmCase{"bhqd,bhkd->bhqk",
                 {{'b', 2}, {'h', 3}, {'q', 13}, {'d', 16}, {'k', 11}}},    // attention scores
        GemmCase{"ibj,bkj->bki", {{'i', 9}, {'b', 4}, {'j', 7}, {'k', 5}}}, // packed rhs
        GemmCase{"ij,bjk->bik", {{'i', 6}, {'j', 10}, {'b', 3}, {'k', 7}}}, // packed rhs + out
        GemmCase{"bij,jk->bik", {{'b', 3}, {'i', 5}, {'j', 8}, {'k', 9}}},  // broadcast batch
        GemmCase{"pqik,qpkj->qpji",
                 {{'p', 2}, {'q', 3}, {'i', 5}, {'k', 4}, {'j', 6}}}, // two batch letters
        GemmCase{"ij,j->i", {{'i', 37}, {'j', 53}}},                  // matrix-vector
        GemmCase{"i,i->", {{'i', 1000}}},                             // dot product
        GemmCase{"i,j->ij", {{'i', 40}, {'j', 3}}}),                  // outer product
    [](const ::testing::TestParamInfo<GemmCase>& info) {
        return absl::StrCat("case", info.index);
    });

TEST(CublasLtContractionTest, RegistryPicksCublasLtForContractions) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    ir::OperatorPtr op =
        make_einsum("ij,jk->ik", types_for("ij,jk->ik", {{'i', 8}, {'j', 8}, {'k', 8}}));
    ASSERT_NE(op, nullptr);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    DeviceLibraries libraries(0);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        prepare_kernel(request_for(*op, function, DType::bf16, libraries));
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    EXPECT_TRUE(absl::StartsWith((*kernel)->describe(), "cublasLt bf16 gemm m=8 n=8 k=8 batch=1"))
        << (*kernel)->describe();
}

// ---- launches the harness does not make: offset pointers, graph capture ---------------------

struct DeviceBuffer {
    void* data = nullptr;
    DeviceBuffer() = default;
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    ~DeviceBuffer() {
        if (data != nullptr) {
            cudaFree(data);
        }
    }
};

struct LaunchOptions {
    int64_t offset_bytes = 0; // every block starts this far past a 256-byte boundary
    bool capture = false;     // enqueue into a captured CUDA graph, then launch the graph twice
};

// Prepares `factory` on GPU 0 and runs it as LaunchOptions says.
absl::StatusOr<Blocks> run_launch(const CudaKernelFactory& factory, const ir::Operator& op,
                                  const ir::FunctionSpec& function, DType dtype,
                                  const Blocks& inputs, LaunchOptions options) {
    if (absl::Status status = cuda_status(cudaSetDevice(0), "cudaSetDevice"); !status.ok()) {
        return status;
    }
    DeviceLibraries libraries(0);
    absl::StatusOr<std::unique_ptr<PreparedKernel>> kernel =
        factory(request_for(op, function, dtype, libraries));
    if (!kernel.ok()) {
        return kernel.status();
    }
    const int64_t element_bytes = ir::dtype_size(dtype);
    std::vector<DeviceBuffer> input_buffers(inputs.size());
    std::vector<const void*> input_pointers;
    for (size_t idx = 0; idx < inputs.size(); ++idx) {
        std::vector<std::byte> bytes(inputs[idx].size() * static_cast<size_t>(element_bytes));
        ir::from_f32(dtype, inputs[idx].data(), bytes.data(),
                     static_cast<int64_t>(inputs[idx].size()));
        if (absl::Status status = cuda_status(
                cudaMalloc(&input_buffers[idx].data, bytes.size() + 256), "cudaMalloc input");
            !status.ok()) {
            return status;
        }
        std::byte* start = static_cast<std::byte*>(input_buffers[idx].data) + options.offset_bytes;
        if (absl::Status status =
                cuda_status(cudaMemcpy(start, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                            "cudaMemcpy");
            !status.ok()) {
            return status;
        }
        input_pointers.push_back(start);
    }
    const size_t output_bytes = static_cast<size_t>(function.outputs[0].volume() * element_bytes);
    DeviceBuffer output_buffer;
    if (absl::Status status =
            cuda_status(cudaMalloc(&output_buffer.data, output_bytes + 256), "cudaMalloc output");
        !status.ok()) {
        return status;
    }
    void* output = static_cast<std::byte*>(output_buffer.data) + options.offset_bytes;
    if (absl::Status status = cuda_status(cudaMemset(output, 0xff, output_bytes), "cudaMemset");
        !status.ok()) {
        return status;
    }
    DeviceBuffer scratch;
    if ((*kernel)->scratch_bytes() > 0) {
        if (absl::Status status = cuda_status(
                cudaMalloc(&scratch.data, static_cast<size_t>((*kernel)->scratch_bytes())),
                "cudaMalloc scratch");
            !status.ok()) {
            return status;
        }
    }
    std::vector<void*> output_pointers = {output};
    KernelLaunch launch;
    launch.inputs = input_pointers;
    launch.outputs = output_pointers;
    launch.scratch = scratch.data;
    if (absl::Status status = cuda_status(cudaStreamCreate(&launch.stream), "cudaStreamCreate");
        !status.ok()) {
        return status;
    }
    absl::Status run_status;
    if (!options.capture) {
        run_status = (*kernel)->enqueue(launch);
    } else {
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        run_status =
            cuda_status(cudaStreamBeginCapture(launch.stream, cudaStreamCaptureModeThreadLocal),
                        "cudaStreamBeginCapture");
        if (run_status.ok()) {
            run_status = (*kernel)->enqueue(launch);
            absl::Status end =
                cuda_status(cudaStreamEndCapture(launch.stream, &graph), "cudaStreamEndCapture");
            if (run_status.ok()) {
                run_status = end;
            }
        }
        if (run_status.ok()) {
            run_status = cuda_status(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
        }
        for (int replay = 0; replay < 2 && run_status.ok(); ++replay) {
            run_status = cuda_status(cudaGraphLaunch(exec, launch.stream), "cudaGraphLaunch");
        }
        if (run_status.ok()) {
            run_status = cuda_status(cudaStreamSynchronize(launch.stream), "cudaStreamSynchronize");
        }
        if (exec != nullptr) {
            cudaGraphExecDestroy(exec);
        }
        if (graph != nullptr) {
            cudaGraphDestroy(graph);
        }
    }
    absl::Status sync_status =
        cuda_status(cudaStreamSynchronize(launch.stream), "cudaStreamSynchronize");
    cudaStreamDestroy(launch.stream);
    if (!run_status.ok()) {
        return run_status;
    }
    if (!sync_status.ok()) {
        return sync_status;
    }
    std::vector<std::byte> bytes(output_bytes);
    if (absl::Status status = cuda_status(
            cudaMemcpy(bytes.data(), output, output_bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        !status.ok()) {
        return status;
    }
    std::vector<float> values(static_cast<size_t>(function.outputs[0].volume()));
    ir::to_f32(dtype, bytes.data(), values.data(), static_cast<int64_t>(values.size()));
    return Blocks{std::move(values)};
}

void expect_launch_matches_cpu(const CudaKernelFactory& factory, const ir::Operator& op,
                               const ir::FunctionSpec& function, DType dtype, const Blocks& inputs,
                               LaunchOptions options) {
    SCOPED_TRACE(absl::StrCat(ir::dtype_name(dtype), " offset ", options.offset_bytes,
                              options.capture ? " captured" : ""));
    absl::StatusOr<Blocks> expected = harness::run_cpu(op, function, dtype, inputs);
    ASSERT_TRUE(expected.ok()) << expected.status();
    absl::StatusOr<Blocks> actual = run_launch(factory, op, function, dtype, inputs, options);
    ASSERT_TRUE(actual.ok()) << actual.status();
    const harness::Tolerance tolerance = harness::tolerance_for(dtype);
    EXPECT_LE(harness::worst_error(*actual, *expected, tolerance.atol, tolerance.rtol), 1.0);
}

// Which algorithm a launch's pointers get (no GPU): the strictest tier all of them meet.
TEST(CublasLtAlignmentTest, TheStrictestTierEveryPointerMeets) {
    const uintptr_t arena = uintptr_t{0x7f3a00000000}; // cudaMalloc'd: 256-byte aligned
    EXPECT_EQ(cublaslt_alignment({arena, arena + 256, arena + 4096}, 4), 256u);
    // Buffers of a plan sit on 64-byte boundaries: the 16-byte tier, not the element size.
    EXPECT_EQ(cublaslt_alignment({arena, arena + 64, arena + 256}, 2), 16u);
    EXPECT_EQ(cublaslt_alignment({arena + 192, arena + 320, arena + 448}, 4), 16u);
    for (uintptr_t offset = 0; offset < 4096; offset += 64) {
        EXPECT_GE(cublaslt_alignment({arena + offset}, 2), 16u) << "offset " << offset;
    }
    EXPECT_EQ(cublaslt_alignment({arena + 16}, 8), 16u);
    // One pointer below 16 bytes decides for all: the element size.
    EXPECT_EQ(cublaslt_alignment({arena, arena + 64, arena + 4}, 4), 4u);
    EXPECT_EQ(cublaslt_alignment({arena + 8}, 8), 8u);
    EXPECT_EQ(cublaslt_alignment({arena + 2, arena}, 2), 2u);
    // The tiers, strictest first, are what the heuristic is asked for besides the element size.
    EXPECT_EQ(std::vector<uint32_t>(std::begin(kCublasLtAlignmentTiers),
                                    std::end(kCublasLtAlignmentTiers)),
              (std::vector<uint32_t>{256, 16}));
}

TEST(CublasLtContractionTest, ElementAlignedOperandsAndGraphCapture) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("cublaslt launches");
    std::mt19937_64 rng(seed);
    for (const std::string equation : {"ij,jk->ik", "ibj,bkj->bki"}) {
        ir::OperatorPtr op = make_einsum(
            equation, types_for(equation, {{'i', 67}, {'j', 35}, {'k', 129}, {'b', 3}}));
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> whole = random_inputs(*op, rng);
        const ir::FunctionSpec function = op->whole_spec().functions[0];
        const Blocks inputs = blocks_of(whole, function);
        for (DType dtype : kAllDtypes) {
            SCOPED_TRACE(equation);
            const int64_t element = ir::dtype_size(dtype);
            expect_launch_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs,
                                      {element, false});
            // The 16-byte tier: 64 is where a plan's buffers sit.
            expect_launch_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs,
                                      {16, false});
            expect_launch_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs,
                                      {64, false});
            expect_launch_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs, {0, true});
            expect_launch_matches_cpu(cublaslt_factory(), *op, function, dtype, inputs,
                                      {element, true});
        }
    }
}

// ---- cuDNN attention on the GPU -------------------------------------------------------------

struct AttentionCase {
    std::string name;
    int64_t sequence, heads_q, heads_kv, dim, value_dim;
    bool causal;
};

void PrintTo(const AttentionCase& c, std::ostream* os) {
    *os << c.name;
}

class CudnnAttentionTest : public ::testing::TestWithParam<AttentionCase> {};

TEST_P(CudnnAttentionTest, MatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    if (!cudnn_attention_built()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("this build has no cuDNN frontend (scripts/setup)");
    }
    const AttentionCase& c = GetParam();
    ir::OperatorPtr op =
        make_attention(c.sequence, c.heads_q, c.heads_kv, c.dim, c.value_dim, c.causal);
    ASSERT_NE(op, nullptr);
    const uint64_t seed = seed_for(c.name);
    std::mt19937_64 rng(seed);
    // Wider than [-1, 1] so that the softmax is peaked and outputs are not all near zero.
    const std::vector<HostTensor> whole = random_inputs(*op, rng, 2.0);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    const Blocks inputs = blocks_of(whole, function);
    for (DType dtype : kHalfDtypes) {
        expect_matches_cpu(&prepare_cudnn_or_fallback, *op, function, dtype, inputs);
        expect_matches_cpu(&prepare_kernel, *op, function, dtype, inputs);
    }
    // A spec's blocks too: kv heads [1, heads_kv) with their query heads.
    if (c.heads_kv > 1) {
        const ir::IntervalRequest request = {{{0, c.sequence}}, {{0, 1}, {1, c.heads_kv}}};
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        const ir::FunctionSpec& part = spec->functions.back();
        expect_matches_cpu(&prepare_cudnn_or_fallback, *op, part, DType::bf16,
                           blocks_of(whole, part));
    }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudnnAttentionTest,
    ::testing::Values(AttentionCase{"gqa_32_8_d128_causal", 256, 32, 8, 128, 128, true},
                      AttentionCase{"gqa_32_8_d128", 256, 32, 8, 128, 128, false},
                      AttentionCase{"mha_d64_causal", 100, 4, 4, 64, 64, true},
                      AttentionCase{"mqa_d64", 77, 8, 1, 64, 64, false},
                      AttentionCase{"short_causal", 3, 4, 2, 64, 64, true},
                      AttentionCase{"one_position", 1, 2, 1, 128, 128, true},
                      AttentionCase{"short", 17, 6, 2, 128, 128, false}),
    [](const ::testing::TestParamInfo<AttentionCase>& info) { return info.param.name; });

TEST(CudnnAttentionGpuTest, LaunchesCaptureIntoAGraph) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    if (!cudnn_attention_built()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("this build has no cuDNN frontend (scripts/setup)");
    }
    ir::OperatorPtr op = make_attention(64, 8, 2, 128, 128, true);
    ASSERT_NE(op, nullptr);
    const uint64_t seed = seed_for("cudnn capture");
    std::mt19937_64 rng(seed);
    const std::vector<HostTensor> whole = random_inputs(*op, rng, 2.0);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    for (DType dtype : kHalfDtypes) {
        expect_launch_matches_cpu(&prepare_cudnn_or_fallback, *op, function, dtype,
                                  blocks_of(whole, function), {0, true});
    }
}

// Two logical devices of one GPU (each run has its own DeviceLibraries) preparing one shape build
// its graph once, and both kernels match the CPU; another scale is another graph.
TEST(CudnnAttentionGpuTest, LogicalDevicesOfOneGpuShareOneGraph) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    if (!cudnn_attention_built()) {
        EINSUMMABLE_SKIP_UNLESS_GPU_REQUIRED("this build has no cuDNN frontend (scripts/setup)");
    }
    // A shape no other test uses, so that its graph is not built yet.
    ir::OperatorPtr op = make_attention(72, 6, 3, 64, 64, true);
    ASSERT_NE(op, nullptr);
    const uint64_t seed = seed_for("cudnn shared graph");
    std::mt19937_64 rng(seed);
    const std::vector<HostTensor> whole = random_inputs(*op, rng, 2.0);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    const int64_t before = cudnn_attention_graphs();
    expect_matches_cpu(&prepare_cudnn_or_fallback, *op, function, DType::bf16,
                       blocks_of(whole, function));
    expect_matches_cpu(&prepare_cudnn_or_fallback, *op, function, DType::bf16,
                       blocks_of(whole, function));
    EXPECT_EQ(cudnn_attention_graphs(), before + 1);

    ir::TensorType q{DType::f32, {{"sequence", 72}, {"heads_q", 6}, {"d_head", 64}}};
    ir::TensorType k{DType::f32, {{"sequence", 72}, {"heads_kv", 3}, {"d_head", 64}}};
    ir::TensorType v{DType::f32, {{"sequence", 72}, {"heads_kv", 3}, {"d_v", 64}}};
    const ir::Attributes attributes = {{"causal", true}, {"scale", 0.5}};
    absl::StatusOr<ir::OperatorPtr> scaled = ir::Attention::make(attributes, {q, k, v});
    ASSERT_TRUE(scaled.ok()) << scaled.status();
    expect_matches_cpu(&prepare_cudnn_or_fallback, **scaled, function, DType::bf16,
                       blocks_of(whole, function));
    EXPECT_EQ(cudnn_attention_graphs(), before + 2);
}

// cuDNN refuses a block that starts inside its sequence (CudnnAttentionRefusalTest); the
// registry's kernel runs it on the flash kernel, with the keys the CPU kernel gives it.
TEST(CudnnAttentionGpuTest, BlockStartingMidSequenceFallsBackAndMatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    ir::OperatorPtr op = make_attention(48, 4, 2, 64, 64, true);
    ASSERT_NE(op, nullptr);
    const uint64_t seed = seed_for("cudnn mid-sequence");
    std::mt19937_64 rng(seed);
    const std::vector<HostTensor> whole = random_inputs(*op, rng, 2.0);
    const ir::FunctionSpec function = mid_sequence_block();
    for (DType dtype : kHalfDtypes) {
        expect_matches_cpu(&prepare_kernel, *op, function, dtype, blocks_of(whole, function));
    }
}

TEST(CudnnAttentionGpuTest, PackedSequencesAndF32FallBackToFlash) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("attention fallback");
    std::mt19937_64 rng(seed);
    ir::OperatorPtr packed = make_attention(40, 8, 2, 64, 64, true, {7, 20, 21, 40});
    ASSERT_NE(packed, nullptr);
    const std::vector<HostTensor> whole = random_inputs(*packed, rng, 2.0);
    const ir::FunctionSpec function = packed->whole_spec().functions[0];
    const Blocks inputs = blocks_of(whole, function);
    for (DType dtype : kAllDtypes) {
        expect_matches_cpu(&prepare_kernel, *packed, function, dtype, inputs);
    }
    // Cut at the sequence ends, each block is one sequence and cuDNN runs it.
    if (cudnn_attention_built()) {
        const ir::IntervalRequest request = {{{0, 7}, {7, 20}, {20, 21}, {21, 40}}, {{0, 2}}};
        absl::StatusOr<ir::JoinAggSpec> spec = packed->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        for (const ir::FunctionSpec& part : spec->functions) {
            expect_matches_cpu(&prepare_cudnn_or_fallback, *packed, part, DType::bf16,
                               blocks_of(whole, part));
        }
    }
}

TEST(CudnnAttentionGpuTest, RandomAttentionThroughTheRegistryMatchesCpu) {
    EINSUMMABLE_SKIP_WITHOUT_GPU();
    const uint64_t seed = seed_for("attention random");
    std::mt19937_64 rng(seed);
    for (int case_idx = 0; case_idx < 60; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case("attention", rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        const std::vector<ir::ShardableIndex> indices = random.op->shardable_indices();
        absl::StatusOr<ir::JoinAggSpec> spec =
            random.op->spec(ir::testing::random_request(indices, rng));
        ASSERT_TRUE(spec.ok()) << spec.status();
        const ir::FunctionSpec& function = spec->functions[0];
        const Blocks inputs = blocks_of(random.inputs, function);
        for (DType dtype : kAllDtypes) {
            expect_matches_cpu(&prepare_kernel, *random.op, function, dtype, inputs);
        }
    }
}

} // namespace
} // namespace einsummable::kernels::cuda
