// Non-finite inputs (NaN, +inf, -inf) give the same result on every plan, and that
// result is the double-precision reference's (docs/operators.md, "Non-finite inputs"). Outputs
// are compared element by element: NaN where the reference has NaN, the reference's infinity
// exactly, finite values within the f32 tolerance.
//
//   - the reported case: causal attention with one query element NaN gives that query's NaN
//     row on 1 to 4 devices (it gave 0.0 where the plan split the keys);
//   - a property: random operators of every kind (tests/unit/ir/random_cases.h) with NaN, +inf
//     and -inf injected at random positions of random inputs, each planned by every planner
//     on 1 to 8 devices (planner and device count rotate over the cases), on the CPU backend;
//   - a small LLaMA block with a few non-finite inputs on every planner.
//
// Seeded: the seed is printed and EINSUMMABLE_TEST_SEED replays a run.

#include <cmath>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/operator_registry.h"
#include "compiler/ir/spec_execution.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/workloads/by_name.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/ir/random_cases.h"
#include "tests/unit/runtime/exec_run.h"

namespace einsummable::runtime {
namespace {

constexpr double kF32Tolerance = 1e-5; // output_tolerance(f32)
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Where `got` departs from `expected`, or "" when it does not: NaN exactly where the reference
// has NaN, the reference's infinities exactly, finite values within `tolerance` relative to the
// largest finite magnitude of the reference (at least 1), as ir::max_relative_error scales.
std::string first_mismatch(const std::vector<float>& got, const ir::HostTensor& expected,
                           double tolerance) {
    if (static_cast<int64_t>(got.size()) != expected.size()) {
        return absl::StrCat(got.size(), " elements, the reference has ", expected.size());
    }
    double scale = 1.0;
    for (double value : expected.values()) {
        if (std::isfinite(value)) {
            scale = std::max(scale, std::abs(value));
        }
    }
    for (int64_t idx = 0; idx < expected.size(); ++idx) {
        const double want = expected.data()[idx];
        const double have = got[static_cast<size_t>(idx)];
        const bool same = std::isnan(want) ? std::isnan(have)
                          : std::isinf(want)
                              ? have == want
                              : std::isfinite(have) && std::abs(have - want) <= tolerance * scale;
        if (!same) {
            return absl::StrCat("element ", idx, ": ", have, ", the reference ", want);
        }
    }
    return "";
}

// Inputs as the plan loads them (f32) and as the reference reads them (the same values).
struct Inputs {
    std::map<std::string, std::vector<float>> values;
    std::map<std::string, ir::HostTensor> host;
};

Inputs make_inputs(const ir::Graph& graph, std::map<std::string, ir::HostTensor> whole) {
    Inputs inputs;
    for (auto& [name, tensor] : whole) {
        std::vector<float> values(tensor.values().begin(), tensor.values().end());
        inputs.host.emplace(
            name, ir::HostTensor(tensor.box(), std::vector<double>(values.begin(), values.end())));
        inputs.values.emplace(name, std::move(values));
    }
    EXPECT_EQ(inputs.values.size(), graph.inputs().size());
    return inputs;
}

// Puts NaN, +inf or -inf at `count` random positions of `tensor` (none when it is empty).
void inject(ir::HostTensor& tensor, int count, std::mt19937_64& rng) {
    if (tensor.size() == 0) {
        return;
    }
    std::uniform_int_distribution<int64_t> position(0, tensor.size() - 1);
    std::uniform_int_distribution<int> kind(0, 2);
    for (int idx = 0; idx < count; ++idx) {
        const double values[] = {kNaN, kInf, -kInf};
        tensor.data()[position(rng)] = values[kind(rng)];
    }
}

bool has_non_finite(const ir::HostTensor& tensor) {
    for (double value : tensor.values()) {
        if (!std::isfinite(value)) {
            return true;
        }
    }
    return false;
}

struct Outcome {
    bool compiled = false;
    std::string mismatch; // "" when every saved output matches the reference
};

// Compiles `graph` for the CPU backend, runs it on `inputs` and compares every saved output
// with the double-precision reference.
Outcome run_plan(ir::Graph graph, const Inputs& inputs, int devices, logical::Planner planner,
                 uint64_t seed, bool batch_invariant = false) {
    Outcome outcome;
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(graph, inputs.host);
    EXPECT_TRUE(reference.ok()) << reference.status();
    if (!reference.ok()) {
        return outcome;
    }
    CompileOptions options;
    options.devices = devices;
    options.planner = planner;
    options.seed = seed;
    options.schedule = exprog::SynthesisMode::naive;
    options.synthesis_iterations = 4;
    options.batch_invariant = batch_invariant;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(std::move(graph), options, cpu::make_cpu_backend({devices, 1}));
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) {
        return outcome;
    }
    outcome.compiled = true;
    for (const auto& [name, values] : inputs.values) {
        const absl::Status loaded = (*plan)->load(name, values);
        EXPECT_TRUE(loaded.ok()) << loaded;
    }
    const absl::Status executed = (*plan)->execute();
    EXPECT_TRUE(executed.ok()) << executed;
    for (const auto& [name, expected] : *reference) {
        absl::StatusOr<std::vector<float>> got = (*plan)->offload(name);
        EXPECT_TRUE(got.ok()) << got.status();
        if (!got.ok()) {
            continue;
        }
        const std::string mismatch = first_mismatch(*got, expected, kF32Tolerance);
        if (!mismatch.empty() && outcome.mismatch.empty()) {
            outcome.mismatch = absl::StrCat("output '", name, "' ", mismatch);
        }
    }
    return outcome;
}

// q, k, v [sequence=12, heads=2, d=4] -> causal attention, saved.
ir::Graph causal_attention_graph() {
    ir::Graph graph;
    const std::vector<ir::Dim> qk = {{"sequence", 12}, {"heads", 2}, {"d_head", 4}};
    const ir::TensorId q = *graph.add_input("q", ir::DType::f32, qk);
    const ir::TensorId k = *graph.add_input("k", ir::DType::f32, qk);
    const ir::TensorId v =
        *graph.add_input("v", ir::DType::f32, {{"sequence", 12}, {"heads", 2}, {"d_v", 4}});
    const absl::StatusOr<ir::TensorId> out =
        graph.add("out", "attention", {{"causal", true}}, {q, k, v});
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(graph.save(*out).ok());
    return graph;
}

// Lowers `graph` with attention's candidate forced to `counts` (sequence, heads_kv, keys; every
// other node takes its first, as key_split_cases.h does), runs it on the CPU backend and
// compares the saved output with `expected`.
std::string run_forced_split(const ir::Graph& graph, const Inputs& inputs, int devices,
                             const std::vector<int64_t>& counts, const ir::HostTensor& expected) {
    absl::StatusOr<logical::GraphCandidates> candidates = logical::enumerate_graph(graph, devices);
    EXPECT_TRUE(candidates.ok()) << candidates.status();
    std::vector<int> choice(graph.nodes().size(), 0);
    bool found = false;
    for (size_t n = 0; n < graph.nodes().size(); ++n) {
        for (size_t k = 0; k < (*candidates)[n].size(); ++k) {
            if (graph.node(static_cast<ir::NodeId>(n)).op->kind() == "attention" &&
                (*candidates)[n][k].counts == counts) {
                choice[n] = static_cast<int>(k);
                found = true;
            }
        }
    }
    if (!found) {
        return "no attention candidate with those counts";
    }
    const logical::LogicalPlan logical =
        logical::make_plan(graph, {devices, logical::Planner::random, 1}, *candidates, choice);
    physical::PhysicalOptions options;
    options.synthesis.mode = exprog::SynthesisMode::naive;
    absl::StatusOr<physical::PhysicalPlan> plan =
        physical::compile_physical(graph, logical, default_topology(devices), options);
    EXPECT_TRUE(plan.ok()) << plan.status();
    absl::StatusOr<physical::ExecGraph> exec = physical::lower(graph, *plan);
    EXPECT_TRUE(exec.ok()) << exec.status();
    if (!plan.ok() || !exec.ok()) {
        return "not lowered";
    }
    const testing::ExecRun run = testing::run_on_cpu(*exec, inputs.host);
    return first_mismatch(run.outputs.at("out"), expected, kF32Tolerance);
}

// The case: one element of query 5 (head 1) is NaN. NumPy's attention gives that
// (query, head) a NaN row, and so must the reference and every plan; plans that split the keys
// gave 0.0 there (their log-sum-exp ⊕ read the NaN row's statistics as "no key").
TEST(NonFinite, CausalAttentionWithANanQueryGivesANanRowOnEveryDeviceCount) {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << " (set EINSUMMABLE_TEST_SEED to replay)\n";
    const ir::Graph graph = causal_attention_graph();
    std::mt19937_64 rng(seed);
    std::map<std::string, ir::HostTensor> whole;
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        whole.emplace(tensor.name, ir::HostTensor::random(tensor.type.box(), rng));
    }
    constexpr int64_t kQuery = 5;
    constexpr int64_t kHead = 1;
    whole.at("q").data()[(kQuery * 2 + kHead) * 4 + 2] = kNaN;
    const Inputs inputs = make_inputs(graph, whole);

    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(graph, inputs.host);
    ASSERT_TRUE(reference.ok()) << reference.status();
    const ir::HostTensor& expected = reference->at("out");
    for (int64_t position = 0; position < 12; ++position) {
        for (int64_t head = 0; head < 2; ++head) {
            for (int64_t c = 0; c < 4; ++c) {
                const double value = expected.data()[(position * 2 + head) * 4 + c];
                EXPECT_EQ(std::isnan(value), position == kQuery && head == kHead)
                    << "reference at query " << position << ", head " << head << ": " << value;
            }
        }
    }
    for (int devices = 1; devices <= 4; ++devices) {
        for (logical::Planner planner :
             {logical::Planner::dp, logical::Planner::greedy, logical::Planner::random}) {
            SCOPED_TRACE(
                absl::StrCat("p = ", devices, ", planner ", logical::planner_name(planner)));
            const Outcome outcome = run_plan(causal_attention_graph(), inputs, devices, planner,
                                             seed + static_cast<uint64_t>(devices));
            EXPECT_TRUE(outcome.compiled);
            EXPECT_EQ(outcome.mismatch, "");
        }
        // The keys in `devices` blocks, then queries and keys in two each: partial results
        // and their ⊕, whatever the planners above chose.
        EXPECT_EQ(run_forced_split(graph, inputs, devices, {1, 1, devices}, expected), "")
            << "keys in " << devices << " blocks";
        if (devices == 4) {
            EXPECT_EQ(run_forced_split(graph, inputs, devices, {2, 1, 2}, expected), "")
                << "queries and keys in 2 blocks each";
        }
    }
}

// A one-node graph of a random case's operator, its inputs named in0, in1, ...
ir::Graph one_node_graph(const ir::Operator& op) {
    ir::Graph graph;
    std::vector<ir::TensorId> inputs;
    for (int idx = 0; idx < op.num_inputs(); ++idx) {
        const ir::TensorType& type = op.input_types()[static_cast<size_t>(idx)];
        absl::StatusOr<ir::TensorId> id =
            graph.add_input(absl::StrCat("in", idx), type.dtype, type.dims);
        EXPECT_TRUE(id.ok()) << id.status();
        inputs.push_back(*id);
    }
    absl::StatusOr<std::vector<ir::TensorId>> outputs =
        graph.add_node("op", op.kind(), op.attributes(), inputs);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    for (ir::TensorId id : *outputs) {
        EXPECT_TRUE(graph.save(id).ok());
    }
    return graph;
}

constexpr int kCasesPerOperator = 56; // 7 planners × 8 device counts

class NonFiniteProperty : public ::testing::TestWithParam<std::string> {};

// Every planner meets every device count from 1 to 8 on every operator kind: case i runs on
// planner i mod 7 and on 1 + (i div 7) mod 8 devices; every third case plans batch-invariant
// (no aggregation, the fixed-order contractions of kernels/cpu/gemm_invariant.h).
TEST_P(NonFiniteProperty, EveryPlanGivesTheReference) {
    const std::string kind = GetParam();
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "non-finite inputs for '" << kind << "': seed " << seed
              << " (set EINSUMMABLE_TEST_SEED to replay)\n";
    const std::vector<logical::Planner>& planners = logical::all_planners();
    int non_finite_outputs = 0; // cases whose reference has a non-finite value (an index
                                // writer: input): not vacuous
    for (int case_idx = 0; case_idx < kCasesPerOperator; ++case_idx) {
        std::mt19937_64 rng(seed * 1000003 + 31 * 7919 + static_cast<uint64_t>(case_idx));
        ir::testing::RandomCase random = ir::testing::random_case(kind, rng);
        ASSERT_NE(random.op, nullptr) << random.description;
        ir::Graph graph = one_node_graph(*random.op);
        std::map<std::string, ir::HostTensor> whole;
        std::uniform_int_distribution<int> count(0, 2);
        for (size_t idx = 0; idx < random.inputs.size(); ++idx) {
            const int injected = count(rng);
            if (!ir::is_integer(random.op->input_types()[idx].dtype)) { // ids stay valid
                inject(random.inputs[idx], injected, rng);
            }
            whole.emplace(absl::StrCat("in", idx), random.inputs[idx]);
        }
        const Inputs inputs = make_inputs(graph, whole);
        const logical::Planner planner = planners[static_cast<size_t>(case_idx) % planners.size()];
        const int devices = 1 + (case_idx / static_cast<int>(planners.size())) % 8;
        const bool batch_invariant = case_idx % 3 == 1;
        SCOPED_TRACE(absl::StrCat("seed ", seed, " case ", case_idx, ": ", random.description,
                                  ", planner ", logical::planner_name(planner), ", p = ", devices,
                                  batch_invariant ? ", batch-invariant" : ""));
        absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
            ir::evaluate_graph(graph, inputs.host);
        ASSERT_TRUE(reference.ok()) << reference.status();
        for (const auto& [name, tensor] : *reference) {
            non_finite_outputs += has_non_finite(tensor) ? 1 : 0;
        }
        // An operator that writes indices (argmax) has no non-finite output: what counts is that
        // its non-finite inputs reached it.
        bool writes_indices = true;
        for (const ir::TensorType& type : random.op->output_types()) {
            writes_indices = writes_indices && ir::is_integer(type.dtype);
        }
        for (const auto& [name, tensor] : inputs.host) {
            non_finite_outputs += writes_indices && has_non_finite(tensor) ? 1 : 0;
        }
        const Outcome outcome = run_plan(std::move(graph), inputs, devices, planner,
                                         seed + static_cast<uint64_t>(case_idx), batch_invariant);
        ASSERT_TRUE(outcome.compiled);
        EXPECT_EQ(outcome.mismatch, "");
    }
    std::cout << "  " << kCasesPerOperator << " cases, " << non_finite_outputs
              << " with non-finite outputs\n";
    EXPECT_GT(non_finite_outputs, 0);
}

std::vector<std::string> all_kinds() {
    std::vector<std::string> kinds;
    for (const ir::OperatorKind& kind : ir::operator_kinds()) {
        kinds.emplace_back(kind.name);
    }
    return kinds;
}

INSTANTIATE_TEST_SUITE_P(EveryOperator, NonFiniteProperty, ::testing::ValuesIn(all_kinds()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return info.param;
                         });

// A whole graph: a small LLaMA block (norms, GQA causal attention over packed sequences, rope,
// the FFN) with two non-finite values in the second sequence's activations x and one in the
// FFN's w2, on every planner at p = 4. The first sequence stays mostly finite: a non-finite
// token spoils the attention of every later token of its sequence.
TEST(NonFinite, LlamaBlockGivesTheReferenceOnEveryPlanner) {
    const uint64_t seed = ir::testing::test_seed();
    std::cout << "seed " << seed << " (set EINSUMMABLE_TEST_SEED to replay)\n";
    const std::string workload =
        "llama-block:seqs=2x6,d_model=16,heads_q=4,heads_kv=2,d_head=4,d_ff=24,dtype=f32";
    absl::StatusOr<ir::Graph> graph = workloads::by_name(workload);
    ASSERT_TRUE(graph.ok()) << graph.status();
    std::mt19937_64 rng(seed);
    std::map<std::string, ir::HostTensor> whole;
    for (ir::TensorId id : graph->inputs()) {
        const ir::GraphTensor& tensor = graph->tensor(id);
        ir::HostTensor values = ir::HostTensor::random(tensor.type.box(), rng);
        if (tensor.name == "x") { // tokens 6..11, the second sequence
            ir::HostTensor second = values.slice(ir::Box({{6, 12}, {0, 16}}));
            inject(second, 2, rng);
            values.write(second);
        } else if (tensor.name == "w2") {
            inject(values, 1, rng);
        }
        whole.emplace(tensor.name, std::move(values));
    }
    const Inputs inputs = make_inputs(*graph, whole);
    // Not vacuous: some outputs are NaN or infinite and some are not.
    absl::StatusOr<std::map<std::string, ir::HostTensor>> reference =
        ir::evaluate_graph(*graph, inputs.host);
    ASSERT_TRUE(reference.ok()) << reference.status();
    int non_finite = 0;
    int finite = 0;
    for (const auto& [name, tensor] : *reference) {
        for (double value : tensor.values()) {
            (std::isfinite(value) ? finite : non_finite) += 1;
        }
    }
    std::cout << non_finite << " non-finite and " << finite << " finite outputs\n";
    EXPECT_GT(non_finite, 0);
    EXPECT_GT(finite, 0);
    for (logical::Planner planner : logical::all_planners()) {
        SCOPED_TRACE(absl::StrCat("planner ", logical::planner_name(planner)));
        absl::StatusOr<ir::Graph> copy = workloads::by_name(workload);
        ASSERT_TRUE(copy.ok());
        const Outcome outcome = run_plan(*std::move(copy), inputs, 4, planner, seed);
        EXPECT_TRUE(outcome.compiled);
        EXPECT_EQ(outcome.mismatch, "");
    }
}

} // namespace
} // namespace einsummable::runtime
