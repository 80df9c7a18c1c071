// The dynamic programme of paper section 4.2, over trees cut from the graph at tensors with
// several consumers. See optimizer.h for the contract; tests/unit/logical/optimizer_test.cc
// checks it against exhaustive search.

#include <algorithm>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "compiler/logical/optimizer.h"
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

// What the programme minimises: bytes by the paper's cost model, then, among plans of equal
// cost, strided bytes (Candidate::strided_bytes), so ties go to outer, contiguous splits.
struct Score {
    double bytes = kInfinity;
    double strided = 0.0;

    friend bool operator<(const Score& a, const Score& b) {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.strided < b.strided);
    }
    Score plus_bytes(double extra) const { return {bytes + extra, strided}; }
};

// Best way to produce one node's output with one tiling.
struct Entry {
    Score score;
    int candidate = -1;
    // For every in-tree producer, the output tilings chosen for it.
    std::vector<std::pair<ir::NodeId, TilingKey>> producer_tilings;
};

class TreeProgramme {
public:
    TreeProgramme(const ir::Graph& graph, const GraphCandidates& candidates,
                  const std::vector<ir::NodeId>& parent, std::vector<int>& fixed,
                  bool with_repartition)
        : graph_(graph), candidates_(candidates), parent_(parent), fixed_(fixed),
          with_repartition_(with_repartition), table_(graph.nodes().size()) {}

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
    double repartition(const ir::TensorType& type, const ir::Tiling& blocks,
                       const ir::Tiling& producer) const {
        return with_repartition_ ? repartition_cost(type, blocks, producer).bytes.repartition : 0.0;
    }

    void fill(ir::NodeId node_id, bool is_root) {
        const ir::GraphNode& node = graph_.node(node_id);
        const std::vector<InputGroup> groups = input_groups(graph_, node);
        for (int cand_idx = 0; cand_idx < static_cast<int>(candidates_[node_id].size());
             ++cand_idx) {
            const Candidate& candidate = candidates_[node_id][cand_idx];
            Entry entry;
            entry.candidate = cand_idx;
            Score score{candidate.local.bytes.total(), candidate.strided_bytes};
            for (const InputGroup& group : groups) {
                // Repartition of the group's slots if the producer writes `produced`.
                auto group_repartition = [&](const TilingKey& produced) {
                    double sum = 0.0;
                    for (int slot : group.slots) {
                        const ir::GraphTensor& tensor = graph_.tensor(node.inputs[slot]);
                        sum += repartition(tensor.type, candidate.input_blocks[slot],
                                           produced[tensor.output_idx]);
                    }
                    return sum;
                };
                if (parent_[group.producer] == node_id) { // in this tree: the inner minimum
                    const std::pair<const TilingKey, Entry>* best = nullptr;
                    Score best_score;
                    for (const auto& option : table_[group.producer]) {
                        const Score total =
                            option.second.score.plus_bytes(group_repartition(option.first));
                        if (total < best_score) {
                            best_score = total;
                            best = &option;
                        }
                    }
                    score.bytes += best_score.bytes;
                    score.strided += best_score.strided;
                    entry.producer_tilings.emplace_back(group.producer, best->first);
                } else if (fixed_[group.producer] >= 0) { // another tree, already fixed
                    score.bytes += group_repartition(
                        candidates_[group.producer][fixed_[group.producer]].output_tilings);
                }
                // else: another tree not fixed yet; it charges this edge when it is optimised.
            }
            if (is_root) { // consumers in trees already fixed read this node's outputs
                for (ir::TensorId output : node.outputs) {
                    const ir::GraphTensor& tensor = graph_.tensor(output);
                    for (ir::NodeId consumer : tensor.consumers) {
                        if (fixed_[consumer] < 0) {
                            continue;
                        }
                        const Candidate& chosen = candidates_[consumer][fixed_[consumer]];
                        const ir::GraphNode& consumer_node = graph_.node(consumer);
                        for (size_t slot = 0; slot < consumer_node.inputs.size(); ++slot) {
                            if (consumer_node.inputs[slot] == output) {
                                score.bytes +=
                                    repartition(tensor.type, chosen.input_blocks[slot],
                                                candidate.output_tilings[tensor.output_idx]);
                            }
                        }
                    }
                }
            }
            entry.score = score;
            // Opt(op, T): keep the cheapest candidate per output tiling (first one on ties).
            Entry& slot = table_[node_id][candidate.output_tilings];
            if (score < slot.score) {
                slot = std::move(entry);
            }
        }
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
    bool with_repartition_;
    std::vector<std::map<TilingKey, Entry>> table_; // Opt(node, output tilings)
};

} // namespace

absl::StatusOr<std::vector<int>> choose_dp(const ir::Graph& graph,
                                           const GraphCandidates& candidates, bool with_repartition,
                                           const support::Cancellation* cancellation) {
    const int num_nodes = static_cast<int>(graph.nodes().size());
    // A node belongs to its consumer's tree when all its outputs are unsaved and read by that one
    // consumer only; otherwise it is the root of a tree of its own.
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
    TreeProgramme programme(graph, candidates, parent, fixed, with_repartition);
    for (const auto& [negative_size, tree_root] : order) {
        EINSUMMABLE_RETURN_IF_ERROR(programme.solve(trees[tree_root], cancellation));
    }
    return fixed;
}

} // namespace einsummable::logical
