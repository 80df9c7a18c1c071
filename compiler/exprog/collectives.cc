#include "compiler/exprog/collectives.h"

#include <string>
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

} // namespace einsummable::exprog
