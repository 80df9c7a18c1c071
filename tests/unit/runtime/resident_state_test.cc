// Resident state (docs/runtime.md "Resident state"): a resident input that write_rows updates in
// place keeps what each run wrote, for the next run of any plan of the model. A decode step on
// the CPU backend — new keys and values written into two sequences' caches, then attention over
// the caches up to their fills — run step after step by two plans of different shapes sharing
// the caches, agrees with the double-precision reference on the state the steps built, and the
// caches read back are exactly what was written; the write is in place (no copy of the cache
// per step). A state read by anything but its writer is refused by name.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ir/cache_steps.h"
#include "compiler/ir/graph.h"
#include "compiler/workloads/llama.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/runtime/reference_check.h"

namespace einsummable::runtime {
namespace {

using testing::compare_to_reference;
using ::testing::HasSubstr;
using testing::random_values;
using testing::Values;

constexpr uint64_t kSeed = 20261207;
constexpr int64_t kSequences = 2;
constexpr int64_t kCapacity = 8; // cache rows per sequence
constexpr int64_t kHeads = 2;
constexpr int64_t kHeadsKv = 1;
constexpr int64_t kDHead = 4;

// One step: `tokens[s]` new tokens of sequence s. Inputs q [n, heads, d], k_new/v_new [n,
// heads_kv, d], slots [n] (i32: the cache rows they go to) and fills [sequences] (i32: each
// sequence's keys after the step); states k_cache/v_cache [sequences · capacity, heads_kv, d].
// Saved: out = attention(q, write_rows(k_cache), write_rows(v_cache)), each sequence's queries
// against its cache region up to its fill, bottom-right causal.
ir::Graph decode_step(const std::vector<int64_t>& tokens) {
    ir::Graph graph;
    int64_t n = 0;
    std::vector<int64_t> ends;
    std::vector<int64_t> key_ends;
    for (size_t s = 0; s < tokens.size(); ++s) {
        n += tokens[s];
        ends.push_back(n);
        key_ends.push_back(static_cast<int64_t>(s + 1) * kCapacity);
    }
    const ir::TensorId q =
        *graph.add_input("q", ir::DType::f32, {{"tokens", n}, {"heads", kHeads}, {"d", kDHead}});
    const std::vector<ir::Dim> cache = {
        {"cache", kSequences * kCapacity}, {"heads_kv", kHeadsKv}, {"d", kDHead}};
    const std::vector<ir::Dim> fresh = {{"tokens", n}, {"heads_kv", kHeadsKv}, {"d", kDHead}};
    const ir::TensorId k_cache = *graph.add_input("k_cache", ir::DType::f32, cache);
    const ir::TensorId v_cache = *graph.add_input("v_cache", ir::DType::f32, cache);
    const ir::TensorId k_new = *graph.add_input("k_new", ir::DType::f32, fresh);
    const ir::TensorId v_new = *graph.add_input("v_new", ir::DType::f32, fresh);
    const ir::TensorId slots = *graph.add_input("slots", ir::DType::i32, {{"tokens", n}});
    const ir::TensorId fills =
        *graph.add_input("fills", ir::DType::i32, {{"sequences", kSequences}});
    const absl::StatusOr<ir::TensorId> k =
        graph.add("k_written", "write_rows", {}, {k_cache, k_new, slots});
    const absl::StatusOr<ir::TensorId> v =
        graph.add("v_written", "write_rows", {}, {v_cache, v_new, slots});
    EXPECT_TRUE(k.ok() && v.ok()) << k.status() << v.status();
    const absl::StatusOr<ir::TensorId> out = graph.add(
        "out", "attention", {{"causal", true}, {"sequence_ends", ends}, {"key_ends", key_ends}},
        {q, *k, *v, fills});
    EXPECT_TRUE(out.ok()) << out.status();
    EXPECT_TRUE(graph.save(*out).ok());
    return graph;
}

// The caches as the host keeps them, and each sequence's fill.
struct HostState {
    std::vector<float> k = std::vector<float>(kSequences * kCapacity * kHeadsKv * kDHead, 0.0f);
    std::vector<float> v = k;
    std::vector<int64_t> fill = std::vector<int64_t>(kSequences, 0);
};

// Runs one step of `plan` (made by decode_step(tokens)): random queries and new keys/values
// written at each sequence's next rows. Updates `host` as the step should have updated the
// device caches; returns the saved output's largest relative error against the reference
// computed from the caches before the step.
double run_step(Plan& plan, const std::vector<int64_t>& tokens, HostState& host,
                std::mt19937_64& rng) {
    int64_t n = 0;
    for (int64_t t : tokens) {
        n += t;
    }
    const int64_t width = kHeadsKv * kDHead;
    Values inputs;
    inputs["q"] = random_values(n * kHeads * kDHead, rng);
    inputs["k_new"] = random_values(n * width, rng);
    inputs["v_new"] = random_values(n * width, rng);
    std::vector<float> slots;
    std::vector<float> fills;
    for (int64_t s = 0; s < kSequences; ++s) {
        for (int64_t t = 0; t < tokens[s]; ++t) {
            slots.push_back(static_cast<float>(s * kCapacity + host.fill[s] + t));
        }
        fills.push_back(static_cast<float>(host.fill[s] + tokens[s]));
    }
    inputs["slots"] = slots;
    inputs["fills"] = fills;
    // The reference reads the caches before the step (its write_rows writes them).
    inputs["k_cache"] = host.k;
    inputs["v_cache"] = host.v;

    Plan::Lease lease = plan.acquire();
    for (const auto& [name, values] : inputs) {
        if (name != "k_cache" && name != "v_cache") { // states: never loaded
            EXPECT_TRUE(lease.load(name, values).ok()) << name;
        }
    }
    const absl::Status executed = lease.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    const double error = compare_to_reference(plan, lease, inputs);

    for (int64_t i = 0; i < n; ++i) {
        const auto row = static_cast<int64_t>(slots[i]);
        std::copy_n(inputs["k_new"].begin() + i * width, width, host.k.begin() + row * width);
        std::copy_n(inputs["v_new"].begin() + i * width, width, host.v.begin() + row * width);
    }
    for (int64_t s = 0; s < kSequences; ++s) {
        host.fill[s] += tokens[s];
    }
    return error;
}

// The state `name` read back from the resident memory, as f32.
std::vector<float> read_state(const Plan& plan, const std::string& name) {
    absl::StatusOr<std::vector<std::byte>> bytes = plan.resident()->read(name);
    EXPECT_TRUE(bytes.ok()) << bytes.status();
    std::vector<float> values(bytes->size() / sizeof(float));
    std::memcpy(values.data(), bytes->data(), bytes->size());
    return values;
}

// Every write_rows kernel of the plan writes its state block in place: its output is the
// resident buffer it reads as input 0.
void expect_written_in_place(const Plan& plan) {
    const physical::ExecGraph& exec = plan.exec_graph();
    int kernels = 0;
    for (const physical::ExecNode& node : exec.nodes) {
        if (node.kind != physical::NodeKind::kernel || node.op->kind() != "write_rows") {
            continue;
        }
        ++kernels;
        ASSERT_EQ(node.outputs.size(), 1u);
        EXPECT_EQ(node.outputs[0], node.inputs[0]) << node.label;
        EXPECT_TRUE(exec.buffers[node.outputs[0]].resident) << node.label;
    }
    EXPECT_GE(kernels, 2);
    // No arena holds a cache: the plan's own memory is the step's activations.
    for (const physical::Buffer& buffer : exec.buffers) {
        if (buffer.tensor == "k_cache" || buffer.tensor == "v_cache") {
            EXPECT_TRUE(buffer.resident) << buffer.tensor << " " << buffer.box.to_string();
        }
    }
}

struct StateCase {
    int devices;
    logical::Planner planner; // the decode plan's
    logical::Objective objective;
    // The objective of the plan that lays the caches out: bytes splits them along d_head where
    // time splits their rows, so the decode plan must keep a tiling it would not choose.
    logical::Objective first_objective = logical::Objective::time;
};

std::string setup_name(const ::testing::TestParamInfo<StateCase>& info) {
    std::string name =
        absl::StrCat(info.param.devices, "_devices_", logical::planner_name(info.param.planner),
                     "_", logical::objective_name(info.param.objective), "_after_",
                     logical::objective_name(info.param.first_objective));
    std::replace(name.begin(), name.end(), '-', '_');
    return name;
}

class ResidentState : public ::testing::TestWithParam<StateCase> {};

TEST_P(ResidentState, StepsOfTwoPlansBuildTheCachesInPlace) {
    const StateCase& setup = GetParam();
    std::cout << "seed " << kSeed << "\n";
    std::mt19937_64 rng(kSeed);
    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({setup.devices, 1});
    CompileOptions options;
    options.devices = setup.devices;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"k_cache", "v_cache"};
    options.planner = logical::Planner::dp;
    options.objective = setup.first_objective;

    // A prefill-like step (2 and 1 tokens) defines the caches' layout ...
    const std::vector<int64_t> prefill = {2, 1};
    absl::StatusOr<std::unique_ptr<Plan>> first =
        Plan::compile(decode_step(prefill), options, backend);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ((*first)->states(), (std::set<std::string>{"k_cache", "v_cache"}));
    expect_written_in_place(**first);
    // ... and decode steps of one token per sequence read it in place.
    options.resident = (*first)->resident();
    options.planner = setup.planner;
    options.objective = setup.objective;
    const std::vector<int64_t> decode = {1, 1};
    absl::StatusOr<std::unique_ptr<Plan>> second =
        Plan::compile(decode_step(decode), options, backend);
    ASSERT_TRUE(second.ok()) << second.status();
    EXPECT_EQ((*second)->states(), (std::set<std::string>{"k_cache", "v_cache"}));
    expect_written_in_place(**second);

    HostState host;
    EXPECT_LT(run_step(**first, prefill, host, rng), 1e-5);
    for (int step = 0; step < 3; ++step) {
        EXPECT_LT(run_step(**second, decode, host, rng), 1e-5) << "decode step " << step;
    }
    // The first plan sees what the second wrote.
    EXPECT_LT(run_step(**first, prefill, host, rng), 1e-5) << "the prefill shape again";
    EXPECT_EQ(host.fill, (std::vector<int64_t>{7, 5}));
    // The caches hold exactly what the steps wrote, and zeros past the fills.
    EXPECT_EQ(read_state(**second, "k_cache"), host.k);
    EXPECT_EQ(read_state(**second, "v_cache"), host.v);
}

// A LLaMA block's decode step (workloads::llama_decode_step) on resident caches: each step
// agrees with the reference computed from the caches the previous steps left, which hold the
// steps' keys at their slots and zeros elsewhere.
TEST(ResidentStateLlama, DecodeStepsOfABlockReadWhatTheEarlierStepsWrote) {
    std::cout << "seed " << kSeed << "\n";
    std::mt19937_64 rng(kSeed);
    workloads::LlamaConfig config = testing::tiny_llama();
    config.sequence_lengths = {1, 1};
    constexpr int64_t kBlockCapacity = 6;
    absl::StatusOr<ir::Graph> graph = workloads::llama_decode_step(config, kBlockCapacity);
    ASSERT_TRUE(graph.ok()) << graph.status();
    CompileOptions options;
    options.devices = 2;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"k_cache", "v_cache"};
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(*std::move(graph), options, cpu::make_cpu_backend({2, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    expect_written_in_place(**plan);

    Values inputs;
    for (ir::TensorId id : (*plan)->graph().inputs()) {
        const ir::GraphTensor& tensor = (*plan)->graph().tensor(id);
        if (!ir::is_integer(tensor.type.dtype)) {
            inputs[tensor.name] = random_values(tensor.type.elements(), rng);
        }
    }
    const int64_t cache_elements = 2 * kBlockCapacity * config.heads_kv * config.d_head;
    const int64_t row = config.heads_kv * config.d_head;
    inputs["k_cache"].assign(cache_elements, 0.0f);
    inputs["v_cache"].assign(cache_elements, 0.0f);
    for (int step = 0; step < 3; ++step) {
        const auto at = static_cast<float>(step);
        inputs["positions"] = {at, at};
        inputs["slots"] = {at, static_cast<float>(kBlockCapacity) + at};
        inputs["key_lengths"] = {at + 1.0f, at + 1.0f};
        inputs["x"] = random_values(2 * config.d_model, rng);
        Plan::Lease lease = (*plan)->acquire();
        for (const auto& [name, values] : inputs) {
            if (!(*plan)->states().count(name)) {
                ASSERT_TRUE(lease.load(name, values).ok()) << name;
            }
        }
        ASSERT_TRUE(lease.execute().ok());
        EXPECT_LT(compare_to_reference(**plan, lease, inputs), 1e-5) << "step " << step;
        // The caches after the step: the next reference reads them.
        for (const char* cache : {"k_cache", "v_cache"}) {
            const std::vector<float> after = read_state(**plan, cache);
            for (int64_t r = 0; r < 2 * kBlockCapacity; ++r) {
                const bool written = r % kBlockCapacity <= step;
                const bool nonzero =
                    std::any_of(after.begin() + r * row, after.begin() + (r + 1) * row,
                                [](float x) { return x != 0.0f; });
                EXPECT_EQ(nonzero, written) << cache << " row " << r << " after step " << step;
            }
            inputs[cache] = after;
        }
    }
}

// The offload of saved tensor `name`.
std::vector<float> offload(Plan& plan, const std::string& name) {
    absl::StatusOr<std::vector<float>> values = plan.offload(name);
    EXPECT_TRUE(values.ok()) << values.status();
    return values.ok() ? *std::move(values) : std::vector<float>{};
}

void load_or_fail(Plan& plan, const std::string& name, const std::vector<float>& values) {
    const absl::Status loaded = plan.load(name, values);
    EXPECT_TRUE(loaded.ok()) << name << ": " << loaded;
}

// The largest |a - b| over the largest |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0.0;
    double scale = 1e-30;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
        diff = std::max(diff, static_cast<double>(std::abs(a[i] - b[i])));
        scale = std::max(scale, static_cast<double>(std::abs(b[i])));
    }
    return diff / scale;
}

// The step graphs of a two-block LLaMA stack (ir::cache_step_graph): a prefill of two prompts
// into pages of 2 keys scattered over a pool of 10, then decode steps of both sequences reading
// their keys through the page table, give every token the output the forward pass over the
// whole sequences gives it.
TEST(CacheSteps, PrefillThenDecodeStepsEqualTheForwardPass) {
    std::cout << "seed " << kSeed << "\n";
    std::mt19937_64 rng(kSeed);
    workloads::LlamaConfig config = testing::tiny_llama();
    const std::vector<int64_t> prompts = {4, 2};
    constexpr int64_t kSteps = 3;
    const ir::CacheShape caches{2, 8, 2, 10};
    // Each sequence's 4 pages, out of order; a token's cache row follows its place.
    const std::vector<std::vector<int64_t>> pages = {{7, 2, 5, 0}, {3, 8, 1, 9}};
    auto cache_row = [&](int s, int64_t t) {
        return static_cast<float>(pages[s][t / 2] * 2 + t % 2);
    };
    auto table_of = [&](std::vector<int> sequences) {
        std::vector<float> table;
        for (int s : sequences) {
            table.insert(table.end(), pages[s].begin(), pages[s].end());
        }
        return table;
    };
    auto stack = [&](std::vector<int64_t> lengths) {
        workloads::LlamaConfig c = config;
        c.sequence_lengths = std::move(lengths);
        absl::StatusOr<ir::Graph> graph = workloads::llama_stack(c, 2);
        EXPECT_TRUE(graph.ok()) << graph.status();
        return *std::move(graph);
    };
    // Sequence 0 runs one step more, alone: a decode step of the first slot only.
    ir::Graph forward_graph = stack({prompts[0] + kSteps + 1, prompts[1] + kSteps});
    absl::StatusOr<ir::Graph> prefill_graph =
        ir::cache_step_graph(stack(prompts), ir::CacheStep::prefill, caches);
    ASSERT_TRUE(prefill_graph.ok()) << prefill_graph.status();
    absl::StatusOr<ir::Graph> decode_graph =
        ir::cache_step_graph(stack({1, 1}), ir::CacheStep::decode, caches);
    ASSERT_TRUE(decode_graph.ok()) << decode_graph.status();

    std::set<std::string> weights;
    Values values;
    for (ir::TensorId id : forward_graph.inputs()) {
        const ir::GraphTensor& tensor = forward_graph.tensor(id);
        values[tensor.name] = random_values(tensor.type.elements(), rng);
        if (tensor.weight) {
            weights.insert(tensor.name);
        }
    }
    const int64_t d = config.d_model;
    const std::vector<float>& x = values["x"];
    // Token t of sequence s in the forward pass's packing.
    auto forward_row = [&](int s, int64_t t) { return s == 0 ? t : prompts[0] + kSteps + 1 + t; };

    std::shared_ptr<Backend> backend = cpu::make_cpu_backend({2, 1});
    CompileOptions options;
    options.devices = 2;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> forward =
        Plan::compile(stack({prompts[0] + kSteps + 1, prompts[1] + kSteps}), options, backend);
    ASSERT_TRUE(forward.ok()) << forward.status();
    for (const auto& [name, v] : values) {
        load_or_fail(**forward, name, v);
    }
    ASSERT_TRUE((*forward)->execute().ok());
    const std::vector<float> expected = offload(**forward, "b1.y");

    // The prefill lays out the weights and every cache; the decode steps read them in place.
    options.resident_inputs = weights;
    for (const std::string& cache : ir::cache_inputs(*prefill_graph)) {
        options.resident_inputs.insert(cache);
    }
    absl::StatusOr<std::unique_ptr<Plan>> prefill =
        Plan::compile(*std::move(prefill_graph), options, backend);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    EXPECT_EQ((*prefill)->states().size(), 4u) << "k and v of two blocks";
    options.resident = (*prefill)->resident();
    absl::StatusOr<std::unique_ptr<Plan>> decode =
        Plan::compile(*std::move(decode_graph), options, backend);
    ASSERT_TRUE(decode.ok()) << decode.status();
    EXPECT_EQ((*decode)->states().size(), 4u);

    for (const std::string& weight : weights) {
        load_or_fail(**prefill, weight, values[weight]); // resident: once, for both plans
    }
    std::vector<float> prompt_x;
    std::vector<float> slots;
    std::vector<float> prompt_expected;
    for (int s = 0; s < 2; ++s) {
        for (int64_t t = 0; t < prompts[s]; ++t) {
            const int64_t row = forward_row(s, t);
            prompt_x.insert(prompt_x.end(), x.begin() + row * d, x.begin() + (row + 1) * d);
            prompt_expected.insert(prompt_expected.end(), expected.begin() + row * d,
                                   expected.begin() + (row + 1) * d);
            slots.push_back(cache_row(s, t));
        }
    }
    load_or_fail(**prefill, "x", prompt_x);
    load_or_fail(**prefill, "slots", slots);
    ASSERT_TRUE((*prefill)->execute().ok());
    EXPECT_LT(relative_difference(offload(**prefill, "b1.y"), prompt_expected), 1e-5);

    for (int64_t step = 0; step < kSteps; ++step) {
        std::vector<float> step_x;
        std::vector<float> step_expected;
        std::vector<float> positions;
        std::vector<float> step_slots;
        std::vector<float> fills;
        for (int s = 0; s < 2; ++s) {
            const int64_t t = prompts[s] + step;
            const int64_t row = forward_row(s, t);
            step_x.insert(step_x.end(), x.begin() + row * d, x.begin() + (row + 1) * d);
            step_expected.insert(step_expected.end(), expected.begin() + row * d,
                                 expected.begin() + (row + 1) * d);
            positions.push_back(static_cast<float>(t));
            step_slots.push_back(cache_row(s, t));
            fills.push_back(static_cast<float>(t + 1));
        }
        load_or_fail(**decode, "x", step_x);
        load_or_fail(**decode, "positions", positions);
        load_or_fail(**decode, "slots", step_slots);
        load_or_fail(**decode, "key_lengths", fills);
        load_or_fail(**decode, "page_table", table_of({0, 1}));
        ASSERT_TRUE((*decode)->execute().ok());
        EXPECT_LT(relative_difference(offload(**decode, "b1.y"), step_expected), 1e-5)
            << "decode step " << step;
    }
    // A step of sequence 0 alone, against the same resident caches.
    absl::StatusOr<ir::Graph> first_slot =
        ir::cache_step_graph(stack({1}), ir::CacheStep::decode, caches);
    ASSERT_TRUE(first_slot.ok()) << first_slot.status();
    absl::StatusOr<std::unique_ptr<Plan>> alone =
        Plan::compile(*std::move(first_slot), options, backend);
    ASSERT_TRUE(alone.ok()) << alone.status();
    const int64_t t = prompts[0] + kSteps;
    const int64_t row = forward_row(0, t);
    load_or_fail(**alone, "x", std::vector<float>(x.begin() + row * d, x.begin() + (row + 1) * d));
    load_or_fail(**alone, "positions", {static_cast<float>(t)});
    load_or_fail(**alone, "slots", {cache_row(0, t)});
    load_or_fail(**alone, "key_lengths", {static_cast<float>(t + 1)});
    load_or_fail(**alone, "page_table", table_of({0}));
    ASSERT_TRUE((*alone)->execute().ok());
    EXPECT_LT(relative_difference(
                  offload(**alone, "b1.y"),
                  std::vector<float>(expected.begin() + row * d, expected.begin() + (row + 1) * d)),
              1e-5);
}

TEST(CacheSteps, RefuseGraphsTheirCachesCannotServe) {
    workloads::LlamaConfig config = testing::tiny_llama();
    config.sequence_lengths = {1, 1, 1};
    absl::StatusOr<ir::Graph> three = workloads::llama_stack(config, 1);
    ASSERT_TRUE(three.ok());
    absl::StatusOr<ir::Graph> step = ir::cache_step_graph(*three, ir::CacheStep::decode, {2, 8});
    EXPECT_EQ(step.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(step.status().message(), HasSubstr("packs 3 sequences for 2 slots"));

    config.sequence_lengths = {9, 1};
    absl::StatusOr<ir::Graph> long_one = workloads::llama_stack(config, 1);
    ASSERT_TRUE(long_one.ok());
    step = ir::cache_step_graph(*long_one, ir::CacheStep::decode, {2, 8});
    EXPECT_THAT(step.status().message(), HasSubstr("sequence 0 has 9 tokens"));

    // A decode step's graph already reads caches: it cannot take another.
    config.sequence_lengths = {1, 1};
    absl::StatusOr<ir::Graph> two = workloads::llama_stack(config, 1);
    ASSERT_TRUE(two.ok());
    absl::StatusOr<ir::Graph> once = ir::cache_step_graph(*two, ir::CacheStep::decode, {2, 8});
    ASSERT_TRUE(once.ok()) << once.status();
    step = ir::cache_step_graph(*once, ir::CacheStep::decode, {2, 8});
    EXPECT_THAT(step.status().message(),
                HasSubstr("rope node 'b0.q_rope' already reads positions"));
    // Nor a prefill's graph, whose caches exist already.
    absl::StatusOr<ir::Graph> prefill = ir::cache_step_graph(*two, ir::CacheStep::prefill, {2, 8});
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    step = ir::cache_step_graph(*prefill, ir::CacheStep::prefill, {2, 8});
    EXPECT_THAT(step.status().message(), HasSubstr("already has a tensor named 'slots'"));
    step = ir::cache_step_graph(*two, ir::CacheStep::prefill, {0, 8});
    EXPECT_THAT(step.status().message(), HasSubstr("must be at least 1"));
    step = ir::cache_step_graph(*two, ir::CacheStep::decode, {2, 8, 3, 10});
    EXPECT_THAT(step.status().message(),
                HasSubstr("a sequence's capacity (8) must be whole pages of 3 keys"));
}

TEST(ResidentStateErrors, AStateReadByAnotherOperatorIsRefusedByName) {
    ir::Graph graph = decode_step({1, 1});
    const ir::TensorId k_cache = *graph.find_tensor("k_cache");
    const absl::StatusOr<ir::TensorId> peek = graph.add("peek", "softmax", {}, {k_cache});
    ASSERT_TRUE(peek.ok()) << peek.status();
    ASSERT_TRUE(graph.save(*peek).ok());
    CompileOptions options;
    options.devices = 2;
    options.synthesis_iterations = 20;
    options.resident_inputs = {"k_cache", "v_cache"};
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(std::move(graph), options, cpu::make_cpu_backend({2, 1}));
    ASSERT_FALSE(plan.ok());
    EXPECT_EQ(plan.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(plan.status().message(), HasSubstr("resident state 'k_cache'"));
    EXPECT_THAT(plan.status().message(), HasSubstr("'k_written'"));
}

TEST(ResidentStateErrors, WithoutResidencyWriteRowsLeavesItsInputAlone) {
    // Not resident: the caches are inputs like any other, loaded per run and not updated, and
    // the plan has no state.
    CompileOptions options;
    options.devices = 2;
    options.synthesis_iterations = 20;
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(decode_step({1, 1}), options, cpu::make_cpu_backend({2, 1}));
    ASSERT_TRUE(plan.ok()) << plan.status();
    EXPECT_TRUE((*plan)->states().empty());
    for (const physical::ExecNode& node : (*plan)->exec_graph().nodes) {
        if (node.kind == physical::NodeKind::kernel && node.op->kind() == "write_rows") {
            EXPECT_NE(node.outputs[0], node.inputs[0]) << node.label;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(
    Planners, ResidentState,
    ::testing::Values(StateCase{1, logical::Planner::dp, logical::Objective::time},
                      StateCase{2, logical::Planner::dp, logical::Objective::time},
                      StateCase{4, logical::Planner::dp, logical::Objective::time},
                      StateCase{4, logical::Planner::dp, logical::Objective::bytes},
                      StateCase{4, logical::Planner::megatron, logical::Objective::time},
                      StateCase{4, logical::Planner::data_parallel, logical::Objective::time},
                      StateCase{4, logical::Planner::dp, logical::Objective::time,
                                logical::Objective::bytes},
                      StateCase{4, logical::Planner::megatron, logical::Objective::time,
                                logical::Objective::bytes}),
    setup_name);

} // namespace
} // namespace einsummable::runtime
