// The default objective's plan (the time programme) against every hand-written baseline on the
// whole-plan simulator, over the paper's workloads at small scale (workloads::small_name) on the
// three built-in machines at 4 and 8 devices, with the quick configuration's 100 synthesis
// iterations: never slower than a baseline by more than 1 %. The full-size table is
// bench/paper's.

#include <cctype>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/logical/baselines.h"
#include "compiler/physical/plan_simulation.h"
#include "compiler/pipeline/pipeline.h"
#include "compiler/workloads/workloads.h"
#include "gtest/gtest.h"

namespace einsummable::pipeline {
namespace {

struct Case {
    std::string workload; // a reference workload (full-size name)
    std::string machine;
    int devices = 0;
};

std::string setup_name(const testing::TestParamInfo<Case>& info) {
    std::string name =
        absl::StrCat(info.param.workload, "_", info.param.machine, "_p", info.param.devices);
    for (char& c : name) {
        if (!std::isalnum(static_cast<unsigned char>(c))) {
            c = '_';
        }
    }
    return name;
}

std::vector<Case> setups() {
    std::vector<Case> all;
    for (const std::string& workload : workloads::reference_names()) {
        for (const char* machine : {"dgx-a100", "dgx-v100", "dgx-h100"}) {
            for (int devices : {4, 8}) {
                all.push_back({workload, machine, devices});
            }
        }
    }
    return all;
}

class DefaultPlan : public testing::TestWithParam<Case> {};

// The simulated time of the plan `options` gives on `machine`, its outputs delivered.
double simulated(const ir::Graph& graph, const Options& options, const Machine& machine) {
    absl::StatusOr<CompiledPlan> plan = compile(graph, options, machine);
    EXPECT_TRUE(plan.ok()) << plan.status();
    if (!plan.ok()) {
        return 0.0;
    }
    absl::StatusOr<physical::PlanSimulation> sim =
        physical::simulate_plan(plan->exec, *machine.topology);
    EXPECT_TRUE(sim.ok()) << sim.status();
    return sim.ok() ? sim->predicted_s : 0.0;
}

TEST_P(DefaultPlan, IsNoSlowerThanAnyBaseline) {
    const Case& setup = GetParam();
    absl::StatusOr<std::string> small = workloads::small_name(setup.workload);
    ASSERT_TRUE(small.ok()) << small.status();
    absl::StatusOr<ir::Graph> graph = workloads::by_name(*small);
    ASSERT_TRUE(graph.ok()) << graph.status();
    absl::StatusOr<exprog::Topology> topology = exprog::builtin_topology(setup.machine);
    ASSERT_TRUE(topology.ok()) << topology.status();
    Machine machine;
    machine.devices = setup.devices;
    machine.topology = *topology;
    physical::SynthesisCache cache; // the plans share many exchanges
    Options options;
    options.devices = setup.devices;
    options.synthesis_iterations = 100;
    options.cache = &cache;
    ASSERT_EQ(options.objective, logical::Objective::time) << "the default objective";
    const double by_default = simulated(*graph, options, machine);
    ASSERT_GT(by_default, 0.0);
    for (logical::Planner planner : logical::all_planners()) {
        if (!logical::is_baseline(planner)) {
            continue;
        }
        Options baseline = options;
        baseline.planner = planner;
        const double seconds = simulated(*graph, baseline, machine);
        EXPECT_LE(by_default, seconds * 1.01)
            << *small << " on " << setup.machine << " at p = " << setup.devices << ": "
            << logical::planner_name(planner) << " " << seconds * 1e6 << " us, the default "
            << by_default * 1e6 << " us (simulated)";
    }
}

INSTANTIATE_TEST_SUITE_P(SmallReferenceWorkloads, DefaultPlan, testing::ValuesIn(setups()),
                         setup_name);

} // namespace
} // namespace einsummable::pipeline
