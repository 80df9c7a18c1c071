#include "compiler/exprog/synthesis.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "absl/strings/str_cat.h"
#include "compiler/exprog/pipelining.h"
#include "compiler/exprog/program_simulation.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {

absl::string_view synthesis_mode_name(SynthesisMode mode) {
    return mode == SynthesisMode::naive ? "naive" : "optimized";
}

absl::StatusOr<SynthesisMode> parse_synthesis_mode(absl::string_view name) {
    if (name == "naive") {
        return SynthesisMode::naive;
    }
    if (name == "optimized" || name == "ai") {
        return SynthesisMode::optimized;
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown synthesis mode '", name, "' (expected naive, optimized or its alias ai)"));
}

namespace {

// One aggregate and the GPUs that need it (OUT requirements grouped by aggregate).
struct Group {
    Aggregate aggregate;
    std::vector<int> destinations; // sorted
};

// How one group is served. Either `direct` (every destination gathers the atoms it lacks and
// aggregates them itself: the naive shape), or through a root: atoms go up a reduction tree
// whose nodes aggregate what reaches them (aggregation pushdown), the root forms the whole
// aggregate, and it goes down a broadcast tree to the destinations (a node with several
// children multicasts; a node that is not a destination is a relay).
struct GroupPlan {
    bool direct = true;
    // A node that several children report to adds their partial sums one at a time, in the
    // order they are sent to it once sends are ordered (order_sends: by rotation), so each
    // arrival is a 2-part sum overlapping the next transfer instead of one many-part sum at the
    // end (the ordered progressive star).
    bool progressive = false;
    int root = 0;
    std::map<std::string, int> source;   // atom -> the GPU of the copy that is sent
    std::map<int, int> reduce_parent;    // node -> parent, towards the root
    std::map<int, int> broadcast_parent; // node -> parent, away from the root
};

// Atom copies: atom -> GPUs that hold it (declaration order).
using Copies = std::map<std::string, std::vector<int>>;

struct Search {
    const Program& preamble;
    const Topology& topology;
    const SynthesisOptions& options;
    Copies copies;
    std::vector<std::string> sized; // names of the size-declared partitions
    double bound = 0.0;             // exchange_lower_bound: no candidate can beat it
    int budget = 0;                 // candidates after the starting points (search_budget)
};

std::vector<Group> groups_for(const Program& preamble, const Membership& membership) {
    std::map<Aggregate, std::set<int>> needed;
    for (const OutDecl& out : preamble.outs) {
        for (const Site& site : out.sites) {
            for (int gpu : site_gpus(preamble, site, membership)) {
                needed[out.aggregate].insert(gpu);
            }
        }
    }
    std::vector<Group> groups;
    for (const auto& [aggregate, gpus] : needed) {
        groups.push_back({aggregate, std::vector<int>(gpus.begin(), gpus.end())});
    }
    return groups;
}

Membership identity_membership(const Program& preamble) {
    Membership membership;
    size_t next = 0;
    for (const Partition& partition : preamble.partitions) {
        if (!partition.size) {
            continue;
        }
        std::vector<int>& members = membership[partition.name];
        for (int k = 0; k < *partition.size; ++k) {
            members.push_back(preamble.gpus[next++ % preamble.gpus.size()]);
        }
        std::sort(members.begin(), members.end());
    }
    return membership;
}

bool holds(const Copies& copies, const std::string& atom, int gpu) {
    const std::vector<int>& at = copies.at(atom);
    return std::find(at.begin(), at.end(), gpu) != at.end();
}

GroupPlan naive_plan(const Search& search, const Group& group) {
    GroupPlan plan;
    for (const std::string& atom : group.aggregate) {
        plan.source[atom] = search.copies.at(atom).front();
    }
    plan.root = group.destinations.front();
    return plan;
}

// A tree plan rooted at `root`: star reduction into the root from the chosen copies, star
// broadcast from the root.
GroupPlan star_plan(const GroupPlan& base, const Group& group, int root) {
    GroupPlan plan = base;
    plan.direct = false;
    plan.root = root;
    plan.reduce_parent.clear();
    plan.broadcast_parent.clear();
    for (const auto& [atom, gpu] : plan.source) {
        if (gpu != root) {
            plan.reduce_parent[gpu] = root;
        }
    }
    for (int destination : group.destinations) {
        if (destination != root) {
            plan.broadcast_parent[destination] = root;
        }
    }
    return plan;
}

// On a machine of point-to-point links: for every GPU reachable from `root` over NVLink, its
// parent on a fewest-hops path (wider links first on ties), so trees along it never touch the
// shared bridge. Empty on a switch, where the star is already best.
std::map<int, int> link_tree(const Topology& topology, int root) {
    std::map<int, int> parent;
    if (topology.kind() != TopologyKind::links) {
        return parent;
    }
    std::vector<Link> links = topology.links();
    std::stable_sort(links.begin(), links.end(),
                     [](const Link& a, const Link& b) { return a.bandwidth > b.bandwidth; });
    std::vector<int> frontier = {root};
    std::set<int> seen = {root};
    while (!frontier.empty()) {
        std::vector<int> next;
        for (int node : frontier) {
            for (const Link& link : links) {
                const int other = link.a == node ? link.b : link.b == node ? link.a : -1;
                if (other >= 0 && seen.insert(other).second) {
                    parent[other] = node;
                    next.push_back(other);
                }
            }
        }
        frontier = std::move(next);
    }
    return parent;
}

// On a cluster: the tree that crosses between nodes once per node, on the root's rail — every
// GPU of the root's node hangs off the root; in another node, the GPU with the root's index in
// its node (its rail) hangs off the root and the node's other GPUs off it. So a reduction sums
// inside each node before its one NIC crossing, and a broadcast crosses once per node and fans
// out over the node's switch. Empty elsewhere.
std::map<int, int> rail_tree(const Topology& topology, int root) {
    std::map<int, int> parent;
    if (topology.kind() != TopologyKind::cluster) {
        return parent;
    }
    const int per_node = topology.gpus_per_node();
    const int lane = root % per_node;
    for (int gpu = 0; gpu < topology.num_gpus(); ++gpu) {
        if (gpu == root) {
            continue;
        }
        const int rail = topology.node_of(gpu) * per_node + lane;
        parent[gpu] = topology.node_of(gpu) == topology.node_of(root) || gpu == rail ? root : rail;
    }
    return parent;
}

// A tree plan rooted at `root` whose reduction and broadcast follow `tree` (parent links
// towards the root, as link_tree gives); GPUs the tree does not reach hang off the root.
GroupPlan tree_plan(const GroupPlan& base, const Group& group, int root,
                    const std::map<int, int>& tree) {
    GroupPlan plan = star_plan(base, group, root);
    auto path_into = [&](std::map<int, int>& parent, int node) {
        // Links node and every GPU above it on the tree, up to the root.
        while (node != root) {
            auto it = tree.find(node);
            const int up = it == tree.end() ? root : it->second;
            parent[node] = up;
            node = up;
        }
    };
    plan.reduce_parent.clear();
    for (const auto& [atom, gpu] : plan.source) {
        path_into(plan.reduce_parent, gpu);
    }
    plan.broadcast_parent.clear();
    for (int destination : group.destinations) {
        path_into(plan.broadcast_parent, destination);
    }
    return plan;
}

// Every group's plan along its rail tree (tree_plan of rail_tree at the group's root).
std::vector<GroupPlan> rail_plans(const Search& search, const std::vector<Group>& groups,
                                  const std::vector<GroupPlan>& plans,
                                  const std::vector<int>& roots) {
    std::vector<GroupPlan> railed;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        railed.push_back(
            tree_plan(plans[idx], groups[idx], roots[idx], rail_tree(search.topology, roots[idx])));
    }
    return railed;
}

// Link trees for all groups at once, balancing the links: groups in order, counting the time
// (bytes / bandwidth) earlier groups put on each link in each direction. `by_layers`: each GPU
// at hop distance d from the root takes the neighbour at distance d-1 whose link would carry
// the least; otherwise (Prim-style) the tree grows by the least-loaded link from any GPU
// already in it, which may route around a busy link through more hops. Reductions use the tree
// upwards; loads are charged downwards (the broadcast direction), which is what the gathers and
// broadcasts of collectives stress.
std::vector<std::map<int, int>> balanced_link_trees(const Search& search,
                                                    const std::vector<Group>& groups,
                                                    const std::vector<int>& roots, bool by_layers) {
    const Topology& topology = search.topology;
    const int n = topology.num_gpus();
    std::vector<std::vector<double>> bandwidth(n, std::vector<double>(n, 0.0));
    for (const Link& link : topology.links()) {
        bandwidth[link.a][link.b] = bandwidth[link.b][link.a] = link.bandwidth;
    }
    std::vector<std::vector<double>> load(n, std::vector<double>(n, 0.0)); // seconds, u -> v
    std::vector<std::map<int, int>> trees;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        const double bytes = aggregate_bytes(search.preamble, groups[idx].aggregate);
        std::map<int, int> parent;
        if (by_layers) {
            std::vector<int> distance(n, -1);
            distance[roots[idx]] = 0;
            std::vector<int> order = {roots[idx]};
            for (size_t head = 0; head < order.size(); ++head) {
                for (int next = 0; next < n; ++next) {
                    if (bandwidth[order[head]][next] > 0.0 && distance[next] < 0) {
                        distance[next] = distance[order[head]] + 1;
                        order.push_back(next);
                    }
                }
            }
            for (size_t pos = 1; pos < order.size(); ++pos) {
                const int node = order[pos];
                int best = -1;
                double best_load = 0.0;
                for (int up = 0; up < n; ++up) {
                    if (bandwidth[up][node] > 0.0 && distance[up] == distance[node] - 1) {
                        const double after = load[up][node] + bytes / bandwidth[up][node];
                        if (best < 0 || after < best_load) {
                            best = up;
                            best_load = after;
                        }
                    }
                }
                parent[node] = best;
                load[best][node] = best_load;
            }
        } else {
            // Prim-style: repeatedly attach the GPU whose cheapest link from the tree so far would
            // be least loaded after carrying this group (ties: the shallower parent).
            std::vector<int> depth(n, -1);
            depth[roots[idx]] = 0;
            for (int attached = 1; attached < n; ++attached) {
                int best_up = -1;
                int best_node = -1;
                double best_load = 0.0;
                for (int up = 0; up < n; ++up) {
                    if (depth[up] < 0) {
                        continue;
                    }
                    for (int node = 0; node < n; ++node) {
                        if (depth[node] >= 0 || bandwidth[up][node] <= 0.0) {
                            continue;
                        }
                        const double after = load[up][node] + bytes / bandwidth[up][node];
                        if (best_up < 0 || after < best_load ||
                            (after == best_load && depth[up] < depth[best_up])) {
                            best_up = up;
                            best_node = node;
                            best_load = after;
                        }
                    }
                }
                if (best_up < 0) {
                    break; // the rest is unreachable over links
                }
                parent[best_node] = best_up;
                depth[best_node] = depth[best_up] + 1;
                load[best_up][best_node] = best_load;
            }
        }
        trees.push_back(std::move(parent));
    }
    return trees;
}

// Whole-program starting points the one-group-at-a-time search cannot reach when every group
// keeps the links busy: all groups through a root at once (reduce-scatter then all-gather
// when the groups are a chunked all-reduce), the roots spread round-robin over the GPUs; and,
// on link machines, the same along fewest-hops link trees and along trees that balance the
// links across groups; on clusters, along rail trees (rail_tree). A group of one atom is rooted
// at its copy.
std::vector<std::vector<GroupPlan>> joint_plans(const Search& search,
                                                const std::vector<Group>& groups,
                                                const std::vector<GroupPlan>& base) {
    std::vector<int> roots;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        const Group& group = groups[idx];
        roots.push_back(group.aggregate.size() == 1
                            ? base[idx].source.begin()->second
                            : group.destinations[idx % group.destinations.size()]);
    }
    std::vector<std::vector<GroupPlan>> out(1);
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        out[0].push_back(star_plan(base[idx], groups[idx], roots[idx]));
    }
    if (search.topology.kind() == TopologyKind::links) {
        std::vector<GroupPlan> fewest_hops;
        std::vector<GroupPlan> balanced;
        std::vector<GroupPlan> rerouted;
        const std::vector<std::map<int, int>> layered =
            balanced_link_trees(search, groups, roots, /*by_layers=*/true);
        const std::vector<std::map<int, int>> grown =
            balanced_link_trees(search, groups, roots, /*by_layers=*/false);
        for (size_t idx = 0; idx < groups.size(); ++idx) {
            fewest_hops.push_back(tree_plan(base[idx], groups[idx], roots[idx],
                                            link_tree(search.topology, roots[idx])));
            balanced.push_back(tree_plan(base[idx], groups[idx], roots[idx], layered[idx]));
            rerouted.push_back(tree_plan(base[idx], groups[idx], roots[idx], grown[idx]));
        }
        out.push_back(std::move(fewest_hops));
        out.push_back(std::move(balanced));
        out.push_back(std::move(rerouted));
    }
    if (search.topology.kind() == TopologyKind::cluster) {
        out.push_back(rail_plans(search, groups, base, roots));
    }
    return out;
}

// (position of `to` - position of `from`) mod p in GPUS: the step in which `from` sends to `to`
// when every GPU sends to the next one, then the one after, and so on (order_sends' rotation).
int rotation(const Search& search, int from, int to) {
    const std::vector<int>& gpus = search.preamble.gpus;
    const int p = static_cast<int>(gpus.size());
    const int a = static_cast<int>(std::find(gpus.begin(), gpus.end(), from) - gpus.begin());
    const int b = static_cast<int>(std::find(gpus.begin(), gpus.end(), to) - gpus.begin());
    return ((b - a) % p + p) % p;
}

// Adds one group's actions to `program`.
void emit(const Search& search, const Group& group, const GroupPlan& plan, Program& program) {
    if (plan.direct) {
        // Every destination gathers what it lacks; sends of one copy are fused into multicasts.
        std::map<std::pair<std::string, int>, std::vector<int>> sends;
        for (int destination : group.destinations) {
            for (const std::string& atom : group.aggregate) {
                if (!holds(search.copies, atom, destination)) {
                    sends[{atom, plan.source.at(atom)}].push_back(destination);
                }
            }
        }
        for (const auto& [key, destinations] : sends) {
            Action action{Aggregate{key.first}, Site::of_gpu(key.second), {{}}, {}};
            for (int destination : destinations) {
                action.hops[0].push_back(Site::of_gpu(destination));
            }
            program.actions.push_back(std::move(action));
        }
        if (group.aggregate.size() > 1) {
            for (int destination : group.destinations) {
                program.actions.push_back({group.aggregate, Site::of_gpu(destination), {}, {}});
            }
        }
        return;
    }
    // Reduction: what every node holds of the aggregate once its subtree has reported.
    std::map<int, Aggregate> accumulated;
    for (const auto& [atom, gpu] : plan.source) {
        accumulated[gpu].insert(atom);
    }
    // Children report to parents; process nodes deepest first.
    auto depth = [&](int node) {
        int d = 0;
        for (auto it = plan.reduce_parent.find(node); it != plan.reduce_parent.end();
             it = plan.reduce_parent.find(it->second)) {
            ++d;
        }
        return d;
    };
    std::vector<int> nodes;
    for (const auto& [node, parent] : plan.reduce_parent) {
        nodes.push_back(node);
    }
    std::stable_sort(nodes.begin(), nodes.end(), [&](int a, int b) { return depth(a) > depth(b); });
    // What each node holds itself, before its children report.
    const std::map<int, Aggregate> own = accumulated;
    std::map<int, std::vector<std::pair<int, Aggregate>>> reports; // parent -> (child, partial)
    std::vector<Action> prefixes;
    auto add_prefixes = [&](int node) {
        // Progressive: the node's own atoms plus its children's partials, one child at a time
        // in rotation order; the last child's arrival is left to the action that forms the
        // node's whole partial.
        auto it = reports.find(node);
        if (!plan.progressive || it == reports.end() || it->second.size() < 2) {
            return;
        }
        std::vector<std::pair<int, Aggregate>> children = it->second;
        std::stable_sort(children.begin(), children.end(), [&](const auto& a, const auto& b) {
            return rotation(search, a.first, node) < rotation(search, b.first, node);
        });
        auto held = own.find(node);
        Aggregate prefix = held == own.end() ? Aggregate{} : held->second;
        int parts = prefix.empty() ? 0 : 1;
        for (size_t c = 0; c + 1 < children.size(); ++c) {
            prefix.insert(children[c].second.begin(), children[c].second.end());
            if (++parts >= 2) {
                prefixes.push_back({prefix, Site::of_gpu(node), {}, {}});
            }
        }
    };
    for (int node : nodes) {
        const Aggregate& partial = accumulated[node];
        if (partial.empty()) {
            continue; // a relay nothing passed through
        }
        add_prefixes(node);
        const int parent = plan.reduce_parent.at(node);
        program.actions.push_back({partial, Site::of_gpu(node), {{Site::of_gpu(parent)}}, {}});
        accumulated[parent].insert(partial.begin(), partial.end());
        reports[parent].emplace_back(node, partial);
    }
    add_prefixes(plan.root);
    program.actions.insert(program.actions.end(), prefixes.begin(), prefixes.end());
    // Broadcast: every node multicasts the aggregate to its children.
    std::map<int, std::vector<int>> children;
    for (const auto& [node, parent] : plan.broadcast_parent) {
        children[parent].push_back(node);
    }
    if (children.find(plan.root) == children.end()) {
        program.actions.push_back({group.aggregate, Site::of_gpu(plan.root), {}, {}});
    }
    for (const auto& [node, kids] : children) {
        Action action{group.aggregate, Site::of_gpu(node), {{}}, {}};
        for (int kid : kids) {
            action.hops[0].push_back(Site::of_gpu(kid));
        }
        program.actions.push_back(std::move(action));
    }
}

Program build(const Search& search, const std::vector<Group>& groups,
              const std::vector<GroupPlan>& plans) {
    Program program = search.preamble;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        emit(search, groups[idx], plans[idx], program);
    }
    return program;
}

// A pipelined candidate with more actions is not simulated, and ends its family: its
// simulation alone would cost more than the whole search (64 groups of a collective in 48
// chunks over 7 hops is 21504 actions).
constexpr size_t kMaxPipelinedActions = 30000;

// A candidate: membership, groups under it, and a plan per group.
struct Candidate {
    Membership membership;
    std::vector<Group> groups;
    std::vector<GroupPlan> plans;
    Program program;
    double time = 0.0; // simulated makespan
    double busy = 0.0; // sum of task durations: breaks ties between equal makespans
};

// Simulates candidate.program as it is.
absl::Status cost(const Search& search, Candidate& candidate) {
    EINSUMMABLE_ASSIGN_OR_RETURN(
        ProgramSimulation simulation,
        simulate_program(candidate.program, candidate.membership, search.topology));
    candidate.time = simulation.result.makespan_s;
    candidate.busy = 0.0;
    for (const TaskTrace& trace : simulation.result.trace) {
        candidate.busy += trace.end - trace.start;
    }
    return absl::OkStatus();
}

absl::Status evaluate(const Search& search, Candidate& candidate) {
    candidate.program = build(search, candidate.groups, candidate.plans);
    return cost(search, candidate);
}

bool is_descendant(const std::map<int, int>& parent, int node, int ancestor) {
    for (auto it = parent.find(node); it != parent.end(); it = parent.find(it->second)) {
        if (it->second == ancestor) {
            return true;
        }
    }
    return false;
}

// Re-hangs `node` under `new_parent` in a tree given by parent links rooted at `root`, keeping
// it a tree; returns false when that would make a cycle.
bool rehang(std::map<int, int>& parent, int node, int new_parent, int root) {
    if (node == root || node == new_parent || is_descendant(parent, new_parent, node)) {
        return false;
    }
    if (new_parent != root && parent.find(new_parent) == parent.end()) {
        parent[new_parent] = root; // a new relay hangs off the root
    }
    parent[node] = new_parent;
    return true;
}

// Drops broadcast relays that serve nobody (not destinations, no children).
void prune_relays(GroupPlan& plan, const Group& group) {
    bool changed = true;
    while (changed) {
        changed = false;
        for (auto it = plan.broadcast_parent.begin(); it != plan.broadcast_parent.end(); ++it) {
            const int node = it->first;
            const bool wanted =
                std::binary_search(group.destinations.begin(), group.destinations.end(), node);
            const bool has_children =
                std::any_of(plan.broadcast_parent.begin(), plan.broadcast_parent.end(),
                            [&](const auto& link) { return link.second == node; });
            if (!wanted && !has_children) {
                plan.broadcast_parent.erase(it);
                changed = true;
                break;
            }
        }
    }
}

// Keeps a plan consistent with a group's (possibly new) destinations after a membership move.
void repair(GroupPlan& plan, const Group& group) {
    if (plan.direct) {
        return;
    }
    for (int destination : group.destinations) {
        if (destination != plan.root && !plan.broadcast_parent.count(destination)) {
            plan.broadcast_parent[destination] = plan.root;
        }
    }
    prune_relays(plan, group);
}

// ---------------------------------------------------------------------------------------------
// Pipelined candidates (pipelining.h): chunks and ORDER.

// A group served along `ring`: a sum travels forward from the GPU after the root around to the
// root, every GPU adding what it holds (a chain of partial sums), and the whole goes on around
// the ring from the root to the last destination (GPUs past it are pruned). A group of one
// atom starts at that atom's copy.
GroupPlan ring_plan(const GroupPlan& base, const Group& group, const Ring& ring, int root) {
    GroupPlan plan = base;
    plan.direct = false;
    plan.progressive = false;
    plan.root = root;
    plan.reduce_parent.clear();
    plan.broadcast_parent.clear();
    const int n = static_cast<int>(ring.gpus.size());
    const int at =
        static_cast<int>(std::find(ring.gpus.begin(), ring.gpus.end(), root) - ring.gpus.begin());
    if (at == n) {
        return star_plan(base, group, root); // a root off the ring
    }
    if (group.aggregate.size() > 1) {
        for (int step = 1; step < n; ++step) {
            plan.reduce_parent[ring.gpus[(at + step) % n]] = ring.gpus[(at + step + 1) % n];
        }
    }
    for (int step = 1; step < n; ++step) {
        plan.broadcast_parent[ring.gpus[(at + step) % n]] = ring.gpus[(at + step - 1) % n];
    }
    prune_relays(plan, group);
    return plan;
}

// One group's plan for some of its chunks.
struct Piece {
    size_t group = 0;
    GroupPlan plan;
    std::vector<Chunk> chunks;
};

// The program of `pieces`: each plan's actions once per chunk; then order_sends. With
// `refine` > 1, a group whose root only keeps the sum (it broadcasts nothing) gets the last
// hops into its root and the root's own sums in `refine` times finer chunks: the root's last
// sum, which nothing can overlap, then covers a small chunk, while the earlier hops keep few,
// larger chunks (each costs a latency on its port). A finer chunk is formed from the coarser
// one that arrived, so nothing else changes.
Program build_pieces(const Search& search, const Candidate& base, const std::vector<Piece>& pieces,
                     int refine = 1) {
    Program program = search.preamble;
    for (const Piece& piece : pieces) {
        Program whole;
        emit(search, base.groups[piece.group], piece.plan, whole);
        const int root = piece.plan.root;
        const bool broadcasts =
            std::any_of(whole.actions.begin(), whole.actions.end(), [&](const Action& action) {
                return action.source == Site::of_gpu(root) && !action.hops.empty();
            });
        for (const Action& action : whole.actions) {
            const bool into_root =
                action.hops.empty() ? action.source == Site::of_gpu(root)
                                    : action.hops.back() == std::vector<Site>{Site::of_gpu(root)};
            const int split =
                refine > 1 && !broadcasts && !piece.plan.direct && into_root ? refine : 1;
            for (const Chunk& chunk : piece.chunks) {
                for (int i = 0; i < split; ++i) {
                    Action chunked = action;
                    chunked.chunk = Chunk{chunk.index * split + i, chunk.count * split};
                    program.actions.push_back(std::move(chunked));
                }
            }
        }
    }
    return order_sends(program, base.membership, search.topology);
}

// The chunks [offset·k + j / total·k] for j < share·k: a ring's share of a group.
std::vector<Chunk> chunk_range(int offset, int share, int total, int k) {
    std::vector<Chunk> chunks;
    for (int j = offset * k; j < (offset + share) * k; ++j) {
        chunks.push_back(Chunk{j, total * k});
    }
    return chunks;
}

// Families of pipelined programs to try beside the whole-atom search's best (`base`), each a
// program per chunk count k: its own program cut into k chunks with ordered sends; the ordered
// progressive star (every group reduced at its round-robin root, parts added as they arrive);
// every group along the topology's rings, its chunks shared among the rings by bandwidth; and,
// on a cluster, every group along its rail tree.
// Where some sum is kept at its root alone (a reduce-scatter), the star and the rings also
// come refined (build_pieces). synthesize() tries k = 1, 2, 4, ... up to max_chunks in each
// family and stops a family at the first k that is no better than the one before it: more
// chunks cost a latency each, so once they stop paying they do not start again.
using Family = std::function<Program(int k)>;

std::vector<Family> pipelined_families(const Search& search, const Candidate& base) {
    std::vector<Family> families;
    const std::vector<GroupPlan>& plans = base.plans;
    const std::vector<Group>& groups = base.groups;
    // Refined variants, each at two refinements: 4 is the best of 2, 4, 8 and 16 for the 1 GB
    // reduce-scatter on dgx-a100, dgx-h100 and dgx-v100, 2 on two dgx-h100 nodes (2.061 ms
    // against 2.066; bench/README.md), where the root's last hops come over NVLink while the
    // NICs still deliver.
    constexpr int kRefinements[] = {4, 2}; // 4 first: it keeps ties as before
    const bool refines = std::any_of(groups.begin(), groups.end(), [](const Group& group) {
        return group.aggregate.size() > 1 && group.destinations.size() == 1;
    });
    families.push_back([&search, &base](int k) {
        return order_sends(chunk_actions(split_relays(base.program), k), base.membership,
                           search.topology);
    });
    std::vector<int> roots;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        roots.push_back(groups[idx].aggregate.size() == 1
                            ? search.copies.at(*groups[idx].aggregate.begin()).front()
                            : groups[idx].destinations[idx % groups[idx].destinations.size()]);
    }
    std::vector<Piece> star;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        GroupPlan plan = star_plan(plans[idx], groups[idx], roots[idx]);
        plan.progressive = true;
        star.push_back({idx, std::move(plan), {}});
    }
    auto pieces_family = [&search, &base](std::vector<Piece> pieces,
                                          std::vector<std::pair<int, int>> ranges, int refine) {
        // ranges[i]: piece i's (offset, share) of `total` shares.
        int total = 0;
        for (const auto& [offset, share] : ranges) {
            total = std::max(total, offset + share);
        }
        return [&search, &base, pieces = std::move(pieces), ranges = std::move(ranges), total,
                refine](int k) {
            if (int64_t{total} * k * refine > Chunk::kMaxCount) {
                return Program{}; // invalid: ends the family
            }
            std::vector<Piece> chunked = pieces;
            for (size_t i = 0; i < chunked.size(); ++i) {
                chunked[i].chunks = chunk_range(ranges[i].first, ranges[i].second, total, k);
            }
            return build_pieces(search, base, chunked, refine);
        };
    };
    const std::vector<std::pair<int, int>> whole(star.size(), {0, 1});
    // The family of `pieces`, and its refined variants where some sum is kept at its root.
    auto push_with_refined = [&](const std::vector<Piece>& pieces,
                                 const std::vector<std::pair<int, int>>& ranges) {
        families.push_back(pieces_family(pieces, ranges, 1));
        for (int refine : kRefinements) {
            if (refines) {
                families.push_back(pieces_family(pieces, ranges, refine));
            }
        }
    };
    push_with_refined(star, whole);
    if (search.topology.kind() == TopologyKind::cluster) {
        // Every group along its rail tree, whatever the whole-atom search kept: its chunks
        // cross between nodes as soon as each is summed inside its node.
        std::vector<Piece> railed;
        std::vector<GroupPlan> trees = rail_plans(search, groups, plans, roots);
        for (size_t idx = 0; idx < trees.size(); ++idx) {
            railed.push_back({idx, std::move(trees[idx]), {}});
        }
        push_with_refined(railed, whole);
        // The same with every GPU adding the parts it reduces one at a time as they arrive
        // (progressive, as the ordered star): a node's sum for another node then leaves with
        // its last part, and the root's own last sum adds one part, not all of them.
        for (Piece& piece : railed) {
            piece.plan.progressive = true;
        }
        push_with_refined(railed, whole);
    }
    const std::vector<Ring> rings = topology_rings(search.topology, search.preamble.gpus);
    if (rings.empty()) {
        return families;
    }
    // Each ring's share of a group's chunks, in units of the narrowest ring's bandwidth.
    double narrowest = rings.front().bandwidth;
    for (const Ring& ring : rings) {
        narrowest = std::min(narrowest, ring.bandwidth);
    }
    std::vector<Piece> along;
    std::vector<std::pair<int, int>> ranges;
    for (size_t idx = 0; idx < groups.size(); ++idx) {
        int offset = 0;
        for (const Ring& ring : rings) {
            const int share =
                std::max(1, static_cast<int>(std::lround(ring.bandwidth / narrowest)));
            along.push_back({idx, ring_plan(plans[idx], groups[idx], ring, roots[idx]), {}});
            ranges.emplace_back(offset, share);
            offset += share;
        }
    }
    push_with_refined(along, ranges);
    return families;
}

// A uniform draw from [0, n).
size_t uniform(std::mt19937_64& rng, size_t n) {
    return std::uniform_int_distribution<size_t>(0, n - 1)(rng);
}

// The membership move: swap one member of a size-declared partition for another GPU, then
// regroup, each group keeping its plan where it had one (repaired to the new group).
bool mutate_membership(const Search& search, Candidate& candidate, std::mt19937_64& rng) {
    const std::vector<int>& gpus = search.preamble.gpus;
    std::vector<int>& members =
        candidate.membership[search.sized[uniform(rng, search.sized.size())]];
    const int incoming = gpus[uniform(rng, gpus.size())];
    if (std::find(members.begin(), members.end(), incoming) != members.end()) {
        return false;
    }
    int& outgoing = members[uniform(rng, members.size())];
    if (search.options.exclusive_partitions) {
        for (const std::string& other : search.sized) {
            std::vector<int>& holder = candidate.membership[other];
            auto it = std::find(holder.begin(), holder.end(), incoming);
            if (it != holder.end()) {
                *it = outgoing; // swap, so no GPU serves two partitions
                std::sort(holder.begin(), holder.end());
                break;
            }
        }
    }
    outgoing = incoming;
    std::sort(members.begin(), members.end());
    std::vector<Group> groups = groups_for(search.preamble, candidate.membership);
    std::vector<GroupPlan> plans;
    for (const Group& group : groups) {
        auto it = std::find_if(candidate.groups.begin(), candidate.groups.end(),
                               [&](const Group& g) { return g.aggregate == group.aggregate; });
        GroupPlan plan = it == candidate.groups.end()
                             ? naive_plan(search, group)
                             : candidate.plans[it - candidate.groups.begin()];
        repair(plan, group);
        plans.push_back(std::move(plan));
    }
    candidate.groups = std::move(groups);
    candidate.plans = std::move(plans);
    return true;
}

// Move `move` (0 to 5) on one group's plan; false when it does not apply.
bool mutate_plan(const Search& search, const Group& group, GroupPlan& plan, size_t move,
                 std::mt19937_64& rng) {
    const std::vector<int>& gpus = search.preamble.gpus;
    switch (move) {
    case 0: // aggregation pull-up / pushdown: direct <-> through a root
        plan = plan.direct ? star_plan(plan, group,
                                       group.destinations[uniform(rng, group.destinations.size())])
                           : naive_plan(search, group);
        return true;
    case 1: { // move the root anywhere (it may be a GPU that needs nothing)
        const int root = gpus[uniform(rng, gpus.size())];
        if (!plan.direct && root == plan.root) {
            return false;
        }
        plan = star_plan(plan, group, root);
        return true;
    }
    case 2: { // source substitution: send another copy of an atom
        auto it = std::next(plan.source.begin(),
                            static_cast<std::ptrdiff_t>(uniform(rng, plan.source.size())));
        const std::vector<int>& at = search.copies.at(it->first);
        if (at.size() < 2) {
            return false;
        }
        const int old_source = it->second;
        it->second = at[uniform(rng, at.size())];
        if (it->second == old_source) {
            return false;
        }
        if (!plan.direct) {
            plan = star_plan(plan, group, plan.root);
        }
        return true;
    }
    case 3: { // reduction pushdown: a node reports through another node, which aggregates
        if (plan.direct || plan.reduce_parent.empty()) {
            return false;
        }
        auto it = std::next(plan.reduce_parent.begin(),
                            static_cast<std::ptrdiff_t>(uniform(rng, plan.reduce_parent.size())));
        return rehang(plan.reduce_parent, it->first, gpus[uniform(rng, gpus.size())], plan.root);
    }
    case 4: { // relay introduction: a destination receives through another GPU
        if (plan.direct || plan.broadcast_parent.empty()) {
            return false;
        }
        auto it =
            std::next(plan.broadcast_parent.begin(),
                      static_cast<std::ptrdiff_t>(uniform(rng, plan.broadcast_parent.size())));
        if (!rehang(plan.broadcast_parent, it->first, gpus[uniform(rng, gpus.size())], plan.root)) {
            return false;
        }
        prune_relays(plan, group);
        return true;
    }
    default: { // relay elimination / multicast fusion: a node receives straight from the root
        if (plan.direct || plan.broadcast_parent.empty()) {
            return false;
        }
        auto it =
            std::next(plan.broadcast_parent.begin(),
                      static_cast<std::ptrdiff_t>(uniform(rng, plan.broadcast_parent.size())));
        if (it->second == plan.root) {
            return false;
        }
        it->second = plan.root;
        prune_relays(plan, group);
        return true;
    }
    }
}

// One random rewrite of `candidate`; false when the move does not apply.
bool mutate(const Search& search, Candidate& candidate, std::mt19937_64& rng) {
    const size_t move = uniform(rng, search.sized.empty() ? 6 : 7);
    if (move == 6) {
        return mutate_membership(search, candidate, rng);
    }
    const size_t group_idx = uniform(rng, candidate.groups.size());
    return mutate_plan(search, candidate.groups[group_idx], candidate.plans[group_idx], move, rng);
}

// A shorter makespan wins; at an equal one, less total task time (fewer or less contended
// transfers), so the search can cross plateaus where one move alone does not shorten the run.
bool better(const Candidate& candidate, const Candidate& incumbent) {
    constexpr double kEpsilon = 1e-12;
    if (candidate.time < incumbent.time * (1.0 - kEpsilon)) {
        return true;
    }
    return candidate.time <= incumbent.time * (1.0 + kEpsilon) &&
           candidate.busy < incumbent.busy * (1.0 - kEpsilon);
}

// The preamble checked (no actions, well formed, GPUs on the topology) and what the search
// reads of it: where each atom's copies are, and the size-declared partitions.
absl::StatusOr<Search> make_search(const Program& preamble, const Topology& topology,
                                   const SynthesisOptions& options) {
    if (!preamble.actions.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "synthesis takes a preamble (GPUS, PARTITIONS, IN, OUT) without actions; this one "
            "has ",
            preamble.actions.size(), " (the first: '", preamble.actions[0].to_string(), "')"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_well_formed(preamble));
    for (int gpu : preamble.gpus) {
        if (gpu < 0 || gpu >= topology.num_gpus()) {
            return absl::InvalidArgumentError(absl::StrCat("the preamble uses GPU ", gpu, "; ",
                                                           topology.name(), " has ",
                                                           topology.num_gpus(), " GPUs"));
        }
    }
    Search search{preamble, topology, options, {}, {}};
    for (const InDecl& in : preamble.ins) {
        search.copies[in.atom].push_back(in.gpu);
    }
    int64_t sized_gpus = 0;
    for (const Partition& partition : preamble.partitions) {
        if (partition.size) {
            search.sized.push_back(partition.name);
            sized_gpus += *partition.size;
        }
    }
    if (options.exclusive_partitions && sized_gpus > static_cast<int64_t>(preamble.gpus.size())) {
        return absl::InvalidArgumentError(absl::StrCat("exclusive partitions need ", sized_gpus,
                                                       " GPUs in all; GPUS lists ",
                                                       preamble.gpus.size()));
    }
    return search;
}

// ---------------------------------------------------------------------------------------------
// The lower bound (exchange_lower_bound).

// Union-find over atom names, for the groups of atoms that co-occur in some aggregate.
class AtomGroups {
public:
    void join(const std::string& a, const std::string& b) { parent_[find(a)] = find(b); }
    std::string find(const std::string& atom) {
        auto it = parent_.find(atom);
        if (it == parent_.end()) {
            parent_.emplace(atom, atom);
            return atom;
        }
        if (it->second == atom) {
            return atom;
        }
        std::string root = find(it->second);
        parent_[atom] = root;
        return root;
    }

private:
    std::map<std::string, std::string> parent_;
};

// The fewest bytes that must move for the atoms of `aggregates` that `keep` selects: the atoms
// that co-occur in one aggregate form a group (one message carries a subset of one aggregate),
// and each group moves at least its largest atom.
double least_bytes(const std::vector<const Aggregate*>& aggregates,
                   const std::function<bool(const std::string&)>& keep,
                   const std::map<std::string, double>& atom_bytes) {
    AtomGroups groups;
    std::set<std::string> kept;
    for (const Aggregate* aggregate : aggregates) {
        const std::string* first = nullptr;
        for (const std::string& atom : *aggregate) {
            if (!keep(atom)) {
                continue;
            }
            kept.insert(atom);
            if (first == nullptr) {
                first = &atom;
                groups.find(atom);
            } else {
                groups.join(atom, *first);
            }
        }
    }
    std::map<std::string, double> largest;
    for (const std::string& atom : kept) {
        double& bytes = largest[groups.find(atom)];
        bytes = std::max(bytes, atom_bytes.at(atom));
    }
    double total = 0.0;
    for (const auto& [root, bytes] : largest) {
        total += bytes;
    }
    return total;
}

// What one GPU can receive and send per second: a switch's link bandwidth; on links the
// distinct resources of its routes from and to every other GPU of the topology (relays may
// pass through GPUs the preamble does not list).
std::pair<double, double> gpu_capacity(const Topology& topology, int gpu) {
    if (topology.kind() == TopologyKind::nvswitch) {
        return {topology.link_bandwidth(), topology.link_bandwidth()};
    }
    auto sum = [&](bool incoming) {
        std::set<int> resources;
        for (int other = 0; other < topology.num_gpus(); ++other) {
            if (other != gpu) {
                const std::vector<int>& route =
                    incoming ? topology.route(other, gpu) : topology.route(gpu, other);
                resources.insert(route.begin(), route.end());
            }
        }
        double capacity = 0.0;
        for (int r : resources) {
            capacity += topology.resources()[r].capacity;
        }
        return capacity;
    };
    return {sum(true), sum(false)};
}

} // namespace

double exchange_lower_bound(const Program& preamble, const Topology& topology) {
    std::map<std::string, std::set<int>> copies;
    std::map<std::string, double> atom_bytes;
    for (const InDecl& in : preamble.ins) {
        copies[in.atom].insert(in.gpu);
        atom_bytes[in.atom] = std::max(atom_bytes[in.atom], in.bytes);
    }
    auto lacks = [&](int gpu) {
        return [&copies, gpu](const std::string& atom) {
            auto it = copies.find(atom);
            return it != copies.end() && !it->second.count(gpu);
        };
    };
    // Aggregates needed at fixed GPUs, and at each size-declared (placed by the search) partition.
    std::map<int, std::vector<const Aggregate*>> at_gpu;
    std::map<std::string, std::vector<const Aggregate*>> at_free;
    std::set<std::string> free_partitions;
    for (const Partition& partition : preamble.partitions) {
        if (partition.size) {
            free_partitions.insert(partition.name);
        }
    }
    for (const OutDecl& out : preamble.outs) {
        for (const Site& site : out.sites) {
            if (site.is_partition && free_partitions.count(site.partition)) {
                at_free[site.partition].push_back(&out.aggregate);
            } else {
                for (int gpu : site_gpus(preamble, site, {})) {
                    at_gpu[gpu].push_back(&out.aggregate);
                }
            }
        }
    }
    std::map<int, std::pair<double, double>> capacity;
    for (int gpu : preamble.gpus) {
        capacity[gpu] = gpu_capacity(topology, gpu);
    }
    auto seconds = [](double bytes, double rate) {
        return bytes <= 0.0 ? 0.0 : rate > 0.0 ? bytes / rate : 0.0;
    };
    double longest = 0.0;
    for (int gpu : preamble.gpus) {
        // Receiving: what it needs and lacks.
        longest = std::max(longest, seconds(least_bytes(at_gpu[gpu], lacks(gpu), atom_bytes),
                                            capacity[gpu].first));
        // Sending: the atoms only it holds that another GPU needs.
        std::vector<const Aggregate*> elsewhere;
        for (const auto& [other, aggregates] : at_gpu) {
            if (other != gpu) {
                elsewhere.insert(elsewhere.end(), aggregates.begin(), aggregates.end());
            }
        }
        auto only_here = [&copies, gpu](const std::string& atom) {
            auto it = copies.find(atom);
            return it != copies.end() && it->second.size() == 1 && *it->second.begin() == gpu;
        };
        longest = std::max(
            longest, seconds(least_bytes(elsewhere, only_here, atom_bytes), capacity[gpu].second));
    }
    for (const auto& [partition, aggregates] : at_free) {
        double cheapest = std::numeric_limits<double>::infinity();
        for (int gpu : preamble.gpus) {
            cheapest = std::min(cheapest, seconds(least_bytes(aggregates, lacks(gpu), atom_bytes),
                                                  capacity[gpu].first));
        }
        if (std::isfinite(cheapest)) {
            longest = std::max(longest, cheapest);
        }
    }
    return longest > 0.0 ? topology.latency_s() + longest : 0.0;
}

namespace {

// Checked before every candidate: each is one validity check and one simulation.
absl::Status stopped(const Search& search) {
    return support::check_cancelled(search.options.cancellation, "exchange-program synthesis");
}

// Whether `best` reaches the lower bound, so that no candidate can be faster.
bool at_bound(const Search& search, const Candidate& best) {
    constexpr double kEpsilon = 1e-9;
    return search.bound > 0.0 && best.time <= search.bound * (1.0 + kEpsilon);
}

// Counts `next` as a candidate and keeps it as `best` when it is valid and better; true when
// the search can stop (the new best reaches the bound).
bool try_candidate(const Search& search, Candidate next, Candidate& best, SynthesisResult& result) {
    ++result.candidates;
    if (evaluate(search, next).ok() && better(next, best)) {
        best = std::move(next);
        result.reached_bound = at_bound(search, best);
    }
    return result.reached_bound;
}

// The whole-atom search from `best`: first, whole-program starting points (at most four,
// always tried); then, per group, a root at each GPU with star trees (keeping improvements as
// we go); then seeded random rewrites of the incumbent.
absl::Status search_whole_atoms(const Search& search, Candidate& best, SynthesisResult& result) {
    for (std::vector<GroupPlan>& plans : joint_plans(search, best.groups, best.plans)) {
        EINSUMMABLE_RETURN_IF_ERROR(stopped(search));
        Candidate next = best;
        next.plans = std::move(plans);
        if (try_candidate(search, std::move(next), best, result)) {
            return absl::OkStatus();
        }
    }
    // Both phases draw on one budget (search_budget).
    const std::vector<int>& gpus = search.preamble.gpus;
    int budget = search.budget;
    for (size_t group_idx = 0; group_idx < best.groups.size() && budget > 0; ++group_idx) {
        for (size_t root_idx = 0; root_idx < gpus.size() && budget > 0; ++root_idx, --budget) {
            EINSUMMABLE_RETURN_IF_ERROR(stopped(search));
            Candidate next = best;
            next.plans[group_idx] =
                star_plan(next.plans[group_idx], next.groups[group_idx], gpus[root_idx]);
            if (try_candidate(search, std::move(next), best, result)) {
                return absl::OkStatus();
            }
        }
    }
    std::mt19937_64 rng(search.options.seed);
    for (; budget > 0; --budget) {
        EINSUMMABLE_RETURN_IF_ERROR(stopped(search));
        Candidate next = best;
        if (!mutate(search, next, rng)) {
            continue;
        }
        if (try_candidate(search, std::move(next), best, result)) {
            return absl::OkStatus();
        }
    }
    return absl::OkStatus();
}

// The whole-atom search's budget for a naive program of `naive` seconds: all of
// options.iterations where the gap to the bound is full_budget_gap or more; below, the search
// can win at most the gap, and gets iterations in proportion to it, at least a quarter.
int search_budget(const Search& search, double naive) {
    const int iterations = search.options.iterations;
    const double full = search.options.full_budget_gap;
    if (full <= 0.0 || search.bound <= 0.0) {
        return iterations;
    }
    const double gap = (naive - search.bound) / search.bound;
    if (gap >= full) {
        return iterations;
    }
    const double share = std::max(0.25, gap / full);
    return static_cast<int>(std::ceil(iterations * share));
}

// Pipelined programs go last: they are final (the whole-atom rewrites work on whole atoms).
// Each family tries k = 1, 2, 4, ... chunks until k stops paying (pipelined_families).
absl::Status search_pipelined(const Search& search, Candidate& best, SynthesisResult& result) {
    const Candidate whole = best; // the families read it while `best` moves on
    for (const Family& family : pipelined_families(search, whole)) {
        double previous = std::numeric_limits<double>::infinity();
        for (int k = 1; k <= search.options.max_chunks; k *= 2) {
            EINSUMMABLE_RETURN_IF_ERROR(stopped(search));
            Candidate next = whole;
            next.program = family(k);
            if (next.program.actions.size() > kMaxPipelinedActions) {
                break;
            }
            ++result.candidates;
            if (!cost(search, next).ok() || next.time >= previous) {
                break;
            }
            previous = next.time;
            if (better(next, best)) {
                best = std::move(next);
                result.reached_bound = at_bound(search, best);
                if (result.reached_bound) {
                    return absl::OkStatus();
                }
            }
        }
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<SynthesisResult> synthesize(const Program& preamble, const Topology& topology,
                                           const SynthesisOptions& options) {
    EINSUMMABLE_ASSIGN_OR_RETURN(Search search, make_search(preamble, topology, options));
    EINSUMMABLE_RETURN_IF_ERROR(stopped(search));
    search.bound = exchange_lower_bound(preamble, topology);
    Candidate best;
    best.membership = identity_membership(preamble);
    best.groups = groups_for(preamble, best.membership);
    for (const Group& group : best.groups) {
        best.plans.push_back(naive_plan(search, group));
    }
    EINSUMMABLE_RETURN_IF_ERROR(evaluate(search, best));
    SynthesisResult result;
    result.naive_simulated_s = best.time;
    result.candidates = 1;
    result.lower_bound_s = search.bound;
    // The search can win at most (naive - bound) / naive: not worth it within skip_margin.
    result.skipped = options.mode == SynthesisMode::optimized &&
                     best.time <= search.bound * (1.0 + options.skip_margin);
    result.reached_bound = at_bound(search, best);
    const bool searching = options.mode == SynthesisMode::optimized && !result.skipped;
    if (searching) {
        search.budget = search_budget(search, best.time);
        result.budget = search.budget;
        EINSUMMABLE_RETURN_IF_ERROR(search_whole_atoms(search, best, result));
    }
    if (searching && !result.reached_bound && options.max_chunks >= 1) {
        EINSUMMABLE_RETURN_IF_ERROR(search_pipelined(search, best, result));
    }
    result.program = std::move(best.program);
    result.membership = std::move(best.membership);
    result.simulated_s = best.time;
    return result;
}

} // namespace einsummable::exprog
