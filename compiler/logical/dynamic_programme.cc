// The dynamic programme of paper section 4.2, over trees cut from the graph at tensors with
// several consumers. See optimizer.h for the contract; tests/unit/logical/optimizer_test.cc
// checks it against exhaustive search.

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
#include "compiler/logical/programme.h"
#include "compiler/support/status_macros.h"

namespace einsummable::logical {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

// A node's input slots grouped by the node that produces them (a node's several outputs, or one
// tensor read twice, all fall in one group); slots reading graph inputs are left out: graph
// inputs are materialised straight into the blocks needed and cost nothing.
struct InputGroup {
    ir::NodeId producer;
    std::vector<int> slots;
};

std::vector<InputGroup> input_groups(const ir::Graph& graph, const ir::GraphNode& node) {
    std::vector<InputGroup> groups;
    for (int slot = 0; slot < static_cast<int>(node.inputs.size()); ++slot) {
        const ir::GraphTensor& tensor = graph.tensor(node.inputs[slot]);
        if (tensor.is_input()) {
            continue;
        }
        auto it = std::find_if(groups.begin(), groups.end(), [&](const InputGroup& group) {
            return group.producer == tensor.producer;
        });
        if (it == groups.end()) {
            groups.push_back({tensor.producer, {slot}});
        } else {
            it->slots.push_back(slot);
        }
    }
    return groups;
}

// A node's output tilings, one per output: Opt is keyed by their tuple.
using TilingKey = std::vector<ir::Tiling>;

// What the programme minimises: the pricing's sum, then, among plans of equal price, strided
// bytes (Candidate::strided_bytes), so ties go to outer, contiguous splits.
struct Score {
    double price = kInfinity;
    double strided = 0.0;

    friend bool operator<(const Score& a, const Score& b) {
        return a.price < b.price || (a.price == b.price && a.strided < b.strided);
    }
    Score plus(double extra) const { return {price + extra, strided}; }
};

// The paper's cost in bytes: local costs, and the repartition of an input whose producer's
// tiling differs from the blocks read (none for greedy).
class BytesPricing final : public ProgrammePricing {
public:
    BytesPricing(const ir::Graph& graph, const GraphCandidates& candidates, bool with_repartition)
        : graph_(graph), candidates_(candidates), with_repartition_(with_repartition) {}

    double local(ir::NodeId node, int candidate) const override {
        return candidates_[node][candidate].local.bytes.total();
    }
    EdgePrice edge(ir::NodeId producer, int producer_candidate, ir::NodeId consumer,
                   int consumer_candidate, int slot) const override {
        if (!with_repartition_) {
            return {};
        }
        const ir::GraphTensor& tensor = graph_.tensor(graph_.node(consumer).inputs[slot]);
        return {0.0,
                repartition_cost(
                    tensor.type, candidates_[consumer][consumer_candidate].input_blocks[slot],
                    candidates_[producer][producer_candidate].output_tilings[tensor.output_idx])
                    .bytes.repartition};
    }

private:
    const ir::Graph& graph_;
    const GraphCandidates& candidates_;
    bool with_repartition_;
};

// Best way to produce one node's output with one tiling.
struct Entry {
    Score score;
    int candidate = -1;
    // For every in-tree producer, the output tilings chosen for it.
    std::vector<std::pair<ir::NodeId, TilingKey>> producer_tilings;
    // Whether the candidate receives an input by transfers (an edge that waits): the buffers
    // that assemble it die when it runs (Branch::frees).
    bool assembles = false;
};

class TreeProgramme {
public:
    TreeProgramme(const ir::Graph& graph, const GraphCandidates& candidates,
                  const std::vector<ir::NodeId>& parent, std::vector<int>& fixed,
                  const ProgrammePricing& pricing)
        : graph_(graph), candidates_(candidates), parent_(parent), fixed_(fixed), pricing_(pricing),
          table_(graph.nodes().size()) {}

    // Optimises the tree whose nodes are `nodes` (ascending ids, root last) and fixes them;
    // Cancelled, fixing nothing, once `cancellation` is set (polled per node).
    absl::Status solve(const std::vector<ir::NodeId>& nodes,
                       const support::Cancellation* cancellation) {
        for (ir::NodeId node : nodes) {
            if (support::is_cancelled(cancellation)) {
                return support::cancelled_error(absl::StrCat("the logical programme at operator '",
                                                             graph_.node(node).name, "'"));
            }
            fill(node, node == nodes.back());
        }
        const std::map<TilingKey, Entry>& root = table_[nodes.back()];
        auto best = std::min_element(root.begin(), root.end(), [](const auto& a, const auto& b) {
            return a.second.score < b.second.score;
        });
        trace(nodes.back(), best->first);
        return absl::OkStatus();
    }

private:
    void fill(ir::NodeId node_id, bool is_root) {
        const ir::GraphNode& node = graph_.node(node_id);
        const std::vector<InputGroup> groups = input_groups(graph_, node);
        for (int cand_idx = 0; cand_idx < static_cast<int>(candidates_[node_id].size());
             ++cand_idx) {
            const Candidate& candidate = candidates_[node_id][cand_idx];
            Entry entry;
            entry.candidate = cand_idx;
            Score score{pricing_.local(node_id, cand_idx), candidate.strided_bytes};
            std::vector<Branch> branches;
            for (const InputGroup& group : groups) {
                // The price of the group's slots if the producer takes `produced`.
                auto group_price = [&](int produced) {
                    EdgePrice sum;
                    for (int slot : group.slots) {
                        const EdgePrice price =
                            pricing_.edge(group.producer, produced, node_id, cand_idx, slot);
                        sum.work += price.work;
                        sum.wait += price.wait;
                    }
                    return sum;
                };
                if (parent_[group.producer] == node_id) { // in this tree: the inner minimum
                    const std::pair<const TilingKey, Entry>* best = nullptr;
                    Score best_score;
                    EdgePrice best_edge;
                    for (const auto& option : table_[group.producer]) {
                        const EdgePrice edge = group_price(option.second.candidate);
                        const Score total = option.second.score.plus(edge.total());
                        if (total < best_score) {
                            best_score = total;
                            best = &option;
                            best_edge = edge;
                        }
                    }
                    branches.push_back({group.producer, best->second.score.price + best_edge.work,
                                        best_edge.wait, best->second.assembles});
                    if (!pricing_.overlaps_branches()) {
                        score.price += best_score.price;
                    }
                    score.strided += best_score.strided;
                    entry.producer_tilings.emplace_back(group.producer, best->first);
                } else if (fixed_[group.producer] >= 0) { // another tree, already fixed
                    const EdgePrice edge = group_price(fixed_[group.producer]);
                    branches.push_back({group.producer, edge.work, edge.wait});
                    if (!pricing_.overlaps_branches()) {
                        score.price += edge.total();
                    }
                }
                // else: another tree not fixed yet; it charges this edge when it is optimised.
            }
            if (pricing_.overlaps_branches()) {
                score.price += compose_branches(branches);
            }
            if (is_root) { // consumers in trees already fixed read this node's outputs
                score.price += fixed_consumers_price(node_id, cand_idx);
            }
            entry.score = score;
            entry.assembles = assembles(branches);
            // Opt(op, T): keep the cheapest candidate per output tiling (first one on ties).
            Entry& slot = table_[node_id][candidate.output_tilings];
            if (score < slot.score) {
                slot = std::move(entry);
            }
        }
    }

    // The edges from a tree's root (with candidate `cand_idx`) to consumers already fixed.
    double fixed_consumers_price(ir::NodeId node_id, int cand_idx) const {
        double sum = 0.0;
        for (ir::TensorId output : graph_.node(node_id).outputs) {
            for (ir::NodeId consumer : graph_.tensor(output).consumers) {
                if (fixed_[consumer] < 0) {
                    continue;
                }
                const ir::GraphNode& consumer_node = graph_.node(consumer);
                for (size_t slot = 0; slot < consumer_node.inputs.size(); ++slot) {
                    if (consumer_node.inputs[slot] == output) {
                        sum += pricing_
                                   .edge(node_id, cand_idx, consumer, fixed_[consumer],
                                         static_cast<int>(slot))
                                   .total();
                    }
                }
            }
        }
        return sum;
    }

    void trace(ir::NodeId node, const TilingKey& tiling) {
        const Entry& entry = table_[node].at(tiling);
        fixed_[node] = entry.candidate;
        for (const auto& [producer, producer_tiling] : entry.producer_tilings) {
            trace(producer, producer_tiling);
        }
    }

    const ir::Graph& graph_;
    const GraphCandidates& candidates_;
    const std::vector<ir::NodeId>& parent_;
    std::vector<int>& fixed_;
    const ProgrammePricing& pricing_;
    std::vector<std::map<TilingKey, Entry>> table_; // Opt(node, output tilings)
};

} // namespace

std::vector<ir::NodeId> tree_parents(const ir::Graph& graph) {
    const int num_nodes = static_cast<int>(graph.nodes().size());
    std::vector<ir::NodeId> parent(num_nodes, -1);
    for (ir::NodeId node = 0; node < num_nodes; ++node) {
        // Several outputs to one consumer stay in its tree, keyed by the tuple of tilings.
        ir::NodeId consumer = -1;
        bool single = true;
        for (ir::TensorId output : graph.node(node).outputs) {
            const ir::GraphTensor& tensor = graph.tensor(output);
            if (tensor.saved || tensor.consumers.size() != 1 ||
                (consumer >= 0 && tensor.consumers[0] != consumer)) {
                single = false;
                break;
            }
            consumer = tensor.consumers[0];
        }
        if (single && consumer >= 0) {
            parent[node] = consumer;
        }
    }
    return parent;
}

double compose_branches(std::vector<Branch>& branches) {
    // Producers outside the tree first (they are done before the tree starts), then producer
    // order, which is the order the devices run the branches in (node order).
    std::stable_sort(branches.begin(), branches.end(),
                     [](const Branch& a, const Branch& b) { return a.producer < b.producer; });
    std::vector<double> done(branches.size());
    double sum = 0.0;
    int last_freeing = -1;
    for (size_t i = 0; i < branches.size(); ++i) {
        sum += branches[i].work;
        done[i] = sum;
        if (branches[i].frees) {
            last_freeing = static_cast<int>(i);
        }
    }
    double ready = 0.0;
    for (size_t i = 0; i < branches.size(); ++i) {
        const size_t start = static_cast<int>(i) < last_freeing ? last_freeing : i;
        ready = std::max(ready, done[start] + branches[i].wait);
    }
    return ready;
}

bool assembles(const std::vector<Branch>& branches) {
    return std::any_of(branches.begin(), branches.end(),
                       [](const Branch& branch) { return branch.wait > 0.0; });
}

absl::StatusOr<std::vector<int>> choose_dp(const ir::Graph& graph,
                                           const GraphCandidates& candidates, bool with_repartition,
                                           const support::Cancellation* cancellation) {
    return choose_by_pricing(graph, candidates, BytesPricing(graph, candidates, with_repartition),
                             cancellation);
}

absl::StatusOr<std::vector<int>> choose_by_pricing(const ir::Graph& graph,
                                                   const GraphCandidates& candidates,
                                                   const ProgrammePricing& pricing,
                                                   const support::Cancellation* cancellation) {
    const int num_nodes = static_cast<int>(graph.nodes().size());
    const std::vector<ir::NodeId> parent = tree_parents(graph);
    std::vector<ir::NodeId> root(num_nodes);
    for (ir::NodeId node = num_nodes - 1; node >= 0; --node) { // consumers come later
        root[node] = parent[node] < 0 ? node : root[parent[node]];
    }
    std::map<ir::NodeId, std::vector<ir::NodeId>> trees;
    for (ir::NodeId node = 0; node < num_nodes; ++node) {
        trees[root[node]].push_back(node);
    }
    // Largest first: the bytes every operator of the tree reads and writes, whole.
    std::vector<std::pair<double, ir::NodeId>> order;
    for (const auto& [tree_root, nodes] : trees) {
        double size = 0.0;
        for (ir::NodeId node : nodes) {
            for (const ir::TensorType& type : graph.node(node).op->input_types()) {
                size += static_cast<double>(type.bytes());
            }
            for (const ir::TensorType& type : graph.node(node).op->output_types()) {
                size += static_cast<double>(type.bytes());
            }
        }
        order.emplace_back(-size, tree_root);
    }
    std::sort(order.begin(), order.end());

    std::vector<int> fixed(num_nodes, -1);
    TreeProgramme programme(graph, candidates, parent, fixed, pricing);
    for (const auto& [negative_size, tree_root] : order) {
        EINSUMMABLE_RETURN_IF_ERROR(programme.solve(trees[tree_root], cancellation));
    }
    return fixed;
}

} // namespace einsummable::logical
