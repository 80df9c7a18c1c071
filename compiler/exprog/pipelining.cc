#include "compiler/exprog/pipelining.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::exprog {

namespace {

constexpr int kMaxRingSearchGpus = 12;

// The Hamiltonian cycle of `gpus` (as positions 0..n-1 into it) whose narrowest link in
// `bandwidth` is widest; empty when none has every link above zero. Exhaustive depth-first
// search from position 0, pruned by the best bottleneck found so far.
std::vector<int> widest_cycle(const std::vector<std::vector<double>>& bandwidth) {
    const int n = static_cast<int>(bandwidth.size());
    std::vector<int> best;
    double best_bottleneck = 0.0;
    std::vector<int> path = {0};
    std::vector<bool> used(n, false);
    used[0] = true;
    auto search = [&](auto&& self, double bottleneck) -> void {
        const int last = path.back();
        if (static_cast<int>(path.size()) == n) {
            const double closing = std::min(bottleneck, bandwidth[last][0]);
            if (closing > best_bottleneck) {
                best_bottleneck = closing;
                best = path;
            }
            return;
        }
        for (int next = 1; next < n; ++next) {
            const double width = std::min(bottleneck, bandwidth[last][next]);
            if (used[next] || width <= best_bottleneck) {
                continue;
            }
            used[next] = true;
            path.push_back(next);
            self(self, width);
            path.pop_back();
            used[next] = false;
        }
    };
    if (n >= 2) {
        search(search, std::numeric_limits<double>::infinity());
    }
    return best_bottleneck > 0.0 ? best : std::vector<int>{};
}

} // namespace

std::vector<Ring> topology_rings(const Topology& topology, const std::vector<int>& gpus) {
    std::vector<Ring> rings;
    if (gpus.size() < 2) {
        return rings;
    }
    if (topology.kind() != TopologyKind::links) {
        rings.push_back({gpus, topology.link_bandwidth()});
        return rings;
    }
    const int n = static_cast<int>(gpus.size());
    if (n > kMaxRingSearchGpus) {
        return rings;
    }
    std::map<int, int> position;
    for (int i = 0; i < n; ++i) {
        position[gpus[i]] = i;
    }
    std::vector<std::vector<double>> residual(n, std::vector<double>(n, 0.0));
    for (const Link& link : topology.links()) {
        auto a = position.find(link.a);
        auto b = position.find(link.b);
        if (a != position.end() && b != position.end()) {
            residual[a->second][b->second] += link.bandwidth;
            residual[b->second][a->second] += link.bandwidth;
        }
    }
    // Peel cycles until the links left hold none; a tiny remainder (float error) ends it too.
    double first = 0.0;
    while (true) {
        const std::vector<int> cycle = widest_cycle(residual);
        if (cycle.empty()) {
            break;
        }
        double bottleneck = std::numeric_limits<double>::infinity();
        for (int i = 0; i < n; ++i) {
            bottleneck = std::min(bottleneck, residual[cycle[i]][cycle[(i + 1) % n]]);
        }
        if (first == 0.0) {
            first = bottleneck;
        } else if (bottleneck < 1e-6 * first) {
            break;
        }
        for (int i = 0; i < n; ++i) {
            residual[cycle[i]][cycle[(i + 1) % n]] -= bottleneck;
            residual[cycle[(i + 1) % n]][cycle[i]] -= bottleneck;
        }
        Ring forward;
        forward.bandwidth = bottleneck;
        for (int i : cycle) {
            forward.gpus.push_back(gpus[i]);
        }
        Ring backward = forward;
        std::reverse(backward.gpus.begin() + 1, backward.gpus.end());
        rings.push_back(std::move(forward));
        rings.push_back(std::move(backward));
    }
    return rings;
}

Program split_relays(const Program& program) {
    Program out = program;
    out.actions.clear();
    out.orders.clear();
    for (const Action& action : program.actions) {
        if (action.hops.size() <= 1) {
            Action copy = action;
            copy.label.clear();
            out.actions.push_back(std::move(copy));
            continue;
        }
        Site from = action.source;
        for (const std::vector<Site>& hop : action.hops) {
            Action single{action.aggregate, from, {hop}, action.location, action.chunk, ""};
            out.actions.push_back(std::move(single));
            from = hop.front(); // relay hops name one site
        }
    }
    return out;
}

Program chunk_actions(const Program& program, int chunks) {
    Program out = program;
    out.actions.clear();
    out.orders.clear();
    for (const Action& action : program.actions) {
        Action copy = action;
        copy.label.clear();
        if (chunks <= 1 || int64_t{action.chunk.count} * chunks > Chunk::kMaxCount) {
            out.actions.push_back(std::move(copy));
            continue;
        }
        for (int j = 0; j < chunks; ++j) {
            copy.chunk = Chunk{action.chunk.index * chunks + j, action.chunk.count * chunks};
            out.actions.push_back(copy);
        }
    }
    return out;
}

namespace {

// On a cluster: every single-hop action that sends both inside its node and to other nodes (its
// destinations GPUs, not partitions) as two actions from the same source, one to the node's
// GPUs (keeping the label) and one to the others. order_sends can then sequence the NIC's sends
// apart from the switch's: one multicast on both would make each NIC send wait for the node's
// sends before it, and the blocks forwarded on the other side would all arrive at the end.
Program split_by_node(const Program& program, const Topology& topology) {
    Program out = program;
    out.actions.clear();
    for (const Action& action : program.actions) {
        const bool gpus_only = action.hops.size() == 1 && !action.source.is_partition &&
                               std::none_of(action.hops[0].begin(), action.hops[0].end(),
                                            [](const Site& site) { return site.is_partition; });
        if (!gpus_only) {
            out.actions.push_back(action);
            continue;
        }
        const int node = topology.node_of(action.source.gpu);
        Action inside = action;
        Action across = action;
        inside.hops[0].clear();
        across.hops[0].clear();
        across.label.clear();
        for (const Site& site : action.hops[0]) {
            (topology.node_of(site.gpu) == node ? inside : across).hops[0].push_back(site);
        }
        if (inside.hops[0].empty() || across.hops[0].empty()) {
            out.actions.push_back(action);
            continue;
        }
        out.actions.push_back(std::move(inside));
        out.actions.push_back(std::move(across));
    }
    return out;
}

} // namespace

Program order_sends(const Program& original, const Membership& membership,
                    const Topology& topology) {
    const Program program =
        topology.kind() == TopologyKind::cluster ? split_by_node(original, topology) : original;
    Program out = program;
    out.orders.clear();
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    const ClosureRun run = run_closure(program, instances, /*honour_order=*/false);
    std::map<int, int> position; // GPU -> index in GPUS
    for (size_t i = 0; i < program.gpus.size(); ++i) {
        position[program.gpus[i]] = static_cast<int>(i);
    }
    const int p = std::max<int>(1, static_cast<int>(program.gpus.size()));

    // One key per action, from its first first-hop instance that sends: (round, rotation,
    // chunk start, action). Keys are distinct, and every ORDER pair goes from a smaller key to
    // a larger one while every data dependency goes to a later round: no cycle.
    using Key = std::tuple<int, int, double, double, int>;
    // On a cluster: the nodes where each OUT wants its aggregate, so that a send whose data
    // must still cross to another node (a partial sum gathered at the rail GPU before its NIC
    // crossing) goes before one whose data stays: the NIC then starts early and its sends
    // overlap the node's remaining ones.
    std::vector<std::pair<Aggregate, std::set<int>>> wanted;
    if (topology.kind() == TopologyKind::cluster) {
        for (const OutDecl& decl : program.outs) {
            std::set<int> nodes;
            for (const Site& site : decl.sites) {
                for (int gpu : site_gpus(program, site, membership)) {
                    nodes.insert(topology.node_of(gpu));
                }
            }
            wanted.emplace_back(decl.aggregate, std::move(nodes));
        }
    }
    // 0 when some OUT containing `aggregate` wants it in a node other than `node`; 1 otherwise.
    auto stays = [&](const Aggregate& aggregate, int node) {
        for (const auto& [out, nodes] : wanted) {
            if (std::includes(out.begin(), out.end(), aggregate.begin(), aggregate.end()) &&
                std::any_of(nodes.begin(), nodes.end(), [&](int n) { return n != node; })) {
                return 0;
            }
        }
        return 1;
    };
    std::vector<std::optional<Key>> keys(program.actions.size());
    // Ports: (source, destination) on links; (source, -1), the egress, on a switch; on a
    // cluster (source, -1) inside the node and (source, -2), the NIC, to other nodes.
    std::map<std::pair<int, int>, std::vector<std::pair<Key, int>>> ports;
    const bool links = topology.kind() == TopologyKind::links;
    const bool cluster = topology.kind() == TopologyKind::cluster;
    for (size_t i = 0; i < instances.size(); ++i) {
        const ActionInstance& instance = instances[i];
        if (instance.hop != 0) {
            continue;
        }
        std::vector<int> destinations;
        for (int destination : instance.destinations) {
            if (destination != instance.source) {
                destinations.push_back(destination);
            }
        }
        if (destinations.empty()) {
            continue;
        }
        std::optional<Key>& key = keys[instance.action_idx];
        if (!key) {
            const int rotation =
                ((position[destinations.front()] - position[instance.source]) % p + p) % p;
            const double fraction =
                static_cast<double>(instance.chunk.index) / instance.chunk.count;
            // On a cluster, chunk before rotation: every group's first chunks go first, so the
            // partial sums that cross between nodes leave while the later chunks still arrive.
            key = cluster ? Key{run.firings[i].round,
                                stays(instance.aggregate, topology.node_of(destinations.front())),
                                fraction, rotation, instance.action_idx}
                          : Key{run.firings[i].round, 0, rotation, fraction, instance.action_idx};
        }
        if (links) {
            for (int destination : destinations) {
                ports[{instance.source, destination}].emplace_back(Key{}, instance.action_idx);
            }
        } else if (cluster) {
            // Two ports: the switch inside the node (-1) and the NIC to other nodes (-2), which
            // share nothing, so a NIC send does not wait behind the node's sends.
            std::set<int> used;
            for (int destination : destinations) {
                used.insert(
                    topology.node_of(destination) == topology.node_of(instance.source) ? -1 : -2);
            }
            for (int port : used) {
                ports[{instance.source, port}].emplace_back(Key{}, instance.action_idx);
            }
        } else {
            ports[{instance.source, -1}].emplace_back(Key{}, instance.action_idx);
        }
    }
    std::set<std::string> taken;
    for (const Action& action : out.actions) {
        if (!action.label.empty()) {
            taken.insert(action.label);
        }
    }
    int next_label = 0;
    auto label_of = [&](int action_idx) -> const std::string& {
        std::string& label = out.actions[action_idx].label;
        while (label.empty()) {
            std::string candidate = absl::StrCat("a", next_label++);
            if (taken.insert(candidate).second) {
                label = std::move(candidate);
            }
        }
        return label;
    };
    for (size_t action_idx = 0; action_idx < keys.size(); ++action_idx) {
        if (keys[action_idx]) {
            label_of(static_cast<int>(action_idx)); // labels follow the action order
        }
    }
    for (auto& [port, sends] : ports) {
        for (auto& [key, action_idx] : sends) {
            key = *keys[action_idx];
        }
        std::sort(sends.begin(), sends.end());
        sends.erase(std::unique(sends.begin(), sends.end()), sends.end());
        for (size_t k = 1; k < sends.size(); ++k) {
            const std::string& before = label_of(sends[k - 1].second);
            const std::string& after = label_of(sends[k].second);
            out.orders.push_back(OrderDecl{before, after, {}, {}});
        }
    }
    return out;
}

} // namespace einsummable::exprog
