#include "compiler/physical/time_objective.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

// The index of `candidate` among `list` (same intervals), appending it when absent.
int index_of(std::vector<logical::Candidate>& list, const logical::Candidate& candidate) {
    for (size_t idx = 0; idx < list.size(); ++idx) {
        if (list[idx].request == candidate.request) {
            return static_cast<int>(idx);
        }
    }
    list.push_back(candidate);
    return static_cast<int>(list.size()) - 1;
}

class Search {
public:
    Search(const ir::Graph& graph, const logical::PlannerOptions& options,
           const exprog::Topology& topology, const PhysicalOptions& physical,
           const TimeSearchOptions& search)
        : graph_(graph), options_(options), topology_(topology), search_(search) {
        // One cancellation for every stage: the planner's, else the synthesis's.
        cancellation_ = options.cancellation != nullptr ? options.cancellation
                                                        : physical.synthesis.cancellation;
        options_.cancellation = cancellation_;
        // Every plan tried shares one synthesis cache: most exchanges recur between them.
        final_ = physical;
        final_.synthesis.cancellation = cancellation_;
        if (final_.cache == nullptr) {
            final_.cache = &own_cache_;
        }
        searching_ = final_;
        searching_.synthesis.iterations =
            std::min(physical.synthesis.iterations, search.search_iterations);
    }

    absl::StatusOr<TimeSearchResult> run() {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            candidates_, logical::enumerate_graph(graph_, options_.devices, cancellation_));
        // In logical::optimize's order: the candidates for fewer devices that
        // keep_unaggregated enumerates get their pinned repartition too.
        if (options_.batch_invariant) {
            logical::keep_unaggregated(graph_, options_.devices, candidates_);
        }
        logical::keep_attention_splits(graph_, options_.devices, options_.attention_splits,
                                       candidates_);
        logical::add_pinned_repartition(graph_, options_.pinned, candidates_);
        logical::keep_unreplicated(graph_, options_.unreplicated, candidates_);

        // Starting points: the asked planner's plan first (the cost objective's answer), then
        // greedy's and the baselines'.
        std::vector<logical::Planner> starts = {options_.planner,
                                                logical::Planner::dp,
                                                logical::Planner::greedy,
                                                logical::Planner::data_parallel,
                                                logical::Planner::megatron,
                                                logical::Planner::ulysses,
                                                logical::Planner::row_sharded};
        std::vector<int> best;
        double best_s = 0.0;
        std::string best_origin;
        for (size_t at = 0; at < starts.size(); ++at) {
            if (at > 0 && starts[at] == options_.planner) {
                continue;
            }
            logical::PlannerOptions start_options = options_;
            start_options.planner = starts[at];
            EINSUMMABLE_ASSIGN_OR_RETURN(logical::LogicalPlan plan,
                                         logical::optimize(graph_, start_options));
            // A baseline's plan that replicates an input the options keep unreplicated, or
            // aggregates in a batch-invariant search, is no starting point (its candidates are
            // not among the kept ones); the asked planner's plan always is.
            if (at > 0 && (!options_.unreplicated.empty() || options_.batch_invariant) &&
                !among_candidates(plan)) {
                continue;
            }
            std::vector<int> choice;
            for (size_t node = 0; node < plan.operators.size(); ++node) {
                choice.push_back(index_of(candidates_[node], plan.operators[node].choice));
            }
            EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, simulate(choice));
            if (at == 0) {
                cost_plan_choice_ = choice;
            }
            if (best.empty() || seconds < best_s) {
                best = choice;
                best_s = seconds;
                best_origin = std::string(logical::planner_name(starts[at]));
            }
        }

        // Local search: the cheapest single-operator changes of the best plan, by the paper's
        // cost, simulated; move to the fastest while it beats the current one.
        int changes = 0;
        for (int round = 0; round < search_.rounds; ++round) {
            std::vector<std::pair<double, std::vector<int>>> neighbours;
            for (size_t node = 0; node < best.size(); ++node) {
                // Costing every neighbour of a large graph takes a while: poll per operator.
                EINSUMMABLE_RETURN_IF_ERROR(stopped());
                for (int alt = 0; alt < static_cast<int>(candidates_[node].size()); ++alt) {
                    if (alt == best[node]) {
                        continue;
                    }
                    std::vector<int> choice = best;
                    choice[node] = alt;
                    if (simulated_.contains(choice)) {
                        continue;
                    }
                    const logical::Cost cost =
                        logical::evaluate_choice(graph_, candidates_, choice);
                    neighbours.emplace_back(cost.bytes.total(), std::move(choice));
                }
            }
            std::stable_sort(neighbours.begin(), neighbours.end(),
                             [](const auto& a, const auto& b) { return a.first < b.first; });
            std::vector<int> round_best;
            double round_best_s = best_s;
            for (size_t k = 0; k < neighbours.size() && k < static_cast<size_t>(search_.neighbours);
                 ++k) {
                EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, simulate(neighbours[k].second));
                if (seconds < round_best_s) {
                    round_best = neighbours[k].second;
                    round_best_s = seconds;
                }
            }
            if (round_best.empty()) {
                break;
            }
            best = std::move(round_best);
            best_s = round_best_s;
            ++changes;
        }

        // The winner and the cost objective's plan, simulated with the caller's options.
        TimeSearchResult result;
        result.plan = logical::make_plan(graph_, options_, candidates_, best);
        EINSUMMABLE_RETURN_IF_ERROR(stopped());
        EINSUMMABLE_ASSIGN_OR_RETURN(SimulatedPlan final_plan,
                                     compile_and_simulate(graph_, result.plan, topology_, final_));
        result.predicted_s = final_plan.simulation.predicted_s;
        const logical::LogicalPlan cost_plan =
            logical::make_plan(graph_, options_, candidates_, cost_plan_choice_);
        EINSUMMABLE_ASSIGN_OR_RETURN(SimulatedPlan cost_final,
                                     compile_and_simulate(graph_, cost_plan, topology_, final_));
        result.cost_plan_predicted_s = cost_final.simulation.predicted_s;
        // With full synthesis the cost objective's plan can come out ahead: keep it then.
        if (result.cost_plan_predicted_s <= result.predicted_s) {
            result.plan = cost_plan;
            result.predicted_s = result.cost_plan_predicted_s;
            best_origin = std::string(logical::planner_name(options_.planner));
            changes = 0;
        }
        result.origin = changes == 0 ? best_origin
                                     : absl::StrCat(best_origin, " + ", changes,
                                                    changes == 1 ? " change" : " changes");
        result.plans_simulated = static_cast<int>(simulated_.size()) + 2;
        return result;
    }

private:
    // Whether every operator's choice in `plan` is one of the candidates kept for it.
    bool among_candidates(const logical::LogicalPlan& plan) const {
        for (size_t node = 0; node < plan.operators.size(); ++node) {
            const std::vector<logical::Candidate>& list = candidates_[node];
            if (std::none_of(list.begin(), list.end(), [&](const logical::Candidate& candidate) {
                    return candidate.request == plan.operators[node].choice.request;
                })) {
                return false;
            }
        }
        return true;
    }

    absl::Status stopped() const {
        return support::check_cancelled(cancellation_, "the time objective's search");
    }

    absl::StatusOr<double> simulate(const std::vector<int>& choice) {
        auto it = simulated_.find(choice);
        if (it != simulated_.end()) {
            return it->second;
        }
        EINSUMMABLE_RETURN_IF_ERROR(stopped());
        const logical::LogicalPlan plan = logical::make_plan(graph_, options_, candidates_, choice);
        EINSUMMABLE_ASSIGN_OR_RETURN(SimulatedPlan simulated,
                                     compile_and_simulate(graph_, plan, topology_, searching_));
        simulated_.emplace(choice, simulated.simulation.predicted_s);
        return simulated.simulation.predicted_s;
    }

    const ir::Graph& graph_;
    logical::PlannerOptions options_; // the caller's, with the cancellation below
    const exprog::Topology& topology_;
    const TimeSearchOptions& search_;
    const support::Cancellation* cancellation_ = nullptr;
    SynthesisCache own_cache_;
    PhysicalOptions final_;     // the caller's options, with a cache
    PhysicalOptions searching_; // the same with the search's smaller budget
    logical::GraphCandidates candidates_;
    std::vector<int> cost_plan_choice_;
    std::map<std::vector<int>, double> simulated_;
};

} // namespace

absl::string_view objective_name(Objective objective) {
    return objective == Objective::cost ? "cost" : "time";
}

absl::StatusOr<Objective> parse_objective(absl::string_view name) {
    if (name == "cost") {
        return Objective::cost;
    }
    if (name == "time") {
        return Objective::time;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown objective '", name, "' (expected cost or time)"));
}

absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const logical::PlannerOptions& options,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& physical,
                                                   const TimeSearchOptions& search) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    return Search(graph, options, topology, physical, search).run();
}

} // namespace einsummable::physical
