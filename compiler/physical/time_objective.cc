#include "compiler/physical/time_objective.h"

#include <algorithm>

#include "compiler/physical/plan_simulation.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {

absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const logical::PlannerOptions& options,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& physical,
                                                   const TimeSearchOptions& search) {
    // One cancellation for every stage: the planner's, else the synthesis's.
    logical::PlannerOptions planner = options;
    if (planner.cancellation == nullptr) {
        planner.cancellation = physical.synthesis.cancellation;
    }
    // Every plan tried shares one synthesis cache: most exchanges recur between them.
    SynthesisCache own_cache;
    PhysicalOptions final_options = physical;
    final_options.synthesis.cancellation = planner.cancellation;
    if (final_options.cache == nullptr) {
        final_options.cache = &own_cache;
    }
    PhysicalOptions searching = final_options;
    searching.synthesis.iterations =
        std::min(physical.synthesis.iterations, search.search_iterations);
    auto time = [&](const logical::LogicalPlan& plan,
                    logical::PlanTiming timing) -> absl::StatusOr<double> {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            SimulatedPlan simulated,
            compile_and_simulate(graph, plan, topology,
                                 timing == logical::PlanTiming::final ? final_options : searching));
        return simulated.simulation.predicted_s;
    };
    return logical::optimize_for_time(graph, planner, time, search);
}

} // namespace einsummable::physical
