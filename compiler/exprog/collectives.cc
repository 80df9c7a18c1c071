#include "compiler/exprog/collectives.h"

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace einsummable::exprog {

namespace {

struct NamedCollective {
    Collective collective;
    absl::string_view name;
};

constexpr NamedCollective kCollectives[] = {
    {Collective::all_gather, "all-gather"},
    {Collective::reduce_scatter, "reduce-scatter"},
    {Collective::all_reduce, "all-reduce"},
    {Collective::all_to_all, "all-to-all"},
};

std::string atom_name(int gpu, int chunk) {
    return absl::StrCat("X", gpu, "_", chunk);
}

std::vector<Site> all_gpus(int gpus) {
    std::vector<Site> sites;
    sites.reserve(gpus);
    for (int g = 0; g < gpus; ++g) {
        sites.push_back(Site::of_gpu(g));
    }
    return sites;
}

// The sum over every GPU of chunk c.
Aggregate chunk_sum(int gpus, int chunk) {
    Aggregate aggregate;
    for (int g = 0; g < gpus; ++g) {
        aggregate.insert(atom_name(g, chunk));
    }
    return aggregate;
}

} // namespace

absl::string_view collective_name(Collective collective) {
    for (const NamedCollective& named : kCollectives) {
        if (named.collective == collective) {
            return named.name;
        }
    }
    return "unknown";
}

absl::StatusOr<Collective> parse_collective(absl::string_view name) {
    for (const NamedCollective& named : kCollectives) {
        if (name == named.name) {
            return named.collective;
        }
        // The enumerator's spelling: "all_gather" for "all-gather".
        std::string underscored(named.name);
        for (char& c : underscored) {
            if (c == '-') {
                c = '_';
            }
        }
        if (name == underscored) {
            return named.collective;
        }
    }
    std::string known;
    for (const NamedCollective& named : kCollectives) {
        absl::StrAppend(&known, known.empty() ? "" : ", ", named.name);
    }
    return absl::InvalidArgumentError(
        absl::StrCat("unknown collective '", name, "' (known: ", known, ")"));
}

Program collective_preamble(Collective collective, int gpus, double total_bytes,
                            int atoms_per_gpu) {
    Program program;
    for (int g = 0; g < gpus; ++g) {
        program.gpus.push_back(g);
    }
    if (gpus < 1 || atoms_per_gpu < 1) {
        return program;
    }
    const double chunk_bytes = collective == Collective::all_gather
                                   ? total_bytes / (static_cast<double>(gpus) * atoms_per_gpu)
                                   : total_bytes / atoms_per_gpu;
    for (int g = 0; g < gpus; ++g) {
        for (int c = 0; c < atoms_per_gpu; ++c) {
            program.ins.push_back(InDecl{atom_name(g, c), g, chunk_bytes, {}});
        }
    }
    switch (collective) {
    case Collective::all_gather:
        for (int g = 0; g < gpus; ++g) {
            for (int c = 0; c < atoms_per_gpu; ++c) {
                program.outs.push_back(OutDecl{{atom_name(g, c)}, all_gpus(gpus), {}});
            }
        }
        break;
    case Collective::reduce_scatter:
        for (int c = 0; c < atoms_per_gpu; ++c) {
            program.outs.push_back(OutDecl{chunk_sum(gpus, c), {Site::of_gpu(c % gpus)}, {}});
        }
        break;
    case Collective::all_reduce:
        for (int c = 0; c < atoms_per_gpu; ++c) {
            program.outs.push_back(OutDecl{chunk_sum(gpus, c), all_gpus(gpus), {}});
        }
        break;
    case Collective::all_to_all:
        for (int g = 0; g < gpus; ++g) {
            for (int c = 0; c < atoms_per_gpu; ++c) {
                program.outs.push_back(OutDecl{{atom_name(g, c)}, {Site::of_gpu(c % gpus)}, {}});
            }
        }
        break;
    }
    return program;
}

double collective_lower_bound(Collective collective, int gpus, double total_bytes,
                              double bandwidth) {
    const double p = gpus;
    const double one_pass = (p - 1.0) / p * total_bytes / bandwidth;
    return collective == Collective::all_reduce ? 2.0 * one_pass : one_pass;
}

namespace {

// Cuts are enumerated (2^p of them); beyond this many GPUs only the per-GPU term is used.
constexpr int kMaxCutGpus = 20;

// The bytes per second that can cross from the GPUs marked `inside` to the other GPUs below
// inside.size(). On a switch a crossing flow uses an egress inside and an ingress outside, so the
// smaller side limits; on links every crossing flow uses one resource (its link or the shared
// bridge), so the cut's capacity is the sum over the distinct resources the crossing routes use.
double cut_capacity(const Topology& topology, const std::vector<bool>& inside) {
    const int gpus = static_cast<int>(inside.size());
    const int members = static_cast<int>(std::count(inside.begin(), inside.end(), true));
    if (topology.kind() == TopologyKind::nvswitch) {
        return topology.link_bandwidth() * std::min(members, gpus - members);
    }
    if (topology.kind() == TopologyKind::cluster) {
        // Every crossing flow crosses in some node's switch (an inside GPU's egress, an
        // outside one's ingress) or over a NIC (an inside GPU's out, an outside one's in, on
        // different nodes): the sum of the two limits bounds what can cross.
        std::map<int, std::pair<int, int>> by_node; // node -> (inside, outside) GPUs
        for (int g = 0; g < gpus; ++g) {
            auto& [in, out] = by_node[topology.node_of(g)];
            (inside[g] ? in : out) += 1;
        }
        double capacity = 0.0;
        int senders = 0;   // inside GPUs with an outside GPU on another node
        int receivers = 0; // outside GPUs with an inside GPU on another node
        for (const auto& [node, counts] : by_node) {
            const auto [in, out] = counts;
            capacity += topology.link_bandwidth() * std::min(in, out);
            senders += (gpus - members) - out > 0 ? in : 0;
            receivers += members - in > 0 ? out : 0;
        }
        return capacity + topology.nic_bandwidth() * std::min(senders, receivers);
    }
    std::vector<bool> counted(topology.resources().size(), false);
    double capacity = 0.0;
    for (int a = 0; a < gpus; ++a) {
        for (int b = 0; b < gpus; ++b) {
            if (!inside[a] || inside[b]) {
                continue;
            }
            for (int r : topology.route(a, b)) {
                if (!counted[r]) {
                    counted[r] = true;
                    capacity += topology.resources()[r].capacity;
                }
            }
        }
    }
    return capacity;
}

// The bytes that must cross from a set of `inside` GPUs to the `outside` others.
double cut_traffic(Collective collective, int inside, int outside, double total_bytes, int gpus) {
    const double chunk = total_bytes / gpus;
    switch (collective) {
    case Collective::all_gather:
        return inside * chunk;
    case Collective::reduce_scatter:
        return outside * chunk;
    case Collective::all_reduce:
        return total_bytes;
    case Collective::all_to_all:
        return static_cast<double>(inside) * outside * chunk;
    }
    return 0.0;
}

} // namespace

double collective_lower_bound(Collective collective, int gpus, double total_bytes,
                              const Topology& topology) {
    gpus = std::min(gpus, topology.num_gpus());
    if (gpus < 2) {
        return 0.0;
    }
    // The most one GPU can move per direction: its own cut (links are symmetric).
    double per_gpu = 0.0;
    for (int g = 0; g < gpus; ++g) {
        std::vector<bool> alone(gpus, false);
        alone[g] = true;
        per_gpu = std::max(per_gpu, cut_capacity(topology, alone));
    }
    double bound = collective_lower_bound(collective, gpus, total_bytes, per_gpu);
    auto consider = [&](const std::vector<bool>& inside) {
        const int members = static_cast<int>(std::count(inside.begin(), inside.end(), true));
        const double capacity = cut_capacity(topology, inside);
        const double traffic = cut_traffic(collective, members, gpus - members, total_bytes, gpus);
        if (capacity > 0.0) {
            bound = std::max(bound, traffic / capacity);
        }
    };
    if (gpus > kMaxCutGpus) {
        // Too many GPUs for every cut: on a cluster, the cuts along nodes (every set of its
        // nodes), which its NICs limit.
        const int nodes = (gpus + topology.gpus_per_node() - 1) / topology.gpus_per_node();
        if (topology.kind() == TopologyKind::cluster && nodes <= kMaxCutGpus) {
            for (uint32_t mask = 1; mask + 1 < (1u << nodes); ++mask) {
                std::vector<bool> inside(gpus);
                for (int g = 0; g < gpus; ++g) {
                    inside[g] = ((mask >> topology.node_of(g)) & 1u) != 0;
                }
                consider(inside);
            }
        }
        return bound;
    }
    for (uint32_t mask = 1; mask + 1 < (1u << gpus); ++mask) {
        std::vector<bool> inside(gpus);
        for (int g = 0; g < gpus; ++g) {
            inside[g] = ((mask >> g) & 1u) != 0;
        }
        consider(inside);
    }
    return bound;
}

Program ordered_star_program(Collective collective, int gpus, double total_bytes, int chunks) {
    Program program = collective_preamble(collective, gpus, total_bytes, gpus);
    if (gpus < 2 ||
        (collective != Collective::reduce_scatter && collective != Collective::all_reduce)) {
        return program;
    }
    chunks = std::max(1, chunks);
    auto atom = [](int gpu, int chunk) { return absl::StrCat("X", gpu, "_", chunk); };
    // Each GPU's sends, in the order it issues them.
    std::vector<std::vector<std::string>> chains(gpus);
    auto send = [&](Aggregate aggregate, int from, int to, int j, std::string label) {
        program.actions.push_back(Action{std::move(aggregate),
                                         Site::of_gpu(from),
                                         {{Site::of_gpu(to)}},
                                         {},
                                         Chunk{j, chunks},
                                         label});
        chains[from].push_back(std::move(label));
    };
    for (int step = 1; step < gpus; ++step) {
        for (int g = 0; g < gpus; ++g) {
            const int root = (g + step) % gpus;
            for (int j = 0; j < chunks; ++j) {
                send({atom(g, root)}, g, root, j, absl::StrCat("p", g, "_", root, "_", j));
            }
        }
    }
    // Root r's running sums, in the order its parts arrive: its own, then r-1's, r-2's, ...
    std::vector<Aggregate> sums(gpus);
    for (int root = 0; root < gpus; ++root) {
        Aggregate sum = {atom(root, root)};
        for (int step = 1; step < gpus; ++step) {
            sum.insert(atom((root - step + gpus) % gpus, root));
            for (int j = 0; j < chunks; ++j) {
                program.actions.push_back(
                    Action{sum, Site::of_gpu(root), {}, {}, Chunk{j, chunks}, ""});
            }
        }
        sums[root] = sum;
    }
    if (collective == Collective::all_reduce) {
        for (int step = 1; step < gpus; ++step) {
            for (int g = 0; g < gpus; ++g) {
                for (int j = 0; j < chunks; ++j) {
                    send(sums[g], g, (g + step) % gpus, j,
                         absl::StrCat("s", g, "_", (g + step) % gpus, "_", j));
                }
            }
        }
    }
    for (const std::vector<std::string>& chain : chains) {
        for (size_t k = 1; k < chain.size(); ++k) {
            program.orders.push_back(OrderDecl{chain[k - 1], chain[k], {}, {}});
        }
    }
    return program;
}

} // namespace einsummable::exprog
