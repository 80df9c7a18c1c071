#include "compiler/physical/rank_split.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

class Splitter {
public:
    Splitter(const ExecGraph& graph, int devices_per_rank)
        : graph_(graph), points_(graph.nodes.size()) {
        split_.devices_per_rank = devices_per_rank;
        const int ranks = (graph.devices + devices_per_rank - 1) / devices_per_rank;
        split_.parts.resize(ranks);
        for (int r = 0; r < ranks; ++r) {
            ExecGraph& part = split_.parts[r];
            part.devices = std::min(devices_per_rank, graph.devices - r * devices_per_rank);
            part.batch_invariant = graph.batch_invariant;
            const int first = r * devices_per_rank;
            if (!graph.arena_bytes.empty()) {
                part.arena_bytes.assign(graph.arena_bytes.begin() + first,
                                        graph.arena_bytes.begin() + first + part.devices);
            }
            if (!graph.resident_bytes.empty()) {
                part.resident_bytes.assign(graph.resident_bytes.begin() + first,
                                           graph.resident_bytes.begin() + first + part.devices);
            }
        }
        split_.crossing_bytes.assign(graph.devices, std::vector<int64_t>(graph.devices, 0));
    }

    RankSplit run() {
        place_buffers();
        for (int n = 0; n < static_cast<int>(graph_.nodes.size()); ++n) {
            const ExecNode& node = graph_.nodes[n];
            if (node.kind == NodeKind::copy &&
                rank_of(source_device(node)) != rank_of(node.device)) {
                split_crossing_copy(n);
            } else {
                split_local_node(n);
            }
        }
        return std::move(split_);
    }

private:
    int rank_of(int device) const { return split_.rank_of_device(device); }
    int local_device(int device) const { return device % split_.devices_per_rank; }
    int source_device(const ExecNode& node) const { return graph_.buffers[node.inputs[0]].device; }
    BufferId local_buffer(BufferId id) const { return split_.buffer_homes[id].buffer; }

    void place_buffers() {
        split_.buffer_homes.resize(graph_.buffers.size());
        for (BufferId id = 0; id < static_cast<BufferId>(graph_.buffers.size()); ++id) {
            const Buffer& buffer = graph_.buffers[id];
            const int rank = rank_of(buffer.device);
            ExecGraph& part = split_.parts[rank];
            split_.buffer_homes[id] = {rank, static_cast<BufferId>(part.buffers.size())};
            part.buffers.push_back(buffer);
            part.buffers.back().device = local_device(buffer.device);
        }
        // Parents are on their views' devices, so on the same rank (check_exec_graph).
        for (BufferId id = 0; id < static_cast<BufferId>(graph_.buffers.size()); ++id) {
            if (graph_.buffers[id].is_view()) {
                const RankSplit::Home home = split_.buffer_homes[id];
                split_.parts[home.rank].buffers[home.buffer].parent =
                    local_buffer(graph_.buffers[id].parent);
            }
        }
        auto localise = [&](const std::map<std::string, std::vector<BufferId>>& blocks,
                            auto member) {
            for (const auto& [name, ids] : blocks) {
                for (BufferId id : ids) {
                    const RankSplit::Home home = split_.buffer_homes[id];
                    (split_.parts[home.rank].*member)[name].push_back(home.buffer);
                }
            }
        };
        localise(graph_.input_blocks, &ExecGraph::input_blocks);
        localise(graph_.outputs, &ExecGraph::outputs);
    }

    // Appends `node` to rank `rank`'s part; returns its index there.
    int add(int rank, ExecNode node) {
        std::vector<ExecNode>& nodes = split_.parts[rank].nodes;
        std::sort(node.deps.begin(), node.deps.end());
        node.deps.erase(std::unique(node.deps.begin(), node.deps.end()), node.deps.end());
        nodes.push_back(std::move(node));
        return static_cast<int>(nodes.size()) - 1;
    }

    static ExecNode message(NodeKind kind, int device, int peer, int peer_device, int tag) {
        ExecNode node;
        node.kind = kind;
        node.device = device;
        node.peer = peer;
        node.peer_device = peer_device;
        node.tag = tag;
        return node;
    }

    // The node of rank `rank`'s part after which node `u` of the whole graph counts as done
    // there: its own node or, for a crossing copy, its half on that rank; a token's recv from
    // the rank that ran it otherwise. `device` is the local device a new token's recv runs on.
    int resolve(int u, int rank, int device) {
        const auto point = points_[u].find(rank);
        if (point != points_[u].end()) {
            return point->second;
        }
        const auto token = tokens_.find({u, rank});
        if (token != tokens_.end()) {
            return token->second;
        }
        const int owner = rank_of(graph_.nodes[u].device);
        const int after = points_[u].at(owner);
        const int tag = split_.messages++;
        const int send_device = split_.parts[owner].nodes[after].device;
        ExecNode send = message(NodeKind::send, send_device, rank, device, tag);
        send.deps = {after};
        add(owner, std::move(send));
        const int recv = add(rank, message(NodeKind::recv, device, owner, send_device, tag));
        tokens_[{u, rank}] = recv;
        return recv;
    }

    void split_local_node(int n) {
        const ExecNode& node = graph_.nodes[n];
        const int rank = rank_of(node.device);
        ExecNode local = node;
        local.device = local_device(node.device);
        for (BufferId& id : local.inputs) {
            id = local_buffer(id);
        }
        for (BufferId& id : local.outputs) {
            id = local_buffer(id);
        }
        local.deps.clear();
        for (int u : node.deps) {
            local.deps.push_back(resolve(u, rank, local.device));
        }
        points_[n][rank] = add(rank, std::move(local));
    }

    void split_crossing_copy(int n) {
        const ExecNode& node = graph_.nodes[n];
        const int src_device = source_device(node);
        const int from = rank_of(src_device);
        const int to = rank_of(node.device);
        ExecNode send =
            message(NodeKind::send, local_device(src_device), to, local_device(node.device), -1);
        send.inputs = {local_buffer(node.inputs[0])};
        ExecNode recv =
            message(NodeKind::recv, local_device(node.device), from, local_device(src_device), -1);
        recv.outputs = {local_buffer(node.outputs[0])};
        for (int u : node.deps) {
            if (points_[u].count(from) > 0) {
                send.deps.push_back(points_[u].at(from));
            }
            if (points_[u].count(to) > 0) {
                recv.deps.push_back(points_[u].at(to));
            } else if (points_[u].count(from) == 0) {
                // Known on neither end: a token brings it to the source, and the data, sent
                // after it, brings it on.
                send.deps.push_back(resolve(u, from, send.device));
            }
        }
        // Tagged after the tokens it waits for: a message's tag is above those of every message
        // it depends on.
        send.tag = recv.tag = split_.messages++;
        points_[n][from] = add(from, std::move(send));
        points_[n][to] = add(to, std::move(recv));
        split_.crossing_bytes[src_device][node.device] += graph_.buffers[node.outputs[0]].bytes();
    }

    const ExecGraph& graph_;
    RankSplit split_;
    // Per node of the whole graph: rank -> its node in that rank's part that completes it there.
    std::vector<std::map<int, int>> points_;
    // (node, rank) -> the recv of the token that brought the node's completion to the rank.
    std::map<std::pair<int, int>, int> tokens_;
};

} // namespace

absl::StatusOr<RankSplit> split_by_rank(const ExecGraph& graph, int devices_per_rank) {
    if (devices_per_rank < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices per rank must be at least 1 (got ", devices_per_rank, ")"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_exec_graph(graph, graph.devices));
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
        const NodeKind kind = graph.nodes[n].kind;
        if (kind == NodeKind::send || kind == NodeKind::recv) {
            return absl::InvalidArgumentError(absl::StrCat(
                node_label(graph, n), ": the graph is already a rank's part of a split"));
        }
    }
    return Splitter(graph, devices_per_rank).run();
}

} // namespace einsummable::physical
