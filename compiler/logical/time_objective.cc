#include "compiler/logical/time_objective.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {
namespace {

// The index of `candidate` among `list` (same intervals), appending it when absent.
int index_of(std::vector<Candidate>& list, const Candidate& candidate) {
    for (size_t idx = 0; idx < list.size(); ++idx) {
        if (list[idx].request == candidate.request) {
            return static_cast<int>(idx);
        }
    }
    list.push_back(candidate);
    return static_cast<int>(list.size()) - 1;
}

// A choice (one candidate index per operator) and its simulated time.
struct Timed {
    std::vector<int> choice;
    double seconds = 0.0;
};

class Search {
public:
    Search(const ir::Graph& graph, const PlannerOptions& options, PlanTimer time,
           const TimeSearchOptions& search)
        : graph_(graph), options_(options), time_(time), search_(search) {}

    absl::StatusOr<TimeSearchResult> run() {
        EINSUMMABLE_RETURN_IF_ERROR(enumerate());
        EINSUMMABLE_RETURN_IF_ERROR(try_starting_points());
        EINSUMMABLE_RETURN_IF_ERROR(local_search());
        return finish();
    }

private:
    // The candidates, kept as logical::optimize keeps them.
    absl::Status enumerate() {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            candidates_, enumerate_graph(graph_, options_.devices, options_.cancellation));
        // In optimize's order: the candidates for fewer devices that keep_unaggregated
        // enumerates get their pinned repartition too.
        if (options_.batch_invariant) {
            keep_unaggregated(graph_, options_.devices, candidates_);
        }
        keep_attention_splits(graph_, options_.devices, options_.attention_splits, candidates_);
        add_pinned_repartition(graph_, options_.pinned, candidates_);
        keep_unreplicated(graph_, options_.unreplicated, candidates_);
        return absl::OkStatus();
    }

    // Starting points: the asked planner's plan first (the cost objective's answer), then
    // greedy's and the baselines'; the fastest becomes best_.
    absl::Status try_starting_points() {
        const std::vector<Planner> starts = {
            options_.planner,  Planner::dp,      Planner::greedy,     Planner::data_parallel,
            Planner::megatron, Planner::ulysses, Planner::row_sharded};
        for (size_t at = 0; at < starts.size(); ++at) {
            if (at > 0 && starts[at] == options_.planner) {
                continue;
            }
            PlannerOptions start_options = options_;
            start_options.planner = starts[at];
            EINSUMMABLE_ASSIGN_OR_RETURN(LogicalPlan plan, optimize(graph_, start_options));
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
            if (best_.choice.empty() || seconds < best_.seconds) {
                best_ = {choice, seconds};
                best_origin_ = std::string(planner_name(starts[at]));
            }
        }
        return absl::OkStatus();
    }

    // Local search: the cheapest single-operator changes of the best plan, by the paper's
    // cost, simulated; move to the fastest while it beats the current one.
    absl::Status local_search() {
        for (int round = 0; round < search_.rounds; ++round) {
            EINSUMMABLE_ASSIGN_OR_RETURN(const std::vector<std::vector<int>> neighbours,
                                         cheapest_neighbours());
            Timed round_best{{}, best_.seconds};
            for (size_t k = 0; k < neighbours.size() && k < static_cast<size_t>(search_.neighbours);
                 ++k) {
                EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, simulate(neighbours[k]));
                if (seconds < round_best.seconds) {
                    round_best = {neighbours[k], seconds};
                }
            }
            if (round_best.choice.empty()) {
                break;
            }
            best_ = std::move(round_best);
            ++changes_;
        }
        return absl::OkStatus();
    }

    // The choices that change one operator of best_ and were not simulated yet, cheapest first
    // by the paper's cost.
    absl::StatusOr<std::vector<std::vector<int>>> cheapest_neighbours() const {
        std::vector<std::pair<double, std::vector<int>>> neighbours; // cost in bytes, choice
        for (size_t node = 0; node < best_.choice.size(); ++node) {
            // Costing every neighbour of a large graph takes a while: poll per operator.
            EINSUMMABLE_RETURN_IF_ERROR(stopped());
            for (int alt = 0; alt < static_cast<int>(candidates_[node].size()); ++alt) {
                if (alt == best_.choice[node]) {
                    continue;
                }
                std::vector<int> choice = best_.choice;
                choice[node] = alt;
                if (simulated_.contains(choice)) {
                    continue;
                }
                const Cost cost = evaluate_choice(graph_, candidates_, choice);
                neighbours.emplace_back(cost.bytes.total(), std::move(choice));
            }
        }
        std::stable_sort(neighbours.begin(), neighbours.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        std::vector<std::vector<int>> choices;
        for (auto& [bytes, choice] : neighbours) {
            choices.push_back(std::move(choice));
        }
        return choices;
    }

    // The winner and the cost objective's plan, timed as final.
    absl::StatusOr<TimeSearchResult> finish() {
        TimeSearchResult result;
        result.plan = make_plan(graph_, options_, candidates_, best_.choice);
        EINSUMMABLE_RETURN_IF_ERROR(stopped());
        EINSUMMABLE_ASSIGN_OR_RETURN(result.predicted_s, time_(result.plan, PlanTiming::final));
        const LogicalPlan cost_plan = make_plan(graph_, options_, candidates_, cost_plan_choice_);
        EINSUMMABLE_ASSIGN_OR_RETURN(result.cost_plan_predicted_s,
                                     time_(cost_plan, PlanTiming::final));
        // With full synthesis the cost objective's plan can come out ahead: keep it then.
        if (result.cost_plan_predicted_s <= result.predicted_s) {
            result.plan = cost_plan;
            result.predicted_s = result.cost_plan_predicted_s;
            best_origin_ = std::string(planner_name(options_.planner));
            changes_ = 0;
        }
        result.origin = changes_ == 0 ? best_origin_
                                      : absl::StrCat(best_origin_, " + ", changes_,
                                                     changes_ == 1 ? " change" : " changes");
        result.plans_simulated = static_cast<int>(simulated_.size()) + 2;
        return result;
    }

    // Whether every operator's choice in `plan` is one of the candidates kept for it.
    bool among_candidates(const LogicalPlan& plan) const {
        for (size_t node = 0; node < plan.operators.size(); ++node) {
            const std::vector<Candidate>& list = candidates_[node];
            if (std::none_of(list.begin(), list.end(), [&](const Candidate& candidate) {
                    return candidate.request == plan.operators[node].choice.request;
                })) {
                return false;
            }
        }
        return true;
    }

    absl::Status stopped() const {
        return support::check_cancelled(options_.cancellation, "the time objective's search");
    }

    absl::StatusOr<double> simulate(const std::vector<int>& choice) {
        auto it = simulated_.find(choice);
        if (it != simulated_.end()) {
            return it->second;
        }
        EINSUMMABLE_RETURN_IF_ERROR(stopped());
        const LogicalPlan plan = make_plan(graph_, options_, candidates_, choice);
        EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, time_(plan, PlanTiming::searching));
        simulated_.emplace(choice, seconds);
        return seconds;
    }

    const ir::Graph& graph_;
    const PlannerOptions& options_;
    PlanTimer time_;
    const TimeSearchOptions& search_;
    GraphCandidates candidates_;
    std::vector<int> cost_plan_choice_;
    Timed best_; // the fastest choice so far
    std::string best_origin_;
    int changes_ = 0; // moves of the local search
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
                                                   const PlannerOptions& options, PlanTimer time,
                                                   const TimeSearchOptions& search) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    return Search(graph, options, time, search).run();
}

} // namespace einsummable::logical
