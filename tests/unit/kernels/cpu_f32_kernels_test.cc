// kernels/cpu's f32 kernels (kernels.h) against the operators' double reference: every
// registered operator kind on seeded random cases and random function specs (blocks with
// non-zero lower bounds), then targeted cases — contraction layouts, causal GQA attention over
// packed sequences, RoPE mid-sequence, aggregation and argument errors. Replay a failure with
// EINSUMMABLE_TEST_SEED=<printed seed>.

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/ir/interval_request.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/ops/attention.h"
#include "compiler/ir/ops/einsum.h"
#include "compiler/ir/spec_execution.h"
#include "gtest/gtest.h"
#include "kernels/cpu/block_kernel.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/kernels.h"
#include "kernels/cpu/vector_math.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/kernels/einsum_cases.h"

namespace einsummable::kernels::cpu {
namespace {

using einsum_cases::make_einsum;
using einsum_cases::random_types;

using ir::Box;
using ir::HostTensor;
using ir::Interval;

// f32 compute against a double reference on the same (f32-rounded) inputs.
constexpr double kTolerance = 1e-5;

// A seed per test that is the same on every platform (FNV-1a of the name, plus the base seed).
uint64_t seed_for(const std::string& name) {
    uint64_t hash = 1469598103934665603ull;
    for (char c : name) {
        hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    }
    return ir::testing::test_seed() + hash % 1000003;
}

std::vector<float> to_floats(const HostTensor& tensor) {
    return std::vector<float>(tensor.values().begin(), tensor.values().end());
}

HostTensor from_floats(const Box& box, const std::vector<float>& values) {
    return HostTensor(box, std::vector<double>(values.begin(), values.end()));
}

// The block's values as f32 would store them.
HostTensor rounded(const HostTensor& tensor) {
    return from_floats(tensor.box(), to_floats(tensor));
}

// The input blocks of `function` cut from `whole` and rounded to f32 (for the reference), their
// f32 values, and pointers to those (for the kernel).
struct StagedInputs {
    std::vector<HostTensor> blocks;
    std::vector<std::vector<float>> data;
    std::vector<const float*> pointers;
};

StagedInputs stage_inputs(const std::vector<HostTensor>& whole, const ir::FunctionSpec& function) {
    StagedInputs staged;
    for (size_t input_idx = 0; input_idx < whole.size(); ++input_idx) {
        staged.blocks.push_back(rounded(whole[input_idx].slice(function.inputs[input_idx])));
        staged.data.push_back(to_floats(staged.blocks.back()));
    }
    for (const std::vector<float>& data : staged.data) {
        staged.pointers.push_back(data.data());
    }
    return staged;
}

// got agrees with the reference: NaN where it has NaN, its infinities exactly, finite values
// within `tolerance` relative to its largest finite magnitude (at least 1), as
// ir::max_relative_error scales (docs/operators.md "Non-finite inputs").
::testing::AssertionResult agrees_with_reference(const HostTensor& got, const HostTensor& expected,
                                                 double tolerance) {
    double scale = 1.0;
    for (double value : expected.values()) {
        scale = std::isfinite(value) ? std::max(scale, std::abs(value)) : scale;
    }
    for (int64_t idx = 0; idx < expected.size(); ++idx) {
        const double want = expected.data()[idx];
        const double have = got.data()[idx];
        const bool same = std::isnan(want) ? std::isnan(have)
                          : std::isinf(want)
                              ? have == want
                              : std::isfinite(have) && std::abs(have - want) <= tolerance * scale;
        if (!same) {
            return ::testing::AssertionFailure()
                   << "element " << idx << ": " << have << ", the reference " << want;
        }
    }
    return ::testing::AssertionSuccess();
}

// Puts NaN, +inf or -inf at `count` random positions of `tensor`.
void inject_non_finite(HostTensor& tensor, int count, std::mt19937_64& rng) {
    if (tensor.size() == 0) {
        return;
    }
    std::uniform_int_distribution<int64_t> position(0, tensor.size() - 1);
    std::uniform_int_distribution<int> kind(0, 2);
    for (int idx = 0; idx < count; ++idx) {
        const double values[] = {std::numeric_limits<double>::quiet_NaN(),
                                 std::numeric_limits<double>::infinity(),
                                 -std::numeric_limits<double>::infinity()};
        tensor.data()[position(rng)] = values[kind(rng)];
    }
}

// Runs run_f32 on the blocks of `function` cut from `whole` and compares every output with
// op.reference on the same blocks (agrees_with_reference). Outputs start as NaN, so an element
// left unwritten fails unless the reference is NaN there too.
void check_function(const ir::Operator& op, const std::vector<HostTensor>& whole,
                    const ir::FunctionSpec& function) {
    const StagedInputs staged = stage_inputs(whole, function);
    absl::StatusOr<std::vector<HostTensor>> expected = op.reference(staged.blocks, function);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::vector<const float*>& inputs = staged.pointers;
    std::vector<std::vector<float>> output_data;
    std::vector<float*> outputs;
    for (const Box& box : function.outputs) {
        output_data.emplace_back(box.volume(), std::numeric_limits<float>::quiet_NaN());
    }
    for (std::vector<float>& data : output_data) {
        outputs.push_back(data.data());
    }
    const absl::Status status = run_f32(op, function, inputs, outputs);
    ASSERT_TRUE(status.ok()) << status;
    for (size_t output_idx = 0; output_idx < outputs.size(); ++output_idx) {
        const HostTensor got = from_floats(function.outputs[output_idx], output_data[output_idx]);
        EXPECT_TRUE(agrees_with_reference(got, (*expected)[output_idx], kTolerance))
            << "output " << output_idx << " block " << function.outputs[output_idx].to_string();
    }
}

std::string function_string(const ir::FunctionSpec& function) {
    std::string out;
    for (const Box& box : function.inputs) {
        absl::StrAppend(&out, out.empty() ? "" : ", ", box.to_string());
    }
    absl::StrAppend(&out, " -> ");
    for (const Box& box : function.outputs) {
        absl::StrAppend(&out, box.to_string(), " ");
    }
    return out;
}

// A random request's spec; every function spec when there are few, otherwise a random three.
void check_random_spec(const ir::Operator& op, const std::vector<HostTensor>& inputs,
                       std::mt19937_64& rng) {
    const std::vector<ir::ShardableIndex> indices = op.shardable_indices();
    const ir::IntervalRequest request = ir::testing::random_request(indices, rng);
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    SCOPED_TRACE(absl::StrCat("request ", ir::request_to_string(indices, request)));
    std::vector<size_t> picked(spec->functions.size());
    for (size_t idx = 0; idx < picked.size(); ++idx) {
        picked[idx] = idx;
    }
    std::shuffle(picked.begin(), picked.end(), rng);
    picked.resize(std::min<size_t>(picked.size(), 3));
    for (size_t function_idx : picked) {
        const ir::FunctionSpec& function = spec->functions[function_idx];
        SCOPED_TRACE(absl::StrCat("function ", function_string(function)));
        check_function(op, inputs, function);
    }
}

// ---- every operator kind --------------------------------------------------------------------

class EveryKindTest : public testing::TestWithParam<std::string> {};

TEST_P(EveryKindTest, RandomFunctionSpecsMatchReference) {
    const std::string& kind = GetParam();
    const uint64_t seed = seed_for(kind);
    std::cout << "kind " << kind << " seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const int cases = kind == "einsum" ? 3000 : 600;
    for (int case_idx = 0; case_idx < cases; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case(kind, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        if (case_idx % 10 == 0) {
            check_function(*random.op, random.inputs, random.op->whole_spec().functions[0]);
        }
        check_random_spec(*random.op, random.inputs, rng);
        if (testing::Test::HasFatalFailure() || testing::Test::HasNonfatalFailure()) {
            return; // the first failing case is the one worth reading
        }
    }
}

// The same with NaN, +inf and -inf at random positions of the inputs. Every kernel
// gives the reference's NaNs and infinities (docs/operators.md "Non-finite inputs").
TEST_P(EveryKindTest, NonFiniteInputsMatchReference) {
    const std::string& kind = GetParam();
    const uint64_t seed = seed_for(absl::StrCat(kind, " non-finite"));
    std::cout << "kind " << kind << " seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int> count(0, 2);
    for (int case_idx = 0; case_idx < 300; ++case_idx) {
        ir::testing::RandomCase random = ir::testing::random_case(kind, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        for (size_t idx = 0; idx < random.inputs.size(); ++idx) {
            const int injected = count(rng);
            if (!ir::is_integer(random.op->input_types()[idx].dtype)) { // ids stay valid
                inject_non_finite(random.inputs[idx], injected, rng);
            }
        }
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description));
        check_function(*random.op, random.inputs, random.op->whole_spec().functions[0]);
        check_random_spec(*random.op, random.inputs, rng);
        if (testing::Test::HasFatalFailure() || testing::Test::HasNonfatalFailure()) {
            return;
        }
    }
}

std::vector<std::string> kind_names() {
    std::vector<std::string> names;
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        names.emplace_back(kind.name);
    }
    return names;
}

INSTANTIATE_TEST_SUITE_P(Kernels, EveryKindTest, testing::ValuesIn(kind_names()),
                         [](const testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

// ---- einsum ---------------------------------------------------------------------------------

std::vector<HostTensor> random_inputs(const ir::Operator& op, std::mt19937_64& rng) {
    std::vector<HostTensor> inputs;
    for (const ir::TensorType& type : op.input_types()) {
        inputs.push_back(HostTensor::random(type.box(), rng));
    }
    return inputs;
}

struct EinsumCase {
    std::string equation;
    std::string join;
    std::string agg;
    bool blas; // whether the contraction path (sgemm) applies
    int64_t max_extent;
};

void PrintTo(const EinsumCase& c, std::ostream* os) {
    *os << c.equation << (c.join.empty() ? "" : " join=" + c.join)
        << (c.agg.empty() ? "" : " agg=" + c.agg);
}

class EinsumLayoutTest : public testing::TestWithParam<EinsumCase> {};

TEST_P(EinsumLayoutTest, SplitsMatchReference) {
    const EinsumCase& c = GetParam();
    const uint64_t seed = seed_for(c.equation + c.join + c.agg);
    std::cout << c.equation << " seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 4; ++trial) {
        SCOPED_TRACE(absl::StrCat(c.equation, " seed ", seed, " trial ", trial));
        ir::OperatorPtr op =
            make_einsum(c.equation, random_types(c.equation, rng, c.max_extent), c.join, c.agg);
        ASSERT_NE(op, nullptr);
        EXPECT_EQ(uses_gemm(*op), c.blas);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng);
        check_function(*op, inputs, op->whole_spec().functions[0]);
        check_random_spec(*op, inputs, rng);
    }
}

INSTANTIATE_TEST_SUITE_P(
    Contractions, EinsumLayoutTest,
    testing::Values(EinsumCase{"ij,jk->ik", "", "", true, 40},      // matmul
                    EinsumCase{"ji,jk->ik", "", "", true, 40},      // lhs transposed
                    EinsumCase{"ij,kj->ik", "", "", true, 40},      // rhs transposed
                    EinsumCase{"ji,kj->ki", "", "", true, 40},      // both, output transposed
                    EinsumCase{"ij,jk->ki", "", "", true, 40},      // output permuted
                    EinsumCase{"bij,bjk->bik", "", "", true, 16},   // batched
                    EinsumCase{"ibj,bkj->bki", "", "", true, 16},   // batched, packed lhs
                    EinsumCase{"bhqd,bhkd->bhqk", "", "", true, 9}, // attention scores
                    EinsumCase{"abcd,cde->abe", "", "", true, 9},   // two k indices
                    EinsumCase{"pqik,qpkj->qpji", "", "", true, 7}, // two batch indices
                    EinsumCase{"ij,j->i", "", "", true, 60},        // matrix-vector
                    EinsumCase{"i,i->", "", "", true, 200},         // dot product
                    EinsumCase{"i,j->ij", "", "", true, 40}),       // outer product
    [](const testing::TestParamInfo<EinsumCase>& info) {
        return absl::StrCat("case", info.index);
    });

INSTANTIATE_TEST_SUITE_P(
    Loops, EinsumLayoutTest,
    testing::Values(EinsumCase{"ij,ij->ij", "add", "", false, 60},      // identical layouts
                    EinsumCase{"ij,j->ij", "add", "", false, 60},       // trailing vector
                    EinsumCase{"ij,i->ij", "div", "", false, 60},       // leading vector
                    EinsumCase{"ij,ji->ij", "sub", "", false, 40},      // transposed operand
                    EinsumCase{"j,ij->ji", "max", "", false, 40},       // broadcast, transposed out
                    EinsumCase{"ij->ji", "", "", false, 60},            // transpose
                    EinsumCase{"ijk->ik", "", "max", false, 20},        // middle reduction
                    EinsumCase{"ijk->k", "", "min", false, 20},         // leading reductions
                    EinsumCase{"ij->", "", "sum", false, 80},           // full reduction
                    EinsumCase{"ij->i", "exp", "sum", false, 300},      // long row sums
                    EinsumCase{"ij,jk->ik", "mul", "max", false, 20},   // tropical matmul
                    EinsumCase{"ij,jk->ik", "add", "min", false, 20},   // min-plus
                    EinsumCase{"ij,jk,k->ik", "mul", "sum", false, 20}, // three operands
                    EinsumCase{"i,i,i->i", "mul", "", false, 100}),     // three, element-wise
    [](const testing::TestParamInfo<EinsumCase>& info) {
        return absl::StrCat("case", info.index);
    });

TEST(EinsumF32Test, LargeMatmulMatchesReference) {
    const uint64_t seed = seed_for("large matmul");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    ir::OperatorPtr op =
        make_einsum("ij,kj->ik", {ir::TensorType{ir::DType::f32, {{"i", 150}, {"j", 170}}},
                                  ir::TensorType{ir::DType::f32, {{"k", 130}, {"j", 170}}}});
    ASSERT_NE(op, nullptr);
    const std::vector<HostTensor> inputs = random_inputs(*op, rng);
    check_function(*op, inputs, op->whole_spec().functions[0]);
    check_random_spec(*op, inputs, rng);
}

// run_f32 of one function spec's blocks cut from `whole`, in batch-invariant mode.
std::vector<float> run_invariant(const ir::Operator& op, const std::vector<HostTensor>& whole,
                                 const ir::FunctionSpec& function) {
    std::vector<std::vector<float>> data;
    std::vector<const float*> inputs;
    for (size_t input_idx = 0; input_idx < whole.size(); ++input_idx) {
        data.push_back(to_floats(whole[input_idx].slice(function.inputs[input_idx])));
    }
    for (const std::vector<float>& values : data) {
        inputs.push_back(values.data());
    }
    std::vector<float> out(function.outputs[0].volume(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float*> outputs = {out.data()};
    const BatchInvariantScope invariant(true);
    EXPECT_TRUE(run_f32(op, function, inputs, outputs).ok());
    return out;
}

// In batch-invariant mode an element of a contraction has the same bits in a block of any
// size at any place (a library may not: OpenBLAS gave the last row of an odd block others),
// with B as stored and transposed, and still matches the reference.
TEST(EinsumF32Test, BatchInvariantContractionsGiveAnElementTheSameBitsInEveryBlock) {
    const uint64_t seed = seed_for("batch-invariant contraction");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (const char* equation : {"ij,jk->ik", "ij,kj->ik", "ji,jk->ik"}) {
        SCOPED_TRACE(equation);
        const bool b_transposed = std::string(equation) == "ij,kj->ik";
        const bool a_transposed = std::string(equation) == "ji,jk->ik";
        ir::TensorType a{ir::DType::f32, {{"i", 24}, {"j", 64}}};
        ir::TensorType b{ir::DType::f32, {{"j", 64}, {"k", 48}}};
        if (a_transposed) {
            a = ir::TensorType{ir::DType::f32, {{"j", 64}, {"i", 24}}};
        }
        if (b_transposed) {
            b = ir::TensorType{ir::DType::f32, {{"k", 48}, {"j", 64}}};
        }
        ir::OperatorPtr op = make_einsum(equation, {a, b});
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng);
        const ir::FunctionSpec whole_function = op->whole_spec().functions[0];
        const std::vector<float> whole = run_invariant(*op, inputs, whole_function);
        {
            const BatchInvariantScope invariant(true);
            check_function(*op, inputs, whole_function);
        }
        // Rows cut 3 | 5 | 16 and columns 5 | 11 | 32; the contracted index whole.
        const std::vector<ir::ShardableIndex> indices = op->shardable_indices();
        ir::IntervalRequest request(indices.size(), {Interval{0, 64}});
        for (size_t index = 0; index < request.size(); ++index) {
            const std::string& name = indices[index].name;
            if (name == "i") {
                request[index] = {Interval{0, 3}, Interval{3, 8}, Interval{8, 24}};
            } else if (name == "k") {
                request[index] = {Interval{0, 5}, Interval{5, 16}, Interval{16, 48}};
            }
        }
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        for (const ir::FunctionSpec& function : spec->functions) {
            const Box& box = function.outputs[0];
            const std::vector<float> block = run_invariant(*op, inputs, function);
            for (int64_t row = box[0].lower; row < box[0].upper; ++row) {
                for (int64_t col = box[1].lower; col < box[1].upper; ++col) {
                    const float got =
                        block[(row - box[0].lower) * box[1].size() + (col - box[1].lower)];
                    ASSERT_EQ(std::bit_cast<uint32_t>(got),
                              std::bit_cast<uint32_t>(whole[row * 48 + col]))
                        << "element (" << row << ", " << col << ") in block " << box.to_string();
                }
            }
        }
    }
    EXPECT_FALSE(batch_invariant()); // the scopes ended
}

TEST(EinsumF32Test, EveryUnaryJoinMatchesReference) {
    // Positive inputs so log, sqrt, rsqrt, reciprocal and pow_scalar stay finite.
    const uint64_t seed = seed_for("unary joins");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const ir::TensorType type{ir::DType::f32, {{"i", 7}, {"j", 33}}};
    for (const char* fn :
         {"identity", "neg", "abs", "relu", "gelu", "silu", "sigmoid", "tanh", "exp", "log", "sqrt",
          "rsqrt", "square", "reciprocal", "scale", "add_scalar", "pow_scalar", "leaky_relu"}) {
        SCOPED_TRACE(fn);
        for (const char* equation : {"ij->ij", "ij->ji", "ij->j"}) {
            absl::StatusOr<ir::OperatorPtr> op = ir::Einsum::make(
                {{"equation", std::string(equation)}, {"join", std::string(fn)}, {"constant", 1.5}},
                {type});
            ASSERT_TRUE(op.ok()) << op.status();
            const std::vector<HostTensor> inputs = {HostTensor::random(type.box(), rng, 0.5, 2.0)};
            check_random_spec(**op, inputs, rng);
        }
    }
}

// ---- attention ------------------------------------------------------------------------------

ir::OperatorPtr make_attention(int64_t sequence, int64_t heads_kv, int64_t group, int64_t head_dim,
                               int64_t value_dim, bool causal, std::vector<int64_t> ends,
                               double scale = 0.0) {
    const ir::Dim seq{"sequence", sequence};
    const ir::TensorType q{ir::DType::f32,
                           {seq, {"heads_q", heads_kv * group}, {"d_head", head_dim}}};
    const ir::TensorType k{ir::DType::f32, {seq, {"heads_kv", heads_kv}, {"d_head", head_dim}}};
    const ir::TensorType v{ir::DType::f32, {seq, {"heads_kv", heads_kv}, {"d_v", value_dim}}};
    ir::Attributes attributes = {{"causal", causal}, {"sequence_ends", std::move(ends)}};
    if (scale != 0.0) {
        attributes.set("scale", scale);
    }
    absl::StatusOr<ir::OperatorPtr> op = ir::make_operator("attention", attributes, {q, k, v});
    EXPECT_TRUE(op.ok()) << op.status();
    return op.ok() ? *std::move(op) : nullptr;
}

// The attention most tests here use: 250 positions packed into sequences ending at 37, 110, 111
// and 250, 2 kv heads of 3 query heads, d = 64, d_v = 24. A tile is then 21 positions and 65 keys
// (attention_f32.cc): sequences span several of both; one holds a single token.
ir::OperatorPtr packed_attention(bool causal) {
    return make_attention(250, 2, 3, 64, 24, causal, {37, 110, 111, 250});
}

// Every function spec of a request that cuts the sequence at the given ends and heads_kv.
void check_every_function(const ir::Operator& op, const ir::IntervalRequest& request,
                          std::mt19937_64& rng) {
    const std::vector<HostTensor> inputs = random_inputs(op, rng);
    absl::StatusOr<ir::JoinAggSpec> spec = op.spec(request);
    ASSERT_TRUE(spec.ok()) << spec.status();
    for (const ir::FunctionSpec& function : spec->functions) {
        SCOPED_TRACE(absl::StrCat("function ", function_string(function)));
        check_function(op, inputs, function);
    }
    check_function(op, inputs, op.whole_spec().functions[0]);
}

TEST(AttentionF32Test, CausalGqaOverPackedSequencesSplitAtSequenceEnds) {
    const uint64_t seed = seed_for("causal gqa");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = packed_attention(causal);
        ASSERT_NE(op, nullptr);
        const ir::IntervalRequest request = {
            {{0, 37}, {37, 111}, {111, 250}}, {{0, 1}, {1, 2}}, {{0, 250}}};
        check_every_function(*op, request, rng);
    }
}

TEST(AttentionF32Test, ScaleAttributeAndWideGroups) {
    const uint64_t seed = seed_for("attention scale");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    ir::OperatorPtr op = make_attention(70, 1, 8, 5, 3, true, {20, 70}, 0.7);
    ASSERT_NE(op, nullptr);
    check_every_function(*op, {{{0, 20}, {20, 70}}, {{0, 1}}, {{0, 70}}}, rng);
}

// In batch-invariant mode a query row's output has the same bits whatever block of rows it is
// run in: a block's query tiles start where its rows start, so a row batched with other requests
// lies at another place in its tile, and a gemm library's bits for a row may depend on that
// (OpenBLAS 0.3.21's SSE3 kernels' did). Nor is the library called.
TEST(AttentionF32Test, BatchInvariantAttentionGivesARowTheSameBitsInEveryBlock) {
    const uint64_t seed = seed_for("batch-invariant attention");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = packed_attention(causal);
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> inputs = random_inputs(*op, rng);
        const int64_t calls = gemm_library_calls();
        const std::vector<float> whole = run_invariant(*op, inputs, op->whole_spec().functions[0]);
        {
            const BatchInvariantScope invariant(true);
            check_function(*op, inputs, op->whole_spec().functions[0]);
        }
        // Rows cut inside sequences, at places that are not multiples of a tile (21 positions).
        const ir::IntervalRequest request = {
            {{0, 5}, {5, 44}, {44, 111}, {111, 119}, {119, 250}}, {{0, 1}, {1, 2}}, {{0, 250}}};
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        const int64_t row_width = 6 * 24; // heads_q · d_v
        for (const ir::FunctionSpec& function : spec->functions) {
            const Box& box = function.outputs[0];
            const std::vector<float> block = run_invariant(*op, inputs, function);
            for (int64_t row = box[0].lower; row < box[0].upper; ++row) {
                for (int64_t head = box[1].lower; head < box[1].upper; ++head) {
                    for (int64_t col = 0; col < 24; ++col) {
                        const float got =
                            block[((row - box[0].lower) * box[1].size() + head - box[1].lower) *
                                      24 +
                                  col];
                        ASSERT_EQ(std::bit_cast<uint32_t>(got),
                                  std::bit_cast<uint32_t>(whole[row * row_width + head * 24 + col]))
                            << "row " << row << ", head " << head << ", column " << col
                            << " in block " << box.to_string();
                    }
                }
            }
        }
        EXPECT_EQ(gemm_library_calls(), calls) << "batch-invariant attention called the library";
    }
}

// A NaN in one sequence's values changes no bit of another sequence's rows (batch-invariant
// mode: a request must not depend on what it is batched with). Values that are not finite take
// another sum (a key of weight 0 reads no value, docs/operators.md), chosen per tile from the
// tile's own keys, never for the whole block.
TEST(AttentionF32Test, ANanInOneSequencesValuesLeavesTheOthersBitsAlone) {
    const uint64_t seed = seed_for("attention nan values");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = packed_attention(causal);
        ASSERT_NE(op, nullptr);
        std::vector<HostTensor> inputs = random_inputs(*op, rng);
        const ir::FunctionSpec whole = op->whole_spec().functions[0];
        const std::vector<float> clean = run_invariant(*op, inputs, whole);
        // v is [sequence, heads_kv, d_v]: a NaN at row 200 (the last sequence), kv head 1.
        inputs[2].data()[(200 * 2 + 1) * 24 + 5] = std::numeric_limits<double>::quiet_NaN();
        const std::vector<float> poisoned = run_invariant(*op, inputs, whole);
        const int64_t row_width = 6 * 24;
        for (int64_t idx = 0; idx < 111 * row_width; ++idx) {
            ASSERT_EQ(std::bit_cast<uint32_t>(poisoned[idx]), std::bit_cast<uint32_t>(clean[idx]))
                << "row " << idx / row_width << " of an earlier sequence changed";
        }
        if (!causal) { // every row of the last sequence sees key 200 (weight > 0): NaN there
            EXPECT_TRUE(std::isnan(poisoned[120 * row_width + 3 * 24 + 5]));
        }
    }
}

// The kernel's partial result of `function` (partial_f32: the output normalised over its key
// block and each row's log-sum-exp) against the reference's (Operator::reference_partial), on
// the blocks of `whole` the function reads.
void expect_partial_matches_reference(const ir::Operator& op, const ir::FunctionSpec& function,
                                      const std::vector<HostTensor>& whole) {
    const StagedInputs staged = stage_inputs(whole, function);
    absl::StatusOr<std::vector<ir::PartialBlock>> expected =
        op.reference_partial(staged.blocks, function);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const Box& out_box = function.outputs[0];
    std::vector<float> output(out_box.volume(), std::numeric_limits<float>::quiet_NaN());
    std::vector<float> lse(ir::stats_count(out_box), std::numeric_limits<float>::quiet_NaN());
    ASSERT_TRUE(partial_f32(op, function, staged.pointers, output.data(), lse.data()).ok());
    EXPECT_LE(ir::max_relative_error(from_floats(out_box, output), (*expected)[0].values),
              kTolerance);
    ASSERT_EQ(lse.size(), (*expected)[0].stats.size());
    for (size_t slot = 0; slot < lse.size(); ++slot) {
        const double want = (*expected)[0].stats[slot];
        if (std::isinf(want)) {
            EXPECT_TRUE(std::isinf(lse[slot]) && lse[slot] < 0) << "slot " << slot;
        } else {
            EXPECT_NEAR(lse[slot], want, 1e-4 * std::max(1.0, std::abs(want))) << "slot " << slot;
        }
    }
}

// Queries and keys cut anywhere, inside packed sequences. Every function's partial
// result — the output normalised over its key block and each (row, query head)'s log-sum-exp —
// matches the reference's (Operator::reference_partial).
TEST(AttentionF32Test, KeyBlocksInsideSequencesGiveThePartialAndItsLogSumExp) {
    const uint64_t seed = seed_for("attention key blocks");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    for (bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        ir::OperatorPtr op = packed_attention(causal);
        ASSERT_NE(op, nullptr);
        const std::vector<HostTensor> whole = random_inputs(*op, rng);
        const ir::IntervalRequest request = {{{0, 20}, {20, 90}, {90, 250}},
                                             {{0, 1}, {1, 2}},
                                             {{0, 30}, {30, 100}, {100, 180}, {180, 250}}};
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        ASSERT_LT(spec->functions.size(), 24u) << "pairs without work are left out";
        for (const ir::FunctionSpec& function : spec->functions) {
            SCOPED_TRACE(absl::StrCat("function ", function_string(function)));
            expect_partial_matches_reference(*op, function, whole);
        }
    }
}

// Paged attention (k and v a pool of pages read through a page table): three decode-shaped
// sequences over pages of 16 placed at random in a pool (sequence 0's first ten in a row, so
// the kernel's runs merge them into a run longer than its key tile), GQA, causal and not, split by
// queries, kv heads and pool rows that cut pages. Every function's partial and log-sum-exp match
// the reference's.
TEST(AttentionF32Test, PagedKeysGiveTheReferencePartialForEverySplit) {
    const uint64_t seed = seed_for("paged attention");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const int64_t page_size = 16;
    const int64_t pool_pages = 30;
    const int64_t pages_per_sequence = 12;
    const std::vector<int64_t> fills = {170, 17, 40};
    // Entries past a fill are read by no one.
    const std::vector<int64_t> table = {4,  5,  6,  7, 8, 9, 10, 11, 12, 13, 28, 3,
                                        22, 14, 0,  0, 0, 0, 0,  0,  0,  0,  0,  0,
                                        27, 21, 19, 1, 1, 1, 1,  1,  1,  1,  1,  1};
    for (const bool causal : {true, false}) {
        SCOPED_TRACE(causal ? "causal" : "bidirectional");
        const int64_t group = 3;
        const ir::TensorType q{ir::DType::f32,
                               {{"sequence", 5}, {"heads_q", 2 * group}, {"d", 32}}};
        const ir::TensorType k{ir::DType::f32,
                               {{"keys", pool_pages * page_size}, {"heads_kv", 2}, {"d", 32}}};
        const ir::TensorType v{ir::DType::f32,
                               {{"keys", pool_pages * page_size}, {"heads_kv", 2}, {"d_v", 8}}};
        const ir::TensorType lengths{ir::DType::i32, {{"sequences", 3}}};
        const ir::TensorType pages{ir::DType::i32,
                                   {{"sequences", 3}, {"pages", pages_per_sequence}}};
        absl::StatusOr<ir::OperatorPtr> op =
            ir::make_operator("attention",
                              {{"causal", causal},
                               {"sequence_ends", std::vector<int64_t>{2, 3, 5}},
                               {"page_size", page_size}},
                              {q, k, v, lengths, pages});
        ASSERT_TRUE(op.ok()) << op.status();
        std::vector<HostTensor> whole;
        for (int idx = 0; idx < 3; ++idx) {
            whole.push_back(HostTensor::random((*op)->input_types()[idx].box(), rng));
        }
        whole.push_back(HostTensor(Box({{0, 3}}), std::vector<double>(fills.begin(), fills.end())));
        whole.push_back(HostTensor(Box({{0, 3}, {0, pages_per_sequence}}),
                                   std::vector<double>(table.begin(), table.end())));
        for (const ir::IntervalRequest& request :
             {ir::IntervalRequest{{{0, 5}}, {{0, 2}}, {{0, 480}}},
              ir::IntervalRequest{
                  {{0, 2}, {2, 5}}, {{0, 1}, {1, 2}}, {{0, 56}, {56, 200}, {200, 480}}},
              ir::IntervalRequest{{{0, 3}, {3, 5}}, {{0, 2}}, {{0, 7}, {7, 170}, {170, 480}}}}) {
            absl::StatusOr<ir::JoinAggSpec> spec = (*op)->spec(request);
            ASSERT_TRUE(spec.ok()) << spec.status();
            for (const ir::FunctionSpec& function : spec->functions) {
                SCOPED_TRACE(absl::StrCat("function ", function_string(function)));
                expect_partial_matches_reference(**op, function, whole);
            }
        }
    }
}

// The same with NaN, +inf and -inf in q, k and v, over key tiles (64 keys here) and
// key blocks: a NaN or +inf score makes the row and its statistics NaN, a row whose scores are
// all -inf is NaN with statistics -inf, a key of weight 0 — masked by causality, or scoring
// -inf — reads no value (a NaN in v after a query stays out of its row), as the reference.
TEST(AttentionF32Test, NonFiniteInputsGiveTheReferencePartialAndLogSumExp) {
    const uint64_t seed = seed_for("attention non-finite");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const std::vector<int64_t> ends = {37, 110, 111, 250};
    int nan_rows = 0;
    for (int trial = 0; trial < 4; ++trial) {
        const bool causal = trial % 2 == 0;
        SCOPED_TRACE(absl::StrCat("trial ", trial, causal ? ", causal" : ", bidirectional"));
        ir::OperatorPtr op = make_attention(250, 2, 2, 64, 24, causal, ends);
        ASSERT_NE(op, nullptr);
        std::vector<HostTensor> whole = random_inputs(*op, rng);
        for (HostTensor& input : whole) {
            inject_non_finite(input, 3, rng);
        }
        const ir::IntervalRequest request = {
            {{0, 90}, {90, 250}}, {{0, 1}, {1, 2}}, {{0, 30}, {30, 100}, {100, 250}}};
        absl::StatusOr<ir::JoinAggSpec> spec = op->spec(request);
        ASSERT_TRUE(spec.ok()) << spec.status();
        std::vector<ir::FunctionSpec> functions = spec->functions;
        functions.push_back(op->whole_spec().functions[0]);
        for (const ir::FunctionSpec& function : functions) {
            SCOPED_TRACE(absl::StrCat("function ", function_string(function)));
            const StagedInputs staged = stage_inputs(whole, function);
            absl::StatusOr<std::vector<ir::PartialBlock>> expected =
                op->reference_partial(staged.blocks, function);
            ASSERT_TRUE(expected.ok()) << expected.status();
            const Box& out_box = function.outputs[0];
            std::vector<float> output(out_box.volume());
            std::vector<float> lse(ir::stats_count(out_box));
            ASSERT_TRUE(
                partial_f32(*op, function, staged.pointers, output.data(), lse.data()).ok());
            EXPECT_TRUE(agrees_with_reference(from_floats(out_box, output), (*expected)[0].values,
                                              kTolerance));
            const std::vector<double>& want = (*expected)[0].stats;
            ASSERT_EQ(lse.size(), want.size());
            EXPECT_TRUE(agrees_with_reference(from_floats(ir::stats_box(out_box), lse),
                                              HostTensor(ir::stats_box(out_box), want), 1e-5));
            for (double value : want) {
                nan_rows += std::isnan(value) ? 1 : 0;
            }
        }
    }
    EXPECT_GT(nan_rows, 0);
}

// The log-sum-exp ⊕ of the CPU runtime equals the reference's, intermediate statistics included.
TEST(AggregateF32Test, LogSumExpMatchesTheReference) {
    const uint64_t seed = seed_for("aggregate log_sum_exp");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const Box box({{0, 5}, {0, 3}, {0, 4}});
    const int64_t vectors = ir::stats_count(box);
    std::uniform_real_distribution<double> stat(-3.0, 3.0);
    std::vector<ir::PartialBlock> parts;
    for (int p = 0; p < 3; ++p) {
        ir::PartialBlock part{rounded(HostTensor::random(box, rng)), {}};
        for (int64_t v = 0; v < vectors; ++v) {
            // Some vectors have nothing in some parts, one in none.
            part.stats.push_back(v == 0 || (v + p) % 4 == 0
                                     ? -std::numeric_limits<double>::infinity()
                                     : static_cast<double>(static_cast<float>(stat(rng))));
        }
        parts.push_back(std::move(part));
    }
    absl::StatusOr<ir::PartialBlock> expected = ir::combine_log_sum_exp(parts[0], parts[1]);
    ASSERT_TRUE(expected.ok());
    expected = ir::combine_log_sum_exp(*expected, parts[2]);
    ASSERT_TRUE(expected.ok());

    std::vector<std::vector<float>> values, stats;
    std::vector<const float*> value_ptrs, stat_ptrs;
    for (const ir::PartialBlock& part : parts) {
        values.push_back(to_floats(part.values));
        stats.emplace_back(part.stats.begin(), part.stats.end());
    }
    for (size_t p = 0; p < parts.size(); ++p) {
        value_ptrs.push_back(values[p].data());
        stat_ptrs.push_back(stats[p].data());
    }
    std::vector<float> out(box.volume()), out_lse(vectors);
    aggregate_log_sum_exp_f32(value_ptrs, stat_ptrs, out.data(), out_lse.data(), vectors,
                              box.volume() / vectors);
    EXPECT_LE(ir::max_relative_error(from_floats(box, out), expected->values), kTolerance);
    for (int64_t v = 0; v < vectors; ++v) {
        const double want = expected->stats[v];
        if (std::isinf(want)) {
            EXPECT_TRUE(std::isinf(out_lse[v])) << "vector " << v;
        } else {
            EXPECT_NEAR(out_lse[v], want, 1e-5) << "vector " << v;
        }
    }
}

// Statistics that are not finite — NaN (a NaN or +inf score), -inf with NaN values
// (only -inf scores), -inf with zeros (no key) — combine as the reference does, in every order of
// the parts.
TEST(AggregateF32Test, LogSumExpOfNonFiniteStatisticsMatchesTheReferenceInAnyOrder) {
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    constexpr double kInf = std::numeric_limits<double>::infinity();
    const Box box({{0, 1}, {0, 2}});
    auto part = [&](double lse, double value) {
        return ir::PartialBlock{HostTensor(box, {value, -value}), {lse}};
    };
    const std::vector<std::vector<ir::PartialBlock>> cases = {
        {part(0.5, 3.0), part(kNaN, kNaN), part(-kInf, 0.0)},
        {part(0.5, 3.0), part(-kInf, kNaN), part(-kInf, 0.0)},
        {part(-kInf, kNaN), part(-kInf, 0.0), part(-kInf, 0.0)},
        {part(-kInf, 0.0), part(-kInf, 0.0), part(-kInf, 0.0)},
        {part(0.5, 3.0), part(1.5, kInf), part(-kInf, kNaN)},
    };
    for (size_t case_idx = 0; case_idx < cases.size(); ++case_idx) {
        std::vector<int> order = {0, 1, 2};
        do {
            SCOPED_TRACE(absl::StrCat("case ", case_idx, ", order ", order[0], order[1], order[2]));
            const std::vector<ir::PartialBlock>& parts = cases[case_idx];
            absl::StatusOr<ir::PartialBlock> expected =
                ir::combine_log_sum_exp(parts[order[0]], parts[order[1]]);
            ASSERT_TRUE(expected.ok());
            expected = ir::combine_log_sum_exp(*expected, parts[order[2]]);
            ASSERT_TRUE(expected.ok());
            std::vector<std::vector<float>> values, stats;
            for (int p : order) {
                values.push_back(to_floats(parts[p].values));
                stats.emplace_back(parts[p].stats.begin(), parts[p].stats.end());
            }
            std::vector<const float*> value_ptrs, stat_ptrs;
            for (size_t p = 0; p < values.size(); ++p) {
                value_ptrs.push_back(values[p].data());
                stat_ptrs.push_back(stats[p].data());
            }
            std::vector<float> out(2), out_lse(1);
            aggregate_log_sum_exp_f32(value_ptrs, stat_ptrs, out.data(), out_lse.data(), 1, 2);
            EXPECT_TRUE(agrees_with_reference(from_floats(box, out), expected->values, 1e-6));
            EXPECT_TRUE(agrees_with_reference(from_floats(Box({{0, 1}}), out_lse),
                                              HostTensor(Box({{0, 1}}), expected->stats), 1e-6));
        } while (std::next_permutation(order.begin(), order.end()));
    }
}

// ---- argmax ---------------------------------------------------------------------------------

// Logits with ties and non-finite values split along the vocabulary: each block's partial
// kernel gives the reference's (index, element) pairs, and the arg-max ⊕ of the blocks' pairs,
// in any order, gives the whole row's first largest element and that element (NaN when the
// row holds NaN).
TEST(ArgMaxF32Test, VocabularyBlocksGiveTheReferencePairsAndCombineInAnyOrder) {
    const uint64_t seed = seed_for("argmax vocabulary blocks");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    constexpr int64_t kRows = 6;
    constexpr int64_t kVocab = 11;
    absl::StatusOr<ir::OperatorPtr> op = ir::make_operator(
        "argmax", {}, {ir::TensorType{ir::DType::f32, {{"tokens", kRows}, {"vocab", kVocab}}}});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<float> palette = {0.5f,          2.0f,     2.0f,     -1.0f,
                                        std::nanf(""), INFINITY, -INFINITY};
    for (int trial = 0; trial < 50; ++trial) {
        SCOPED_TRACE(absl::StrCat("seed ", seed, " trial ", trial));
        std::vector<double> data(kRows * kVocab);
        for (double& value : data) {
            value = rng() % 3 == 0 ? palette[rng() % palette.size()] : (rng() % 5) * 0.25;
        }
        const HostTensor whole(Box::from_shape({kRows, kVocab}), data);
        std::vector<Interval> columns;
        for (int64_t begin = 0; begin < kVocab;) {
            const int64_t end =
                std::min<int64_t>(kVocab, begin + 1 + static_cast<int64_t>(rng() % 4));
            columns.push_back({begin, end});
            begin = end;
        }
        absl::StatusOr<ir::JoinAggSpec> spec = (*op)->spec({{{0, kRows}}, columns});
        ASSERT_TRUE(spec.ok()) << spec.status();
        std::vector<std::vector<float>> indices;
        std::vector<std::vector<float>> stats;
        for (const ir::FunctionSpec& function : spec->functions) {
            const StagedInputs staged = stage_inputs({whole}, function);
            absl::StatusOr<std::vector<ir::PartialBlock>> expected =
                (*op)->reference_partial(staged.blocks, function);
            ASSERT_TRUE(expected.ok()) << expected.status();
            std::vector<float> index(kRows), stat(kRows);
            ASSERT_TRUE(
                partial_f32(**op, function, staged.pointers, index.data(), stat.data()).ok());
            EXPECT_TRUE(agrees_with_reference(from_floats(function.outputs[0], index),
                                              (*expected)[0].values, 0.0));
            EXPECT_TRUE(agrees_with_reference(from_floats(function.outputs[0], stat),
                                              HostTensor(function.outputs[0], (*expected)[0].stats),
                                              0.0));
            indices.push_back(std::move(index));
            stats.push_back(std::move(stat));
        }
        absl::StatusOr<std::vector<HostTensor>> want = ir::execute_whole(**op, {whole});
        ASSERT_TRUE(want.ok()) << want.status();
        // Each row's largest element, NaN when any is (an einsum max over the vocabulary).
        std::vector<double> largest(kRows);
        for (int64_t row = 0; row < kRows; ++row) {
            largest[row] = data[row * kVocab + static_cast<int64_t>((*want)[0].data()[row])];
            for (int64_t v = 0; v < kVocab; ++v) {
                largest[row] =
                    std::isnan(data[row * kVocab + v]) ? data[row * kVocab + v] : largest[row];
                EXPECT_TRUE(std::isnan(largest[row]) || !(data[row * kVocab + v] > largest[row]))
                    << "row " << row << " column " << v;
            }
        }
        std::vector<size_t> order(indices.size());
        for (size_t idx = 0; idx < order.size(); ++idx) {
            order[idx] = idx;
        }
        for (int shuffle = 0; shuffle < 4; ++shuffle) {
            std::shuffle(order.begin(), order.end(), rng);
            std::vector<const float*> index_parts;
            std::vector<const float*> stat_parts;
            for (size_t idx : order) {
                index_parts.push_back(indices[idx].data());
                stat_parts.push_back(stats[idx].data());
            }
            std::vector<float> combined(kRows), combined_stats(kRows);
            aggregate_arg_max_f32(index_parts, stat_parts, combined.data(), combined_stats.data(),
                                  kRows);
            EXPECT_TRUE(
                agrees_with_reference(from_floats((*want)[0].box(), combined), (*want)[0], 0.0));
            EXPECT_TRUE(agrees_with_reference(from_floats((*want)[0].box(), combined_stats),
                                              HostTensor((*want)[0].box(), largest), 0.0));
        }
    }
}

// ---- rope -----------------------------------------------------------------------------------

TEST(RopeF32Test, BlockStartingMidSequence) {
    const uint64_t seed = seed_for("rope mid sequence");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    const ir::TensorType x{ir::DType::f32, {{"tokens", 40}, {"heads", 3}, {"d_head", 8}}};
    absl::StatusOr<ir::OperatorPtr> op = ir::make_operator(
        "rope", {{"theta", 100.0}, {"sequence_ends", std::vector<int64_t>{10, 40}}}, {x});
    ASSERT_TRUE(op.ok()) << op.status();
    const std::vector<HostTensor> inputs = random_inputs(**op, rng);
    // Tokens [17, 29): positions 7..18 of the sequence that starts at 10.
    const ir::FunctionSpec function{{Box({{17, 29}, {1, 3}, {0, 8}})},
                                    {Box({{17, 29}, {1, 3}, {0, 8}})}};
    check_function(**op, inputs, function);

    // Token 17, head 1, pair (0, 4): angle = 7 · 100^0 = 7.
    const HostTensor block = rounded(inputs[0].slice(function.inputs[0]));
    const std::vector<float> data = to_floats(block);
    std::vector<float> out(data.size());
    const float* in_ptr = data.data();
    float* out_ptr = out.data();
    ASSERT_TRUE(run_f32(**op, function, {&in_ptr, 1}, {&out_ptr, 1}).ok());
    const double x0 = block.at({17, 1, 0});
    const double x4 = block.at({17, 1, 4});
    EXPECT_NEAR(out[0], x0 * std::cos(7.0) - x4 * std::sin(7.0), 1e-6);
    EXPECT_NEAR(out[4], x0 * std::sin(7.0) + x4 * std::cos(7.0), 1e-6);

    // Every split of the tokens, anywhere.
    check_random_spec(**op, inputs, rng);
}

// ---- aggregate_f32 --------------------------------------------------------------------------

TEST(AggregateF32Test, SumMaxMinAndNone) {
    const uint64_t seed = seed_for("aggregate");
    std::cout << "seed " << seed << "\n";
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    const int64_t n = 1003;
    std::vector<std::vector<float>> parts(3, std::vector<float>(n));
    for (std::vector<float>& part : parts) {
        for (float& x : part) {
            x = value(rng);
        }
    }
    const std::vector<const float*> pointers = {parts[0].data(), parts[1].data(), parts[2].data()};
    std::vector<float> out(n);
    for (ir::AggOp op : {ir::AggOp::sum, ir::AggOp::max, ir::AggOp::min}) {
        SCOPED_TRACE(ir::agg_op_name(op));
        aggregate_f32(op, pointers, out.data(), n);
        for (int64_t idx = 0; idx < n; ++idx) {
            float expected = parts[0][idx];
            for (int part = 1; part < 3; ++part) {
                expected = static_cast<float>(ir::aggregate(op, expected, parts[part][idx]));
            }
            ASSERT_FLOAT_EQ(out[idx], expected) << "element " << idx;
        }
    }
    aggregate_f32(ir::AggOp::sum, {pointers.data(), 1}, out.data(), n);
    EXPECT_EQ(out, parts[0]);

    // A NaN part makes max and min NaN wherever it lies among the parts, and sum
    // follows IEEE (inf + -inf is NaN).
    const float nan = std::numeric_limits<float>::quiet_NaN();
    const float inf = std::numeric_limits<float>::infinity();
    for (int nan_part = 0; nan_part < 3; ++nan_part) {
        std::vector<std::vector<float>> special(3, std::vector<float>{1.0f, -inf, inf});
        special[static_cast<size_t>(nan_part)] = {nan, nan, nan};
        const std::vector<const float*> special_pointers = {special[0].data(), special[1].data(),
                                                            special[2].data()};
        std::vector<float> special_out(3);
        for (ir::AggOp op : {ir::AggOp::sum, ir::AggOp::max, ir::AggOp::min}) {
            aggregate_f32(op, special_pointers, special_out.data(), 3);
            for (float value : special_out) {
                EXPECT_TRUE(std::isnan(value))
                    << ir::agg_op_name(op) << ", NaN in part " << nan_part << ": " << value;
            }
        }
    }
    const std::vector<float> plus = {inf}, minus = {-inf};
    const std::vector<const float*> opposite = {plus.data(), minus.data()};
    aggregate_f32(ir::AggOp::sum, opposite, out.data(), 1);
    EXPECT_TRUE(std::isnan(out[0]));
    aggregate_f32(ir::AggOp::max, opposite, out.data(), 1);
    EXPECT_EQ(out[0], inf);
    aggregate_f32(ir::AggOp::none, {pointers.data(), 1}, out.data(), n);
    EXPECT_EQ(out, parts[0]);
}

// ---- fast_exp -------------------------------------------------------------------------------

TEST(FastExpTest, MatchesStdExpOverTheFloatRange) {
    // Every 4099th float from -120 to 100, then the special values.
    std::vector<float> samples;
    for (float x = -120.0f; x < 100.0f;) {
        samples.push_back(x);
        const uint32_t bits = std::bit_cast<uint32_t>(x);
        // Walk the bit patterns: downwards in magnitude for negatives, upwards for positives.
        x = x < 0.0f ? (bits - 4099 > 0x80000000u ? std::bit_cast<float>(bits - 4099) : 0.0f)
                     : std::bit_cast<float>(bits + 4099);
    }
    for (float special : {0.0f, -0.0f, 1.0f, -1.0f, 88.7f, 88.72f, 88.73f, 89.0f, 1e30f, -87.5f,
                          -103.9f, -104.0f, -110.0f, -1e30f}) {
        samples.push_back(special);
    }
    for (float x : samples) {
        const auto expected = static_cast<float>(std::exp(static_cast<double>(x)));
        const float got = fast_exp(x);
        if (std::isinf(expected) || expected == 0.0f) {
            // Results at the ends of the range round either way by an ulp.
            EXPECT_TRUE(got == expected || std::abs(got - expected) <= 2.0f * FLT_TRUE_MIN ||
                        (std::isinf(expected) && got > 3.4e38f))
                << "x=" << x << " got " << got << " expected " << expected;
        } else if (expected < std::numeric_limits<float>::min()) { // subnormal result
            EXPECT_LE(std::abs(got - expected), 2.0f * FLT_TRUE_MIN) << "x=" << x;
        } else {
            EXPECT_LE(std::abs(got - expected), 4.0f * 1.1920929e-7f * expected)
                << "x=" << x << " got " << got << " expected " << expected;
        }
    }
    EXPECT_EQ(fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_EQ(fast_exp(std::numeric_limits<float>::infinity()),
              std::numeric_limits<float>::infinity());
    EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

// ---- errors ---------------------------------------------------------------------------------

// An operator kind no kernel knows.
class MysteryOp final : public ir::Operator {
public:
    explicit MysteryOp(const ir::TensorType& type) : Operator({}, {type}, {type}) {}
    absl::string_view kind() const override { return "mystery"; }
    std::vector<ir::ShardableIndex> shardable_indices() const override { return {}; }
    double flops(const ir::FunctionSpec&) const override { return 0.0; }

protected:
    ir::SpecLayout layout() const override {
        return {{ir::whole_dims(input_types()[0])},
                {ir::whole_dims(output_types()[0])},
                {ir::AggOp::none}};
    }
    std::vector<HostTensor> compute(absl::Span<const HostTensor> inputs,
                                    const ir::FunctionSpec&) const override {
        return {inputs[0]};
    }
};

TEST(RunF32ErrorTest, WrongBlockCountsAndUnknownKind) {
    const ir::TensorType a{ir::DType::f32, {{"i", 4}, {"j", 3}}};
    const ir::TensorType b{ir::DType::f32, {{"j", 3}, {"k", 2}}};
    ir::OperatorPtr op = make_einsum("ij,jk->ik", {a, b});
    ASSERT_NE(op, nullptr);
    const ir::FunctionSpec function = op->whole_spec().functions[0];
    std::vector<float> lhs(12, 1.0f);
    std::vector<float> rhs(6, 1.0f);
    std::vector<float> out(8, 0.0f);
    const float* two_inputs[] = {lhs.data(), rhs.data()};
    float* one_output[] = {out.data()};

    absl::Status status = run_f32(*op, function, {two_inputs, 1}, one_output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), op->describe())) << status;

    float* two_outputs[] = {out.data(), out.data()};
    status = run_f32(*op, function, two_inputs, two_outputs);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), op->describe())) << status;

    ir::FunctionSpec short_function = function;
    short_function.inputs.pop_back();
    status = run_f32(*op, short_function, two_inputs, one_output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;

    // Blocks whose extents disagree on j, and a block outside its type.
    ir::FunctionSpec inconsistent = function;
    inconsistent.inputs[1] = Box({{0, 2}, {0, 2}});
    status = run_f32(*op, inconsistent, two_inputs, one_output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    ir::FunctionSpec outside = function;
    outside.outputs[0] = Box({{0, 4}, {1, 3}});
    status = run_f32(*op, outside, two_inputs, one_output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;

    ASSERT_TRUE(run_f32(*op, function, two_inputs, one_output).ok());
    EXPECT_EQ(out, std::vector<float>(8, 3.0f));

    const MysteryOp mystery(a);
    status = run_f32(mystery, mystery.whole_spec().functions[0], {two_inputs, 1}, one_output);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), "mystery")) << status;
}

} // namespace
} // namespace einsummable::kernels::cpu
