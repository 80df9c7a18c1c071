#include "compiler/logical/optimizer.h"

#include <random>

#include "compiler/logical/baselines.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {

std::vector<int> choose_random(const GraphCandidates& candidates, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int> choice;
    choice.reserve(candidates.size());
    for (const std::vector<Candidate>& options : candidates) {
        choice.push_back(
            static_cast<int>(std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)));
    }
    return choice;
}

absl::StatusOr<GraphCandidates> planning_candidates(const ir::Graph& graph,
                                                    const PlannerOptions& options) {
    EINSUMMABLE_ASSIGN_OR_RETURN(GraphCandidates candidates,
                                 enumerate_graph(graph, options.devices, options.cancellation));
    // Aggregation first: the candidates it enumerates for fewer devices then get their pinned
    // repartition, and the replication rule chooses among what it keeps.
    if (options.batch_invariant) {
        keep_unaggregated(graph, options.devices, candidates);
    }
    keep_attention_splits(graph, options.devices, options.attention_splits, candidates);
    keep_state_tilings(graph, options.devices, options.pinned, candidates);
    add_pinned_repartition(graph, options.pinned, candidates);
    keep_unreplicated(graph, options.unreplicated, candidates);
    return candidates;
}

absl::StatusOr<LogicalPlan> optimize(const ir::Graph& graph, const PlannerOptions& options) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    EINSUMMABLE_RETURN_IF_ERROR(support::check_cancelled(options.cancellation, "logical planning"));
    if (is_baseline(options.planner)) {
        // One fixed candidate per operator: no enumeration, nothing to choose.
        EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<Candidate> chosen,
                                     choose_baseline(graph, options.planner, options.devices));
        GraphCandidates candidates;
        candidates.reserve(chosen.size());
        for (Candidate& candidate : chosen) {
            candidates.push_back({std::move(candidate)});
        }
        // A resident state's writer keeps the layout's tiling whatever the baseline's rule.
        keep_state_tilings(graph, options.devices, options.pinned, candidates);
        add_pinned_repartition(graph, options.pinned, candidates);
        // A baseline's one candidate per operator stays, whatever it replicates or, with
        // options.batch_invariant, aggregates: it is the rule the baseline names.
        keep_unreplicated(graph, options.unreplicated, candidates);
        return make_plan(graph, options, candidates, std::vector<int>(candidates.size(), 0));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(GraphCandidates candidates, planning_candidates(graph, options));
    absl::StatusOr<std::vector<int>> choice;
    switch (options.planner) {
    case Planner::dp:
        choice = choose_dp(graph, candidates, /*with_repartition=*/true, options.cancellation);
        break;
    case Planner::greedy:
        choice = choose_dp(graph, candidates, /*with_repartition=*/false, options.cancellation);
        break;
    case Planner::random:
        choice = choose_random(candidates, options.seed);
        break;
    default: // the baselines returned above
        break;
    }
    EINSUMMABLE_RETURN_IF_ERROR(choice);
    EINSUMMABLE_RETURN_IF_ERROR(support::check_cancelled(options.cancellation, "logical planning"));
    return make_plan(graph, options, candidates, *choice);
}

} // namespace einsummable::logical
