// Plan records (compiler/physical/plan_record.h) through runtime::Plan::record and restore.
//
// For workloads × devices × schedules: the restored plan has the same ExecGraph, the same
// programs and the same record as the compiled one, and gives bit-identical outputs; restoring
// never synthesises (a huge iteration budget costs nothing). A record for another graph, device
// count or options is refused with a message naming what does not fit; hand-edited records are
// refused by the check they break; truncated and byte-flipped records (seeded, printed) either
// fail cleanly or restore the very same plan.

#include <cctype>
#include <chrono>
#include <cmath>
#include <iostream>
#include <map>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/exprog/parser.h"
#include "compiler/logical/micro_batches.h"
#include "compiler/physical/plan_record.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

// The CPU backend with as many virtual devices as the options ask for.
std::shared_ptr<Backend> cpu_backend(const CompileOptions& options) {
    return cpu::make_cpu_backend({options.devices, 1});
}

constexpr uint64_t kSeed = 20261130;

const char* const kFfn = "ffn:tokens=48,d_model=16,d_ff=40";
const char* const kLlama =
    "llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=48,dtype=f32";
const char* const kChain = "chain:B,scale=256,dtype=f32";

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? *std::move(graph) : ir::Graph();
}

CompileOptions options_for(int devices, exprog::SynthesisMode schedule) {
    CompileOptions options;
    options.devices = devices;
    options.schedule = schedule;
    options.seed = kSeed;
    options.synthesis_iterations = 20;
    return options;
}

std::unique_ptr<Plan> compile(const std::string& workload, const CompileOptions& options) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        Plan::compile(build(workload), options, cpu_backend(options));
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

// Loads seeded random inputs, executes, and returns every saved output.
std::map<std::string, std::vector<float>> run(Plan& plan, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    for (ir::TensorId id : plan.graph().inputs()) {
        const ir::GraphTensor& tensor = plan.graph().tensor(id);
        std::vector<float> values(tensor.type.elements());
        for (float& v : values) {
            v = uniform(rng);
        }
        EXPECT_TRUE(plan.load(tensor.name, values).ok()) << tensor.name;
    }
    absl::Status executed = plan.execute();
    EXPECT_TRUE(executed.ok()) << executed;
    std::map<std::string, std::vector<float>> outputs;
    for (const auto& [name, blocks] : plan.exec_graph().outputs) {
        absl::StatusOr<std::vector<float>> values = plan.offload(name);
        EXPECT_TRUE(values.ok()) << values.status();
        outputs[name] = values.ok() ? *std::move(values) : std::vector<float>();
    }
    return outputs;
}

struct Case {
    std::string workload;
    int devices;
    exprog::SynthesisMode schedule;
    int micro_batches = 1; // CompileOptions::micro_batches
};

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
    const std::string workload = info.param.workload.substr(0, info.param.workload.find(':'));
    std::string name = absl::StrCat(
        workload, "_p", info.param.devices, "_", exprog::synthesis_mode_name(info.param.schedule),
        info.param.micro_batches > 1 ? absl::StrCat("_micro", info.param.micro_batches) : "");
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) {
            c = '_';
        }
    }
    return name;
}

class RecordRoundTrip : public ::testing::TestWithParam<Case> {};

TEST_P(RecordRoundTrip, RestoresTheSamePlan) {
    const Case& param = GetParam();
    std::cout << "seed " << kSeed << "\n";
    CompileOptions options = options_for(param.devices, param.schedule);
    options.micro_batches = logical::equal_micro_batches(param.micro_batches);
    std::unique_ptr<Plan> compiled = compile(param.workload, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();
    // The record says how many micro-batches the plan has, or nothing for one.
    EXPECT_EQ(absl::StrContains(record, "\nmicro_batches "), param.micro_batches > 1) << record;
    options.micro_batches.reset(); // the record decides

    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(param.workload), options, record, cpu_backend(options));
    ASSERT_TRUE(restored.ok()) << restored.status() << "\n" << record;
    const Plan& plan = **restored;
    EXPECT_EQ(plan.exec_graph().to_string(), compiled->exec_graph().to_string());
    EXPECT_EQ(plan.explain(), compiled->explain());
    EXPECT_EQ(plan.record(), record); // record(restore(r)) == r
    // The programs are the recorded ones, not new syntheses.
    ASSERT_EQ(plan.physical_plan().operators.size(), compiled->physical_plan().operators.size());
    for (size_t op = 0; op < plan.physical_plan().operators.size(); ++op) {
        const physical::OperatorPlacement& got = plan.physical_plan().operators[op];
        const physical::OperatorPlacement& want = compiled->physical_plan().operators[op];
        EXPECT_EQ(got.devices, want.devices);
        ASSERT_EQ(got.exchanges.size(), want.exchanges.size());
        for (size_t e = 0; e < got.exchanges.size(); ++e) {
            EXPECT_EQ(got.exchanges[e].program, want.exchanges[e].program);
            EXPECT_EQ(got.exchanges[e].membership, want.exchanges[e].membership);
            EXPECT_EQ(got.exchanges[e].simulated_s, want.exchanges[e].simulated_s);
        }
    }
    EXPECT_EQ(plan.physical_plan().simulated_s(), compiled->physical_plan().simulated_s());
    EXPECT_EQ(run(**restored, kSeed), run(*compiled, kSeed));
}

std::vector<Case> round_trip_cases() {
    std::vector<Case> cases;
    for (const char* workload : {kFfn, kLlama, kChain}) {
        for (int devices : {1, 3, 4, 8}) {
            for (exprog::SynthesisMode schedule :
                 {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
                cases.push_back({workload, devices, schedule});
            }
        }
    }
    for (const char* workload : {kFfn, kLlama}) {
        for (int devices : {3, 4}) {
            cases.push_back({workload, devices, exprog::SynthesisMode::optimized, 2});
        }
    }
    return cases;
}

INSTANTIATE_TEST_SUITE_P(Workloads, RecordRoundTrip, ::testing::ValuesIn(round_trip_cases()),
                         case_name);

TEST(PlanRecord, OtherPlannersRoundTrip) {
    for (logical::Planner planner : {logical::Planner::greedy, logical::Planner::random}) {
        CompileOptions options = options_for(4, exprog::SynthesisMode::optimized);
        options.planner = planner;
        std::unique_ptr<Plan> compiled = compile(kLlama, options);
        ASSERT_NE(compiled, nullptr);
        absl::StatusOr<std::unique_ptr<Plan>> restored =
            Plan::restore(build(kLlama), options, compiled->record(), cpu_backend(options));
        ASSERT_TRUE(restored.ok()) << restored.status();
        EXPECT_EQ((*restored)->exec_graph().to_string(), compiled->exec_graph().to_string());
    }
}

TEST(PlanRecord, RestoringDoesNotSynthesise) {
    // With this budget a synthesis would run for minutes; a restore takes what a naive one does.
    const CompileOptions options = options_for(8, exprog::SynthesisMode::optimized);
    std::unique_ptr<Plan> compiled = compile(kLlama, options);
    ASSERT_NE(compiled, nullptr);
    CompileOptions huge = options;
    huge.synthesis_iterations = 1000000000;
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(kLlama), huge, compiled->record(), cpu_backend(huge));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ASSERT_TRUE(restored.ok()) << restored.status();
    std::cout << "restore took " << seconds << " s\n";
    EXPECT_LT(seconds, 20.0);
    EXPECT_EQ((*restored)->exec_graph().to_string(), compiled->exec_graph().to_string());
}

TEST(PlanRecord, StartsWithItsHeader) {
    std::unique_ptr<Plan> compiled = compile(kFfn, options_for(4, exprog::SynthesisMode::naive));
    ASSERT_NE(compiled, nullptr);
    EXPECT_THAT(compiled->record(),
                ::testing::StartsWith(absl::StrCat(
                    "einsummable-plan-record 1\nplan devices 4 planner dp seed ", kSeed,
                    " schedule naive topology \"dgx-a100\" objective time predicted ")));
    // The time programme's prediction and where its plan came from end the line.
    const logical::PlanObjective& made = *compiled->logical_plan().objective;
    EXPECT_THAT(compiled->record(),
                HasSubstr(absl::StrCat(" origin \"", made.origin, "\"\noperator ")));
    EXPECT_THAT(compiled->record(), ::testing::EndsWith("\nend\n"));
}

absl::Status restore_status(const std::string& workload, const CompileOptions& options,
                            const std::string& record) {
    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(workload), options, record, cpu_backend(options));
    return restored.status();
}

TEST(PlanRecord, NamesTheObjectiveThatMadeThePlan) {
    for (logical::Objective objective : logical::all_objectives()) {
        const std::string name(logical::objective_name(objective));
        SCOPED_TRACE(name);
        CompileOptions options = options_for(4, exprog::SynthesisMode::naive);
        options.objective = objective;
        std::unique_ptr<Plan> compiled = compile(kFfn, options);
        ASSERT_NE(compiled, nullptr);
        const std::string record = compiled->record();
        EXPECT_THAT(record, HasSubstr(absl::StrCat("\" objective ", name, " predicted ")));
        EXPECT_EQ(physical::recorded_objective(record).value(), objective);
        // Restored under any objective, the plan names the record's.
        CompileOptions other = options;
        other.objective = objective == logical::Objective::bytes ? logical::Objective::time
                                                                 : logical::Objective::bytes;
        absl::StatusOr<std::unique_ptr<Plan>> restored =
            Plan::restore(build(kFfn), other, record, cpu_backend(other));
        ASSERT_TRUE(restored.ok()) << restored.status();
        EXPECT_EQ((*restored)->logical_plan().objective->objective, objective);
        EXPECT_EQ((*restored)->record(), record);
        EXPECT_EQ((*restored)->explain(), compiled->explain());

        // A record from before records named the objective: read as it always was, its plan
        // naming the objective it is restored for.
        const size_t named = record.find(" objective ");
        ASSERT_NE(named, std::string::npos);
        const size_t line_end = record.find('\n', named);
        const std::string legacy = record.substr(0, named) + record.substr(line_end);
        ASSERT_NE(legacy, record);
        EXPECT_FALSE(physical::recorded_objective(legacy).value().has_value());
        restored = Plan::restore(build(kFfn), other, legacy, cpu_backend(other));
        ASSERT_TRUE(restored.ok()) << restored.status();
        EXPECT_EQ((*restored)->logical_plan().objective->objective, other.objective);
        EXPECT_EQ((*restored)->exec_graph().to_string(), compiled->exec_graph().to_string());

        // An objective the build does not know is refused, naming it.
        const std::string unknown = absl::StrReplaceAll(
            record, {{absl::StrCat(" objective ", name, " "), " objective fastest "}});
        const absl::Status status = restore_status(kFfn, options, unknown);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(status.message()),
                    HasSubstr("plan record line 2: unknown objective 'fastest'"));
        EXPECT_FALSE(physical::recorded_objective(unknown).ok());
    }
}

TEST(PlanRecord, RefusesARecordForAnotherGraph) {
    const CompileOptions options = options_for(4, exprog::SynthesisMode::optimized);
    std::unique_ptr<Plan> compiled = compile(kFfn, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();
    for (const char* other :
         {"ffn:tokens=48,d_model=16,d_ff=48", "ffn:tokens=64,d_model=16,d_ff=40",
          "ffn:tokens=48,d_model=24,d_ff=40"}) {
        const absl::Status status = restore_status(other, options, record);
        std::cout << other << ": " << status << "\n";
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << other;
        EXPECT_THAT(std::string(status.message()), HasSubstr("operator '")) << other;
    }
    // Another workload altogether.
    const absl::Status status = restore_status(kChain, options, record);
    std::cout << status << "\n";
    EXPECT_THAT(std::string(status.message()), HasSubstr("operator '"));

    std::unique_ptr<Plan> llama = compile(kLlama, options);
    ASSERT_NE(llama, nullptr);
    const absl::Status wider = restore_status(
        "llama-block:seqs=3x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,d_ff=64,dtype=f32", options,
        llama->record());
    std::cout << wider << "\n";
    EXPECT_THAT(std::string(wider.message()), HasSubstr("operator '"));
}

TEST(PlanRecord, RefusesARecordForOtherDevicesOrOptions) {
    const CompileOptions options = options_for(4, exprog::SynthesisMode::optimized);
    std::unique_ptr<Plan> compiled = compile(kLlama, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();

    for (int devices : {3, 8}) {
        const CompileOptions other = options_for(devices, exprog::SynthesisMode::optimized);
        const absl::Status status = restore_status(kLlama, other, record);
        std::cout << status << "\n";
        EXPECT_THAT(std::string(status.message()), HasSubstr("is for devices 4"));
        // With the header edited to match, the operators themselves do not fit.
        const std::string edited = absl::StrReplaceAll(
            record, {{"plan devices 4 ", absl::StrCat("plan devices ", devices, " ")}});
        const absl::Status deeper = restore_status(kLlama, other, edited);
        std::cout << deeper << "\n";
        EXPECT_EQ(deeper.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(deeper.message()), HasSubstr("operator '"));
    }
    CompileOptions naive = options;
    naive.schedule = exprog::SynthesisMode::naive;
    EXPECT_THAT(std::string(restore_status(kLlama, naive, record).message()),
                HasSubstr("schedule"));
    CompileOptions greedy = options;
    greedy.planner = logical::Planner::greedy;
    EXPECT_THAT(std::string(restore_status(kLlama, greedy, record).message()),
                HasSubstr("planner"));
    CompileOptions seeded = options;
    seeded.seed = kSeed + 1;
    EXPECT_THAT(std::string(restore_status(kLlama, seeded, record).message()), HasSubstr("seed"));
    CompileOptions h100 = options;
    h100.topology = exprog::builtin_topology("dgx-h100").value();
    EXPECT_THAT(std::string(restore_status(kLlama, h100, record).message()), HasSubstr("topology"));
}

// Replaces the first line of `record` that starts (after indentation) with `prefix`.
std::string replace_line(const std::string& record, absl::string_view prefix,
                         absl::string_view replacement) {
    std::vector<std::string> lines = absl::StrSplit(record, '\n');
    for (std::string& line : lines) {
        if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(line), prefix)) {
            line = std::string(replacement);
            break;
        }
    }
    return absl::StrJoin(lines, "\n");
}

TEST(PlanRecord, RefusesHandEditedDecisions) {
    // The bytes objective's plan of the FFN moves blocks between devices, so its programs have
    // steps to edit (the time objective's keeps every block where it is read).
    CompileOptions options = options_for(4, exprog::SynthesisMode::optimized);
    options.objective = logical::Objective::bytes;
    std::unique_ptr<Plan> compiled = compile(kFfn, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();
    std::cout << record;
    auto expect_refused = [&](const std::string& edited, absl::string_view expected) {
        const absl::Status status = restore_status(kFfn, options, edited);
        std::cout << status << "\n";
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
        EXPECT_THAT(std::string(status.message()), HasSubstr(expected));
    };
    // Two function specs on one device: the first operator with an exchange gets F1 on F0's
    // GPU, and its program sends every atom there, so the program alone stays valid.
    {
        std::vector<std::string> lines = absl::StrSplit(record, '\n');
        size_t at = 0;
        while (at < lines.size() &&
               !absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[at]), "membership F0=")) {
            ++at;
        }
        ASSERT_LT(at + 2, lines.size());
        exprog::Membership membership;
        for (absl::string_view entry :
             absl::StrSplit(absl::StripLeadingAsciiWhitespace(lines[at]).substr(11), ' ')) {
            std::pair<std::string, std::string> kv = absl::StrSplit(entry, '=');
            membership[kv.first] = {std::stoi(kv.second)};
        }
        ASSERT_GE(membership.size(), 2u);
        const int gpu = membership["F0"].front();
        membership["F1"] = {gpu};
        int64_t count = 0;
        ASSERT_TRUE(
            absl::SimpleAtoi(absl::StripLeadingAsciiWhitespace(lines[at + 2]).substr(8), &count));
        std::string text;
        for (int64_t i = 0; i < count; ++i) {
            absl::StrAppend(&text, lines[at + 3 + i], "\n");
        }
        absl::StatusOr<exprog::Program> program = exprog::parse_program(text);
        ASSERT_TRUE(program.ok()) << program.status();
        for (const exprog::InDecl& in : program->ins) {
            if (in.gpu != gpu) {
                program->actions.push_back(
                    {{in.atom}, exprog::Site::of_gpu(in.gpu), {{exprog::Site::of_gpu(gpu)}}, {}});
            }
        }
        ASSERT_TRUE(exprog::check_with_membership(*program, membership).ok());
        std::vector<std::string> edited(lines.begin(), lines.begin() + at);
        edited.push_back(absl::StrCat(
            "membership ", absl::StrJoin(membership, " ", [](std::string* out, const auto& kv) {
                absl::StrAppend(out, kv.first, "=", absl::StrJoin(kv.second, ","));
            })));
        edited.push_back(lines[at + 1]);
        std::vector<std::string> program_lines =
            absl::StrSplit(exprog::print_program(*program), '\n', absl::SkipEmpty());
        edited.push_back(absl::StrCat("program ", program_lines.size()));
        edited.insert(edited.end(), program_lines.begin(), program_lines.end());
        edited.insert(edited.end(), lines.begin() + at + 3 + count, lines.end());
        expect_refused(absl::StrJoin(edited, "\n"), "both placed on device");
    }
    // A membership naming a partition the program does not declare by size.
    expect_refused(replace_line(record, "membership F0=", "membership F0=0 F1=1 F2=2 F3=3 G=0"),
                   "does not declare by size");
    // The last action of the last program (the saved output's) dropped: its OUT requirements
    // are no longer met.
    {
        std::vector<std::string> lines = absl::StrSplit(record, '\n');
        size_t at = lines.size();
        for (size_t i = 0; i < lines.size(); ++i) {
            if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[i]), "program ")) {
                at = i;
            }
        }
        ASSERT_LT(at, lines.size());
        int64_t count = 0;
        ASSERT_TRUE(
            absl::SimpleAtoi(absl::StripLeadingAsciiWhitespace(lines[at]).substr(8), &count));
        lines[at] = absl::StrCat("program ", count - 1);
        lines.erase(lines.begin() + at + count);
        expect_refused(absl::StrJoin(lines, "\n"), "is not valid");
    }
    // A request that does not partition its index; one with too many function specs.
    expect_refused(replace_line(record, "index \"k\"", "index \"k\" [0,20)"), "is not valid");
    expect_refused(
        replace_line(record, "index \"k\"", "index \"k\" [0,10) [10,20) [20,30) [30,40)"),
        "more function specs");
    // Another version of the format, and not a record at all.
    expect_refused(
        absl::StrReplaceAll(record, {{"einsummable-plan-record 1", "einsummable-plan-record 2"}}),
        "version 2");
    expect_refused("hello\n", "not a plan record");
    expect_refused("", "not a plan record");
    // The operators in another order.
    expect_refused(absl::StrReplaceAll(record, {{"operator \"", "operator \"x"}}), "in its place");
}

// Truncations, byte flips, digit changes and dropped or swapped lines: restore either fails
// (InvalidArgument) or gives the very same plan. Never crashes.
void fuzz(const std::string& workload, int devices, int rounds, uint64_t seed) {
    std::cout << "fuzz " << workload << " p=" << devices << " seed " << seed << "\n";
    const CompileOptions options = options_for(devices, exprog::SynthesisMode::optimized);
    std::unique_ptr<Plan> compiled = compile(workload, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();
    const std::string expected = compiled->exec_graph().to_string();
    std::mt19937_64 rng(seed);
    auto below = [&](size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng); };
    int failed = 0;
    int identical = 0;
    for (int round = 0; round < rounds; ++round) {
        std::string mutated = record;
        int kind = static_cast<int>(below(5));
        switch (kind) {
        case 0: // truncation
            mutated.resize(below(record.size()));
            break;
        case 1: // one bit flipped
            mutated[below(mutated.size())] ^= static_cast<char>(1 << below(8));
            break;
        case 2: { // a digit changed
            size_t at = below(mutated.size());
            while (at < mutated.size() && !std::isdigit(static_cast<unsigned char>(mutated[at]))) {
                ++at;
            }
            if (at < mutated.size()) {
                mutated[at] = static_cast<char>('0' + (mutated[at] - '0' + 1 + below(9)) % 10);
            }
            break;
        }
        case 3: // a random byte
            mutated[below(mutated.size())] = static_cast<char>(below(256));
            break;
        default: { // a line dropped or two lines swapped
            std::vector<std::string> lines = absl::StrSplit(mutated, '\n');
            const size_t a = below(lines.size());
            const size_t b = below(lines.size());
            if (below(2) == 0) {
                lines.erase(lines.begin() + a);
            } else {
                std::swap(lines[a], lines[b]);
            }
            mutated = absl::StrJoin(lines, "\n");
            break;
        }
        }
        absl::StatusOr<std::unique_ptr<Plan>> restored =
            Plan::restore(build(workload), options, mutated, cpu_backend(options));
        if (!restored.ok()) {
            ++failed;
            EXPECT_EQ(restored.status().code(), absl::StatusCode::kInvalidArgument)
                << restored.status();
            continue;
        }
        ++identical;
        EXPECT_EQ((*restored)->exec_graph().to_string(), expected)
            << "round " << round << " (kind " << kind << ") restored another plan from:\n"
            << mutated;
    }
    std::cout << rounds << " mutations: " << failed << " refused, " << identical
              << " restored the same plan\n";
    EXPECT_GT(failed, rounds / 2);
}

TEST(PlanRecord, CorruptRecordsFailOrRestoreTheSamePlan) {
    const uint64_t seed = kSeed + 7;
    fuzz(kFfn, 4, 400, seed);
    fuzz(kLlama, 3, 400, seed + 1);
}

TEST(PlanRecord, MicroBatchesAreADecisionOfTheRecord) {
    CompileOptions options = options_for(4, exprog::SynthesisMode::optimized);
    options.micro_batches = std::vector<int>{3, 1};
    std::unique_ptr<Plan> compiled = compile(kFfn, options);
    ASSERT_NE(compiled, nullptr);
    const std::string record = compiled->record();
    ASSERT_TRUE(absl::StrContains(record, "\nmicro_batches 3 1\n")) << record;
    options.micro_batches = std::vector<int>{}; // restore() follows the record, not the options
    absl::StatusOr<std::unique_ptr<Plan>> restored =
        Plan::restore(build(kFfn), options, record, cpu_backend(options));
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ((*restored)->exec_graph().to_string(), compiled->exec_graph().to_string());
    EXPECT_EQ((*restored)->record(), record);
    // The CPU backend runs the micro-batched plan to the answer of the plan without them.
    CompileOptions whole_options = options;
    std::unique_ptr<Plan> whole = compile(kFfn, whole_options);
    ASSERT_NE(whole, nullptr);
    ASSERT_EQ(whole->record().find("micro_batches"), std::string::npos);
    const auto batched_out = run(*compiled, kSeed);
    const auto whole_out = run(*whole, kSeed);
    ASSERT_EQ(batched_out.size(), whole_out.size());
    for (const auto& [name, values] : whole_out) {
        const std::vector<float>& got = batched_out.at(name);
        ASSERT_EQ(got.size(), values.size()) << name;
        for (size_t i = 0; i < values.size(); ++i) {
            ASSERT_NEAR(got[i], values[i], 1e-5f * (1.0f + std::fabs(values[i])))
                << name << "[" << i << "]";
        }
    }

    auto expect_refused = [&](const std::string& edited, absl::string_view expected) {
        const absl::Status status = restore_status(kFfn, options, edited);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
        EXPECT_THAT(std::string(status.message()), HasSubstr(expected));
    };
    expect_refused(replace_line(record, "micro_batches", "micro_batches 3 0"),
                   "micro-batch weight 0 is not between 1 and");
    expect_refused(replace_line(record, "micro_batches", "micro_batches three 1"), "line 3");
    expect_refused(replace_line(record, "micro_batches", "micro_batches 3"), "line 3");
    // Other weights cut other blocks: the recorded exchanges no longer match their preambles.
    expect_refused(replace_line(record, "micro_batches", "micro_batches 1 1"),
                   "has another preamble than the graph's");
    // Without the line the plan has one function spec per device: the same.
    expect_refused(absl::StrReplaceAll(record, {{"micro_batches 3 1\n", ""}}),
                   "has another preamble than the graph's");
    // The line belongs before the operators, once.
    std::string late = absl::StrReplaceAll(record, {{"micro_batches 3 1\n", ""}});
    late = absl::StrReplaceAll(late, {{"\nend\n", "\nmicro_batches 3 1\nend\n"}});
    expect_refused(late, "'micro_batches' after the first operator");
    expect_refused(absl::StrReplaceAll(
                       record, {{"micro_batches 3 1\n", "micro_batches 3 1\nmicro_batches 3 1\n"}}),
                   "a second 'micro_batches' line");
}

} // namespace
} // namespace einsummable::runtime
