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

// Starts slower than the fastest by more than this factor while searching are not timed again
// as final: chunked exchanges gain less than that on the paper's setups.
constexpr double kFinalStartSlack = 1.5;

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
        EINSUMMABLE_ASSIGN_OR_RETURN(candidates_, planning_candidates(graph_, options_));
        return absl::OkStatus();
    }

    // Starting points: the asked planner's plan first (the bytes objective's answer for dp),
    // then greedy's and the baselines', then the caller's; the fastest becomes best_.
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
            EINSUMMABLE_RETURN_IF_ERROR(
                try_start(plan, std::string(planner_name(starts[at])), at == 0));
        }
        // The caller's plans were made for these options: always starting points.
        for (const StartingPlan& start : search_.starts) {
            EINSUMMABLE_RETURN_IF_ERROR(try_start(start.plan, start.origin, false));
        }
        return absl::OkStatus();
    }

    // Simulates one starting plan (its choices join the candidates); it becomes best_ when it
    // is the fastest so far. `asked`: it is options.planner's plan.
    absl::Status try_start(const LogicalPlan& plan, std::string origin, bool asked) {
        std::vector<int> choice;
        for (size_t node = 0; node < plan.operators.size(); ++node) {
            choice.push_back(index_of_or_add(candidates_[node], plan.operators[node].choice));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, simulate(choice));
        if (asked) {
            asked_choice_ = choice;
        }
        starts_.push_back({choice, origin, seconds});
        if (best_.choice.empty() || seconds < best_.seconds) {
            best_ = {choice, seconds};
            best_origin_ = std::move(origin);
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

    // The winner, the starts and options.planner's plan, timed as final: the fastest of them
    // (on a tie options.planner's plan, then the first start), so that full synthesis never
    // leaves the search slower than where it started. Every start within kFinalStartSlack of
    // the fastest, not only the fastest while searching: the timer may price plans more
    // coarsely while searching (pipeline's prices whole-atom exchanges), and a start that only
    // chunking makes the fastest must still win.
    absl::StatusOr<TimeSearchResult> finish() {
        TimeSearchResult result;
        std::map<std::vector<int>, double> final_seconds;
        auto final_time = [&](const std::vector<int>& choice) -> absl::StatusOr<double> {
            auto it = final_seconds.find(choice);
            if (it != final_seconds.end()) {
                return it->second;
            }
            EINSUMMABLE_RETURN_IF_ERROR(stopped());
            EINSUMMABLE_ASSIGN_OR_RETURN(
                double seconds,
                time_(make_plan(graph_, options_, candidates_, choice), PlanTiming::final));
            final_seconds.emplace(choice, seconds);
            return seconds;
        };
        std::vector<int> chosen = best_.choice;
        EINSUMMABLE_ASSIGN_OR_RETURN(result.predicted_s, final_time(chosen));
        const Start* fastest_start = nullptr;
        double start_s = 0.0;
        const double fastest_searching =
            starts_.empty() ? 0.0
                            : std::min_element(starts_.begin(), starts_.end(),
                                               [](const Start& a, const Start& b) {
                                                   return a.searching_s < b.searching_s;
                                               })
                                  ->searching_s;
        for (const Start& start : starts_) {
            if (start.searching_s > kFinalStartSlack * fastest_searching) {
                continue;
            }
            EINSUMMABLE_ASSIGN_OR_RETURN(double seconds, final_time(start.choice));
            if (fastest_start == nullptr || seconds < start_s) {
                fastest_start = &start;
                start_s = seconds;
            }
        }
        if (fastest_start != nullptr && start_s <= result.predicted_s) {
            chosen = fastest_start->choice;
            result.predicted_s = start_s;
            best_origin_ = fastest_start->origin;
            changes_ = 0;
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(result.bytes_plan_predicted_s, final_time(asked_choice_));
        if (result.bytes_plan_predicted_s <= result.predicted_s) {
            chosen = asked_choice_;
            result.predicted_s = result.bytes_plan_predicted_s;
            best_origin_ = std::string(planner_name(options_.planner));
            changes_ = 0;
        }
        result.plan = make_plan(graph_, options_, candidates_, chosen);
        result.origin = changes_ == 0 ? best_origin_
                                      : absl::StrCat(best_origin_, " + ", changes_,
                                                     changes_ == 1 ? " change" : " changes");
        result.plans_simulated = static_cast<int>(simulated_.size() + final_seconds.size());
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
        return support::check_cancelled(options_.cancellation,
                                        "the search objective's plan search");
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
    std::vector<int> asked_choice_; // options.planner's plan
    Timed best_;                    // the fastest choice so far
    std::string best_origin_;
    struct Start {
        std::vector<int> choice;
        std::string origin;
        double searching_s = 0.0; // as timed while searching
    };
    std::vector<Start> starts_; // in the order tried
    int changes_ = 0;           // moves of the local search
    std::map<std::vector<int>, double> simulated_;
};

} // namespace

absl::StatusOr<TimeSearchResult> optimize_for_time(const ir::Graph& graph,
                                                   const PlannerOptions& options, PlanTimer time,
                                                   const TimeSearchOptions& search) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    return Search(graph, options, time, search).run();
}

} // namespace einsummable::logical
