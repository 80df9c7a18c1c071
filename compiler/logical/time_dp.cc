// The dynamic programme over predicted time: time_model.h's terms as a ProgrammePricing for the
// programme of dynamic_programme.cc, then the fastest of its plan and the other complete plans
// the same pricing can weigh (the bytes programme's, the hand-written baselines').

#include "compiler/logical/time_dp.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/logical/baselines.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/programme.h"
#include "compiler/logical/time_model.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {
namespace {

// The predicted time of candidates and of the edges between them, prepared once per candidate:
// its own seconds (slowest device, aggregation, pinned inputs' exchange) and, interned, where
// its outputs lie and which block each function spec reads. Edge prices are memoised by the
// pair of interned layouts, so the blocks of a stack of equal layers are priced once.
class TimePricing final : public ProgrammePricing {
public:
    TimePricing(const ir::Graph& graph, const GraphCandidates& candidates,
                const PlannerOptions& options, const exprog::Topology& topology)
        : graph_(graph), candidates_(candidates), options_(options), topology_(topology),
          prepared_(candidates.size()) {}

    absl::Status prepare() {
        for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph_.nodes().size()); ++node) {
            EINSUMMABLE_RETURN_IF_ERROR(
                support::check_cancelled(options_.cancellation, "the time programme's pricing"));
            prepared_[node].clear();
            for (const Candidate& candidate : candidates_[node]) {
                EINSUMMABLE_ASSIGN_OR_RETURN(Prepared prepared, prepare(node, candidate));
                prepared_[node].push_back(std::move(prepared));
            }
        }
        return absl::OkStatus();
    }

    double local(ir::NodeId node, int candidate) const override {
        return prepared_[node][candidate].seconds;
    }

    EdgePrice edge(ir::NodeId producer, int producer_candidate, ir::NodeId consumer,
                   int consumer_candidate, int slot) const override {
        const ir::GraphTensor& tensor = graph_.tensor(graph_.node(consumer).inputs[slot]);
        const int held = prepared_[producer][producer_candidate].held[tensor.output_idx];
        const int wanted = prepared_[consumer][consumer_candidate].wanted[slot];
        const uint64_t key = (static_cast<uint64_t>(held) << 32) | static_cast<uint32_t>(wanted);
        auto it = edges_.find(key);
        if (it == edges_.end()) {
            // Every device is a GPU of the topology (checked before pricing), so every transfer
            // has a route and the pricing cannot fail.
            const absl::StatusOr<EdgePrice> price = exchange_seconds(
                helds_[held], wanteds_[wanted], static_cast<int>(options_.devices), topology_);
            it = edges_.emplace(key, price.ok() ? *price : EdgePrice{}).first;
        }
        return it->second;
    }

    bool overlaps_branches() const override { return true; }

    // The predicted time of a complete choice, composed as the programme composes it: per tree
    // (tree_parents), each operator's own seconds after its input branches (compose_branches;
    // an input from another tree is a branch of no work), the trees one after another.
    double predict(const std::vector<int>& choice) const {
        const std::vector<ir::NodeId> parent = tree_parents(graph_);
        std::vector<double> ready(graph_.nodes().size(), 0.0);
        std::vector<bool> assembled(graph_.nodes().size(), false);
        double seconds = 0.0;
        for (ir::NodeId node = 0; node < static_cast<ir::NodeId>(graph_.nodes().size()); ++node) {
            const ir::GraphNode& graph_node = graph_.node(node);
            std::vector<Branch> branches;
            for (size_t slot = 0; slot < graph_node.inputs.size(); ++slot) {
                const ir::GraphTensor& tensor = graph_.tensor(graph_node.inputs[slot]);
                if (tensor.is_input()) {
                    continue;
                }
                auto it = std::find_if(branches.begin(), branches.end(), [&](const Branch& b) {
                    return b.producer == tensor.producer;
                });
                if (it == branches.end()) {
                    const double work =
                        parent[tensor.producer] == node ? ready[tensor.producer] : 0.0;
                    const bool frees =
                        parent[tensor.producer] == node && assembled[tensor.producer];
                    branches.push_back({tensor.producer, work, 0.0, frees});
                    it = std::prev(branches.end());
                }
                const EdgePrice price = edge(tensor.producer, choice[tensor.producer], node,
                                             choice[node], static_cast<int>(slot));
                it->work += price.work;
                it->wait += price.wait;
            }
            assembled[node] = assembles(branches);
            ready[node] = local(node, choice[node]) + compose_branches(branches);
            if (parent[node] < 0) {
                seconds += ready[node];
            }
        }
        return seconds;
    }

private:
    struct Prepared {
        double seconds = 0.0;
        std::vector<int> held;   // per output: interned HeldBlocks
        std::vector<int> wanted; // per input: interned blocks read (-1 for graph inputs)
    };

    absl::StatusOr<Prepared> prepare(ir::NodeId node, const Candidate& candidate) {
        const ir::Operator& op = *graph_.node(node).op;
        EINSUMMABLE_ASSIGN_OR_RETURN(ir::JoinAggSpec spec, op.spec(candidate.request));
        Prepared prepared;
        EINSUMMABLE_ASSIGN_OR_RETURN(CandidateTime time, price_candidate(op, spec, topology_));
        prepared.seconds = time.compute_s + time.aggregation_s;
        const ir::GraphNode& graph_node = graph_.node(node);
        for (int o = 0; o < op.num_outputs(); ++o) {
            const int64_t element_bytes = ir::dtype_size(op.output_types()[o].dtype);
            if (graph_.tensor(graph_node.outputs[o]).saved) {
                prepared.seconds += delivery_seconds(spec, o, element_bytes, topology_);
            }
            HeldBlocks held = held_of(spec, o, element_bytes);
            prepared.held.push_back(intern(helds_, held_ids_, std::move(held)));
        }
        for (int i = 0; i < op.num_inputs(); ++i) {
            std::vector<ir::Box> wanted;
            for (const ir::FunctionSpec& function : spec.functions) {
                wanted.push_back(function.inputs[i]);
            }
            const ir::TensorId input = graph_node.inputs[i];
            auto pinned = options_.pinned.find(input);
            if (pinned != options_.pinned.end()) { // resident blocks: block b on device b
                HeldBlocks held{pinned->second, {}, ir::dtype_size(op.input_types()[i].dtype)};
                for (size_t b = 0; b < held.boxes.size(); ++b) {
                    held.devices.push_back(static_cast<int>(b % options_.devices));
                }
                EINSUMMABLE_ASSIGN_OR_RETURN(
                    EdgePrice price,
                    exchange_seconds(held, wanted, static_cast<int>(options_.devices), topology_));
                prepared.seconds += price.total();
            }
            if (graph_.tensor(input).is_input()) {
                prepared.wanted.push_back(-1);
                continue;
            }
            const int id = intern(wanteds_, wanted_ids_, std::move(wanted));
            prepared.wanted.push_back(id);
        }
        return prepared;
    }

    template <typename T>
    static int intern(std::vector<T>& values, std::map<T, int>& ids, T value) {
        auto [it, inserted] = ids.emplace(std::move(value), static_cast<int>(values.size()));
        if (inserted) {
            values.push_back(it->first);
        }
        return it->second;
    }

    const ir::Graph& graph_;
    const GraphCandidates& candidates_;
    const PlannerOptions& options_;
    const exprog::Topology& topology_;
    std::vector<std::vector<Prepared>> prepared_;
    std::vector<HeldBlocks> helds_;
    std::map<HeldBlocks, int> held_ids_;
    std::vector<std::vector<ir::Box>> wanteds_;
    std::map<std::vector<ir::Box>, int> wanted_ids_;
    mutable std::unordered_map<uint64_t, EdgePrice> edges_;
};

// InvalidArgument (worded as compile_physical's) when the topology has fewer GPUs than devices.
absl::Status check_devices(int64_t devices, const exprog::Topology& topology) {
    if (devices > topology.num_gpus()) {
        return absl::InvalidArgumentError(absl::StrCat("the plan is for ", devices,
                                                       " devices; topology ", topology.name(),
                                                       " has ", topology.num_gpus()));
    }
    return absl::OkStatus();
}

// A complete plan the programme's is weighed against, as a choice among `candidates`.
struct Contender {
    std::string origin;
    std::vector<int> choice;
};

// The hand-written baselines' plans as choices among `candidates`, their candidates added where
// absent. Where the options restrict the candidates (batch invariance, unreplicated inputs, a
// subset of attention's splits), a baseline that needs one the restriction removed is left out.
absl::StatusOr<std::vector<Contender>> baseline_contenders(const ir::Graph& graph,
                                                           const PlannerOptions& options,
                                                           GraphCandidates& candidates) {
    const bool restricted = options.batch_invariant || !options.unreplicated.empty() ||
                            options.attention_splits != AttentionSplits::any;
    std::vector<Contender> contenders;
    for (Planner planner : all_planners()) {
        if (!is_baseline(planner)) {
            continue;
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<Candidate> chosen,
                                     choose_baseline(graph, planner, options.devices));
        GraphCandidates single;
        for (Candidate& candidate : chosen) {
            single.push_back({std::move(candidate)});
        }
        keep_state_tilings(graph, options.devices, options.pinned, single);
        add_pinned_repartition(graph, options.pinned, single);
        Contender contender{std::string(planner_name(planner)), {}};
        for (size_t node = 0; node < single.size(); ++node) {
            const size_t before = candidates[node].size();
            const int idx = index_of_or_add(candidates[node], single[node][0]);
            if (restricted && candidates[node].size() != before) {
                candidates[node].pop_back();
                contender.choice.clear();
                break;
            }
            contender.choice.push_back(idx);
        }
        if (contender.choice.size() == single.size()) {
            contenders.push_back(std::move(contender));
        }
    }
    return contenders;
}

} // namespace

absl::StatusOr<LogicalPlan> optimize_by_time(const ir::Graph& graph, const PlannerOptions& options,
                                             const exprog::Topology& topology,
                                             TimePlanReport* report) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError("devices must be at least 1");
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_devices(options.devices, topology));
    EINSUMMABLE_ASSIGN_OR_RETURN(GraphCandidates candidates, planning_candidates(graph, options));
    std::vector<Contender> contenders;
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::vector<int> bytes_choice,
        choose_dp(graph, candidates, /*with_repartition=*/true, options.cancellation));
    contenders.push_back({"bytes dp", std::move(bytes_choice)});
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<Contender> baselines,
                                 baseline_contenders(graph, options, candidates));
    TimePricing pricing(graph, candidates, options, topology);
    EINSUMMABLE_RETURN_IF_ERROR(pricing.prepare());
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::vector<int> choice,
        choose_by_pricing(graph, candidates, pricing, options.cancellation));
    Contender best{"time dp", std::move(choice)};
    double best_s = pricing.predict(best.choice);
    contenders.insert(contenders.end(), std::make_move_iterator(baselines.begin()),
                      std::make_move_iterator(baselines.end()));
    for (Contender& contender : contenders) {
        const double seconds = pricing.predict(contender.choice);
        if (seconds < best_s) {
            best_s = seconds;
            best = std::move(contender);
        }
    }
    EINSUMMABLE_RETURN_IF_ERROR(support::check_cancelled(options.cancellation, "logical planning"));
    if (report != nullptr) {
        *report = {best_s, best.origin};
    }
    return make_plan(graph, options, candidates, best.choice);
}

absl::StatusOr<double> predict_plan_seconds(const ir::Graph& graph, const LogicalPlan& plan,
                                            const exprog::Topology& topology) {
    EINSUMMABLE_RETURN_IF_ERROR(check_devices(plan.options.devices, topology));
    GraphCandidates candidates(graph.nodes().size());
    std::vector<int> choice(graph.nodes().size(), 0);
    for (const OperatorPlan& op : plan.operators) {
        candidates[op.node] = {op.choice};
    }
    TimePricing pricing(graph, candidates, plan.options, topology);
    EINSUMMABLE_RETURN_IF_ERROR(pricing.prepare());
    return pricing.predict(choice);
}

} // namespace einsummable::logical
