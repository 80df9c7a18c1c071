// runtime::Plan::compile observes CompileOptions::cancellation (compiler/support/cancellation.h):
// set before the call it returns Cancelled without compiling; set from another thread it stops
// a long compile within a bound; left unset, it changes nothing in the plan. What the tests
// assert is counted in polls of the cancellation, which no scheduling changes; the one bound in
// seconds is generous.

#include <iostream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "tests/unit/cancel_after.h"

namespace einsummable::runtime {
namespace {

using ::testing::HasSubstr;

ir::Graph build(const std::string& name) {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(name);
    EXPECT_TRUE(graph.ok()) << name << ": " << graph.status();
    return *std::move(graph);
}

std::shared_ptr<Backend> cpu_backend(int devices) {
    return cpu::make_cpu_backend({devices, 1});
}

TEST(PlanCancellation, SetBeforeTheCallReturnsCancelled) {
    for (logical::Objective objective : logical::all_objectives()) {
        SCOPED_TRACE(logical::objective_name(objective));
        CompileOptions options;
        options.devices = 8;
        options.objective = objective;
        auto cancellation = std::make_shared<support::Cancellation>();
        cancellation->cancel();
        options.cancellation = cancellation;
        absl::StatusOr<std::unique_ptr<Plan>> plan =
            Plan::compile(build("llama-block:tokens=1024"), options, cpu_backend(8));
        EXPECT_TRUE(absl::IsCancelled(plan.status())) << plan.status();
        EXPECT_THAT(std::string(plan.status().message()), HasSubstr("compile cancelled during"));
        // No work: it returned at its first poll (the whole compile polls tens of thousands of
        // times, over seconds).
        EXPECT_EQ(cancellation->polls(), 1);
    }
}

TEST(PlanCancellation, SetFromAnotherThreadStopsALongCompile) {
    // Both take seconds in full on one core (einsummable-plan --simulate), polling the
    // cancellation tens of thousands of times: the search objective on the LLaMA block,
    // and the exchange synthesis of a four-block stack. The other thread sets the cancellation
    // once the compile has polled it 100 times, inside its loops, however slowly the machine runs
    // it. Cancelled shows the compile did not run to the end; stopping within one step of its
    // loops, it polls once more (the poll that finds the cancellation) and returns.
    struct Case {
        std::string workload;
        logical::Objective objective;
    };
    for (const Case& c : {Case{"llama-block:tokens=1024", logical::Objective::search},
                          Case{"llama-stack:blocks=4,tokens=8192", logical::Objective::bytes}}) {
        SCOPED_TRACE(c.workload);
        CompileOptions options;
        options.devices = 8;
        options.objective = c.objective;
        auto cancellation = std::make_shared<support::Cancellation>();
        options.cancellation = cancellation;
        ir::Graph graph = build(c.workload);
        auto [plan, timing] = einsummable::testing::run_cancelled_at_poll(*cancellation, 100, [&] {
            return Plan::compile(std::move(graph), options, cpu_backend(8));
        });
        EXPECT_TRUE(absl::IsCancelled(plan.status())) << plan.status();
        EXPECT_GE(timing.polls_at_cancel, 100);
        EXPECT_LE(timing.polls_at_return - timing.polls_at_cancel, 1)
            << "polls after cancel(): the compile went on";
        // A backstop in seconds for work after the last poll, generous for a loaded two-core
        // machine (it takes well under a millisecond).
        EXPECT_LT(timing.after_cancel_s, einsummable::testing::kCancelBoundS);
        std::cout << c.workload << " (objective " << logical::objective_name(c.objective)
                  << "): returned " << timing.after_cancel_s * 1e3 << " ms and "
                  << timing.polls_at_return - timing.polls_at_cancel
                  << " polls after cancel() at poll " << timing.polls_at_cancel << ": "
                  << plan.status().message() << "\n";
    }
}

TEST(PlanCancellation, AnUnsetCancellationGivesTheSamePlan) {
    const absl::StatusOr<std::string> llama = workloads::small_name("llama-block:seqs=8x1024");
    ASSERT_TRUE(llama.ok()) << llama.status();
    for (logical::Objective objective : logical::all_objectives()) {
        for (exprog::SynthesisMode schedule :
             {exprog::SynthesisMode::naive, exprog::SynthesisMode::optimized}) {
            SCOPED_TRACE(absl::StrCat(logical::objective_name(objective), " ",
                                      exprog::synthesis_mode_name(schedule)));
            CompileOptions options;
            options.devices = 4;
            options.objective = objective;
            options.schedule = schedule;
            options.seed = 20261202;
            options.synthesis_iterations = 40;
            absl::StatusOr<std::unique_ptr<Plan>> plain =
                Plan::compile(build(*llama), options, cpu_backend(4));
            options.cancellation = std::make_shared<support::Cancellation>();
            absl::StatusOr<std::unique_ptr<Plan>> with =
                Plan::compile(build(*llama), options, cpu_backend(4));
            ASSERT_TRUE(plain.ok()) << plain.status();
            ASSERT_TRUE(with.ok()) << with.status();
            EXPECT_EQ((*plain)->record(), (*with)->record());
            EXPECT_EQ((*plain)->explain(), (*with)->explain());
            EXPECT_EQ((*plain)->exec_graph().to_string(), (*with)->exec_graph().to_string());
        }
    }
}

} // namespace
} // namespace einsummable::runtime
