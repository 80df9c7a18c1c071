// The compile pipeline's passes (compiler/pipeline/passes.h), each on its own, and the pipeline
// whole (pipeline.h): what each pass makes of the options and the machine, that it gives what
// the layers below it give, and the memory fit's retry and errors. The plans run end to end in
// tests/unit/runtime/ (runtime::Plan calls this pipeline).

#include <algorithm>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/time_dp.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_record.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/pipeline/passes.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace einsummable::pipeline {
namespace {

using ::testing::HasSubstr;

// At p = 4 the planner runs this FFN data parallel: every device holds all of w1 and w2
// (16 KiB of its 52 KiB), while a plan that shards them needs 40 KiB per device.
constexpr int kDevices = 4;
const char* const kShape = "ffn:tokens=64,d_model=64,d_ff=32";
constexpr int64_t kWeightBytes = 2 * 64 * 32 * 4;

ir::Graph build(const std::string& name = kShape) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return *std::move(graph);
}

Options options_for(int devices = kDevices) {
    Options options;
    options.devices = devices;
    options.seed = 20261203;
    options.synthesis_iterations = 20;
    return options;
}

Machine machine_for(int devices = kDevices, int64_t capacity = 0) {
    Machine machine;
    machine.backend = "test";
    machine.devices = devices;
    machine.device_memory_bytes = capacity;
    return machine;
}

const DeviceNeed& largest(const std::vector<DeviceNeed>& need) {
    return *std::max_element(
        need.begin(), need.end(),
        [](const DeviceNeed& a, const DeviceNeed& b) { return a.total() < b.total(); });
}

CompiledPlan compiled(const ir::Graph& graph, const Options& options, const Machine& machine) {
    absl::StatusOr<CompiledPlan> plan = compile(graph, options, machine);
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : CompiledPlan{};
}

TEST(Check, NamesTheOptionOrTheMachineThatDoesNotFit) {
    const ir::Graph graph = build();
    Options options = options_for();
    options.devices = 0;
    EXPECT_THAT(check(graph, options, machine_for()).message(),
                HasSubstr("devices must be at least 1 (got 0)"));
    options = options_for();
    options.synthesis_iterations = -1;
    EXPECT_THAT(check(graph, options, machine_for()).message(),
                HasSubstr("synthesis_iterations must be non-negative (got -1)"));
    EXPECT_EQ(check(graph, options_for(8), machine_for(4)).message(),
              "the plan needs 8 devices; the test backend has 4");
    EXPECT_TRUE(check(graph, options_for(2), machine_for(4)).ok());
    // compile() checks before any pass.
    EXPECT_TRUE(absl::IsInvalidArgument(compile(graph, options_for(8), machine_for(4)).status()));
}

TEST(PassOptions, CarryTheOptionsAndTheMachine) {
    const ir::Graph graph = build();
    Options options = options_for();
    support::Cancellation cancellation;
    options.cancellation = &cancellation;
    options.batch_invariant = true;
    options.max_chunks = 4;
    Machine machine = machine_for(kDevices, 1 << 20);
    machine.attention_splits = logical::AttentionSplits::whole_sequences;
    const PassOptions passes = pass_options(graph, options, machine);
    EXPECT_EQ(passes.topology.name(), "dgx-a100"); // default_topology up to 8 devices
    EXPECT_EQ(passes.planner.devices, kDevices);
    EXPECT_EQ(passes.planner.seed, options.seed);
    EXPECT_EQ(passes.planner.cancellation, &cancellation);
    EXPECT_TRUE(passes.planner.batch_invariant);
    EXPECT_EQ(passes.planner.attention_splits, logical::AttentionSplits::whole_sequences);
    EXPECT_TRUE(passes.planner.pinned.empty());
    EXPECT_EQ(passes.physical.synthesis.seed, options.seed);
    EXPECT_EQ(passes.physical.synthesis.iterations, 20);
    EXPECT_EQ(passes.physical.synthesis.max_chunks, 4);
    EXPECT_EQ(passes.physical.synthesis.cancellation, &cancellation);
    EXPECT_EQ(passes.physical.resident, nullptr);
    EXPECT_EQ(passes.device_memory_bytes, 1 << 20);

    options.synthesis_seed = 0;
    machine.topology = *exprog::builtin_topology("dgx-v100");
    EXPECT_EQ(pass_options(graph, options, machine).physical.synthesis.seed, 0u);
    EXPECT_EQ(pass_options(graph, options, machine).topology.name(), "dgx-v100");
    EXPECT_EQ(default_topology(16).name(), "switch-16");
    EXPECT_EQ(default_topology(16).num_gpus(), 16);
}

TEST(PassOptions, PinTheResidentInputsUnlessTheirLayoutIsDefinedAgain) {
    const ir::Graph graph = build();
    Options defining = options_for();
    defining.resident_inputs = {"w1", "w2"};
    const CompiledPlan first = compiled(graph, defining, machine_for());
    ASSERT_TRUE(first.defined_layout.has_value());
    Options pinned = options_for();
    pinned.resident = &*first.defined_layout;
    PassOptions passes = pass_options(graph, pinned, machine_for());
    EXPECT_EQ(passes.planner.pinned.size(), 2u);
    EXPECT_EQ(passes.physical.resident, &*first.defined_layout);
    pinned.resident_defines = true;
    passes = pass_options(graph, pinned, machine_for());
    EXPECT_TRUE(passes.planner.pinned.empty());
    EXPECT_EQ(passes.physical.resident, nullptr);
}

// The plan's explanation without the objective it records (what logical::optimize's plans
// print).
std::string explained_alone(const ir::Graph& graph, logical::LogicalPlan plan) {
    plan.objective.reset();
    return logical::explain_text(graph, plan);
}

TEST(PlanByObjective, TheBytesObjectiveIsTheLogicalOptimiser) {
    const ir::Graph graph = build();
    const PassOptions passes = pass_options(graph, options_for(), machine_for());
    absl::StatusOr<ObjectivePlan> planned =
        plan_by_objective(graph, logical::Objective::bytes, passes);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_FALSE(planned->search.has_value());
    ASSERT_TRUE(planned->plan.objective.has_value());
    EXPECT_EQ(planned->plan.objective->objective, logical::Objective::bytes);
    EXPECT_EQ(explained_alone(graph, planned->plan),
              logical::explain_text(graph, *logical::optimize(graph, passes.planner)));
    EXPECT_THAT(logical::explain_text(graph, planned->plan), HasSubstr("\nobjective: bytes\n"));
}

TEST(PlanByObjective, TheTimeObjectiveIsTheTimeProgrammeOnTheTopology) {
    const ir::Graph graph = build();
    const PassOptions passes = pass_options(graph, options_for(), machine_for());
    absl::StatusOr<ObjectivePlan> planned =
        plan_by_objective(graph, logical::Objective::time, passes);
    ASSERT_TRUE(planned.ok()) << planned.status();
    EXPECT_FALSE(planned->search.has_value());
    logical::TimePlanReport report;
    absl::StatusOr<logical::LogicalPlan> by_time =
        logical::optimize_by_time(graph, passes.planner, passes.topology, &report);
    ASSERT_TRUE(by_time.ok()) << by_time.status();
    EXPECT_EQ(explained_alone(graph, planned->plan), logical::explain_text(graph, *by_time));
    ASSERT_TRUE(planned->plan.objective.has_value());
    EXPECT_EQ(planned->plan.objective->objective, logical::Objective::time);
    EXPECT_EQ(planned->plan.objective->predicted_s, report.predicted_s);
    EXPECT_EQ(planned->plan.objective->origin, report.origin);
    EXPECT_THAT(logical::explain_text(graph, planned->plan),
                HasSubstr(absl::StrCat("\nobjective: time", report.predicted_s > 0 ? ", " : "")));
}

TEST(PlanByObjective, TheSearchStartsFromTheTimeProgrammesPlanAndReportsHow) {
    const ir::Graph graph = build();
    const PassOptions passes = pass_options(graph, options_for(), machine_for());
    absl::StatusOr<ObjectivePlan> planned =
        plan_by_objective(graph, logical::Objective::search, passes);
    ASSERT_TRUE(planned.ok()) << planned.status();
    ASSERT_TRUE(planned->search.has_value());
    logical::TimeSearchOptions search = passes.search;
    search.starts.push_back(
        {"time dp", *logical::optimize_by_time(graph, passes.planner, passes.topology)});
    absl::StatusOr<logical::TimeSearchResult> found =
        optimize_for_time(graph, passes.planner, passes.topology, passes.physical, search);
    ASSERT_TRUE(found.ok()) << found.status();
    EXPECT_EQ(explained_alone(graph, planned->plan), logical::explain_text(graph, found->plan));
    EXPECT_EQ(planned->search->origin, found->origin);
    EXPECT_EQ(planned->search->predicted_s, found->predicted_s);
    EXPECT_LE(planned->search->predicted_s, planned->search->bytes_plan_predicted_s);
    ASSERT_TRUE(planned->plan.objective.has_value());
    EXPECT_EQ(planned->plan.objective->objective, logical::Objective::search);
    EXPECT_EQ(planned->plan.objective->predicted_s, found->predicted_s);
    EXPECT_EQ(planned->plan.objective->origin, found->origin);
}

TEST(PlanByObjective, OnlyDpPlansByObjective) {
    const ir::Graph graph = build();
    for (logical::Planner planner : logical::all_planners()) {
        Options options = options_for();
        options.planner = planner;
        const PassOptions passes = pass_options(graph, options, machine_for());
        for (logical::Objective objective : logical::all_objectives()) {
            SCOPED_TRACE(absl::StrCat(logical::planner_name(planner), " ",
                                      logical::objective_name(objective)));
            EXPECT_EQ(logical::planned_objective(planner, objective),
                      planner == logical::Planner::dp ? objective : logical::Objective::bytes);
            if (planner == logical::Planner::dp) {
                continue;
            }
            absl::StatusOr<ObjectivePlan> planned = plan_by_objective(graph, objective, passes);
            ASSERT_TRUE(planned.ok()) << planned.status();
            EXPECT_FALSE(planned->search.has_value());
            EXPECT_EQ(planned->plan.objective->objective, logical::Objective::bytes);
            EXPECT_EQ(explained_alone(graph, planned->plan),
                      logical::explain_text(graph, *logical::optimize(graph, passes.planner)));
        }
    }
}

TEST(LayOutResident, DefinesTheLayoutOfTheNamedInputsTheyPlanReads) {
    const ir::Graph graph = build();
    absl::StatusOr<CompiledPlan> plan = plan_and_synthesize(
        graph, pass_options(graph, options_for(), machine_for()), logical::Objective::bytes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    Options options = options_for();
    absl::StatusOr<std::optional<physical::ResidentLayout>> none =
        lay_out_resident(graph, plan->physical, options);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_FALSE(none->has_value());

    options.resident_inputs = {"w1", "w2", "no such input"};
    absl::StatusOr<std::optional<physical::ResidentLayout>> defined =
        lay_out_resident(graph, plan->physical, options);
    ASSERT_TRUE(defined.ok()) << defined.status();
    ASSERT_TRUE(defined->has_value());
    EXPECT_EQ(**defined,
              physical::define_resident_layout(graph, plan->physical, options.resident_inputs));
    EXPECT_EQ((*defined)->tensors.size(), 2u);

    // Defined again: the same layout passes, defining nothing new; another is refused.
    Options again = options;
    again.resident = &**defined;
    again.resident_defines = true;
    absl::StatusOr<std::optional<physical::ResidentLayout>> same =
        lay_out_resident(graph, plan->physical, again);
    ASSERT_TRUE(same.ok()) << same.status();
    EXPECT_FALSE(same->has_value());
    physical::ResidentLayout other = **defined;
    other.tensors.erase("w2");
    again.resident = &other;
    absl::StatusOr<std::optional<physical::ResidentLayout>> refused =
        lay_out_resident(graph, plan->physical, again);
    EXPECT_TRUE(absl::IsFailedPrecondition(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("lays its resident inputs out differently"));
}

TEST(LowerPlan, LowersAndMeasuresWhatEachDeviceNeeds) {
    const ir::Graph graph = build();
    Options options = options_for();
    absl::StatusOr<CompiledPlan> plan = plan_and_synthesize(
        graph, pass_options(graph, options, machine_for()), logical::Objective::bytes);
    ASSERT_TRUE(plan.ok()) << plan.status();
    options.batch_invariant = true; // the kernels' half of it: lowering only marks the ExecGraph
    ASSERT_TRUE(lower_plan(graph, options, nullptr, *plan).ok());
    absl::StatusOr<physical::ExecGraph> lowered = physical::lower(graph, plan->physical);
    ASSERT_TRUE(lowered.ok()) << lowered.status();
    EXPECT_EQ(plan->exec.to_string(), lowered->to_string());
    EXPECT_TRUE(plan->exec.batch_invariant);
    EXPECT_TRUE(plan->resident_names.empty());
    ASSERT_EQ(plan->need.size(), static_cast<size_t>(kDevices));
    for (const DeviceNeed& need : plan->need) {
        // Nothing named a weight: everything is activations.
        EXPECT_EQ(need.weights, 0);
        EXPECT_EQ(need.activations, plan->exec.arena_bytes[need.device]);
    }

    // With the weights resident in the layout the plan defines: read in place, held once.
    options.resident_inputs = {"w1", "w2"};
    absl::StatusOr<std::optional<physical::ResidentLayout>> defined =
        lay_out_resident(graph, plan->physical, options);
    ASSERT_TRUE(defined.ok() && defined->has_value());
    plan->defined_layout = **defined;
    ASSERT_TRUE(lower_plan(graph, options, nullptr, *plan).ok());
    EXPECT_EQ(plan->resident_names, (std::set<std::string>{"w1", "w2"}));
    for (const DeviceNeed& need : plan->need) {
        EXPECT_EQ(need.resident, kWeightBytes) << "the data-parallel plan replicates them";
        EXPECT_EQ(need.weights, need.resident);
        EXPECT_EQ(need.activations, plan->exec.arena_bytes[need.device]);
    }

    support::Cancellation cancellation;
    cancellation.cancel();
    absl::Status cancelled = lower_plan(graph, options, &cancellation, *plan);
    EXPECT_TRUE(absl::IsCancelled(cancelled)) << cancelled;
}

TEST(DeviceNeed, CountsTheWeightsTheDevicesKeepCopiesOf) {
    const ir::Graph graph = build();
    const CompiledPlan plan = compiled(graph, options_for(), machine_for());
    const std::vector<DeviceNeed> need =
        device_need(plan.exec, nullptr, {}, {"w1", "w2"}, kDevices);
    for (const DeviceNeed& device : need) {
        EXPECT_EQ(device.weights, kWeightBytes) << "device " << device.device;
        EXPECT_EQ(device.resident, 0);
        EXPECT_EQ(device.total(), plan.exec.arena_bytes[device.device]);
    }
    EXPECT_EQ(weight_names(options_for()), std::set<std::string>{});
    Options options = options_for();
    options.weights = {"w1"};
    options.resident_inputs = {"w2"};
    EXPECT_EQ(weight_names(options), (std::set<std::string>{"w1", "w2"}));
}

TEST(CheckMemory, NamesTheDeviceThatOverflowsMost) {
    const std::vector<DeviceNeed> need = {{0, 100, 50, 0}, {1, 100, 300, 0}, {2, 10, 10, 0}};
    EXPECT_TRUE(check_memory(need, 0).ok()) << "0 is unlimited";
    EXPECT_TRUE(check_memory(need, 400).ok());
    const absl::Status overflow = check_memory(need, 120);
    EXPECT_TRUE(absl::IsResourceExhausted(overflow)) << overflow;
    EXPECT_EQ(overflow.message(), "the plan does not fit in device memory: device 1 needs 400 B "
                                  "(weights 100 B + activations 300 B) and has 120 B");
}

TEST(FitMemory, APlanThatFitsIsKept) {
    const ir::Graph graph = build();
    const Options options = options_for();
    const CompiledPlan free = compiled(graph, options, machine_for());
    const PassOptions passes =
        pass_options(graph, options, machine_for(kDevices, largest(free.need).total()));
    absl::StatusOr<CompiledPlan> kept = fit_memory(graph, options, passes, free);
    ASSERT_TRUE(kept.ok()) << kept.status();
    EXPECT_FALSE(kept->weights_unreplicated);
    EXPECT_EQ(kept->exec.to_string(), free.exec.to_string());
    // Errors other than a layout defined again otherwise pass through.
    absl::StatusOr<CompiledPlan> failed =
        fit_memory(graph, options, passes, absl::CancelledError("compile cancelled during x"));
    EXPECT_TRUE(absl::IsCancelled(failed.status())) << failed.status();
}

TEST(FitMemory, APlanThatDoesNotFitIsPlannedAgainWithItsWeightsUnreplicated) {
    // At p = 2 this FFN runs data parallel, each device holding both weights (32 KiB of its
    // 72 KiB), and a plan that shards them needs less. (kShape at p = 4 no longer does: its
    // data-parallel plan keeps the saved output distributed instead of gathering it onto
    // device 0, and needs no more than a sharded one.)
    constexpr int kFitDevices = 2;
    constexpr int64_t kFitWeightBytes = 2 * 128 * 32 * 4;
    const ir::Graph graph = build("ffn:tokens=64,d_model=128,d_ff=32");
    Options options = options_for(kFitDevices);
    options.resident_inputs = {"w1", "w2"};
    const CompiledPlan free = compiled(graph, options, machine_for(kFitDevices));
    const int64_t capacity = largest(free.need).total() - 1;
    const PassOptions passes = pass_options(graph, options, machine_for(kFitDevices, capacity));
    absl::StatusOr<CompiledPlan> fitted = fit_memory(graph, options, passes, free);
    ASSERT_TRUE(fitted.ok()) << fitted.status();
    EXPECT_TRUE(fitted->weights_unreplicated);
    for (const DeviceNeed& need : fitted->need) {
        EXPECT_LE(need.total(), capacity) << "device " << need.device;
    }
    ASSERT_TRUE(fitted->defined_layout.has_value());
    for (int device = 0; device < kFitDevices; ++device) {
        EXPECT_EQ(fitted->defined_layout->arena_bytes[device], kFitWeightBytes / kFitDevices);
    }
    // compile() is the first plan and this pass.
    const CompiledPlan whole = compiled(graph, options, machine_for(kFitDevices, capacity));
    EXPECT_TRUE(whole.weights_unreplicated);
    EXPECT_EQ(whole.exec.to_string(), fitted->exec.to_string());

    // Too little for that too: what both plans need, and what was planned unreplicated.
    const int64_t too_little = largest(fitted->need).total() - 1;
    absl::StatusOr<CompiledPlan> refused = fit_memory(
        graph, options, pass_options(graph, options, machine_for(kFitDevices, too_little)), free);
    ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("no plan fits in device memory: device "));
    EXPECT_THAT(refused.status().message(), HasSubstr("; planned again with w1, w2 unreplicated"));
}

TEST(FitMemory, PinnedWeightsAreNotPlannedAgain) {
    const ir::Graph graph = build();
    Options options = options_for();
    options.resident_inputs = {"w1", "w2"};
    const CompiledPlan first = compiled(graph, options, machine_for());
    Options pinned = options_for();
    pinned.resident = &*first.defined_layout;
    const CompiledPlan reading = compiled(graph, pinned, machine_for());
    const int64_t capacity = largest(reading.need).total() - 1;
    absl::StatusOr<CompiledPlan> refused = fit_memory(
        graph, pinned, pass_options(graph, pinned, machine_for(kDevices, capacity)), reading);
    ASSERT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    EXPECT_THAT(refused.status().message(), HasSubstr("the plan does not fit in device memory"));
    EXPECT_THAT(refused.status().message(), HasSubstr("model's layout"));
}

TEST(Compile, CancelledBeforeItStartsDoesNoWork) {
    const ir::Graph graph = build();
    for (logical::Objective objective : logical::all_objectives()) {
        Options options = options_for();
        options.objective = objective;
        support::Cancellation cancellation;
        cancellation.cancel();
        options.cancellation = &cancellation;
        absl::StatusOr<CompiledPlan> plan = compile(graph, options, machine_for());
        EXPECT_TRUE(absl::IsCancelled(plan.status())) << plan.status();
        EXPECT_THAT(plan.status().message(), HasSubstr("compile cancelled during"));
        EXPECT_EQ(cancellation.polls(), 1);
    }
}

TEST(Compile, PlanLogicalAndRestoreGiveWhatCompileGives) {
    const ir::Graph graph = build("llama-block:seqs=2x8,d_model=32,heads_q=4,heads_kv=2,d_head=8,"
                                  "d_ff=48,dtype=f32");
    for (logical::Objective objective : logical::all_objectives()) {
        SCOPED_TRACE(logical::objective_name(objective));
        Options options = options_for();
        options.objective = objective;
        const CompiledPlan plan = compiled(graph, options, machine_for());
        EXPECT_EQ(plan.search.has_value(), objective == logical::Objective::search);
        ASSERT_TRUE(plan.logical.objective.has_value());
        EXPECT_EQ(plan.logical.objective->objective, objective);
        absl::StatusOr<ObjectivePlan> logical = plan_logical(graph, options, machine_for());
        ASSERT_TRUE(logical.ok()) << logical.status();
        EXPECT_EQ(logical::explain_text(graph, logical->plan),
                  logical::explain_text(graph, plan.logical));
        absl::StatusOr<CompiledPlan> restored =
            restore(graph, options, machine_for(),
                    physical::plan_record(graph, plan.logical, plan.physical));
        ASSERT_TRUE(restored.ok()) << restored.status();
        EXPECT_EQ(restored->exec.to_string(), plan.exec.to_string());
        EXPECT_FALSE(restored->search.has_value());
        // The record names the objective that made the plan; one that names none (recorded
        // before records named it) takes the asked one.
        ASSERT_TRUE(restored->logical.objective.has_value());
        EXPECT_EQ(restored->logical.objective->objective, objective);
        logical::LogicalPlan unnamed = plan.logical;
        unnamed.objective.reset();
        Options asked = options;
        asked.objective = logical::Objective::bytes;
        absl::StatusOr<CompiledPlan> legacy = restore(
            graph, asked, machine_for(), physical::plan_record(graph, unnamed, plan.physical));
        ASSERT_TRUE(legacy.ok()) << legacy.status();
        EXPECT_EQ(legacy->logical.objective->objective, logical::Objective::bytes);
        // A record made for more memory than the machine has is refused.
        absl::StatusOr<CompiledPlan> refused =
            restore(graph, options, machine_for(kDevices, largest(plan.need).total() - 1),
                    physical::plan_record(graph, plan.logical, plan.physical));
        EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
    }
}

} // namespace
} // namespace einsummable::pipeline
