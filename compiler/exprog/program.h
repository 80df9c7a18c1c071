#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace einsummable::exprog {

// An exchange program (paper section 5; grammar in docs/exprog.md):
//
//   GPUS: 0, 1, 2, 3
//   PARTITIONS: G1 {0, 1}, G2 {size 2}
//   IN: A @ 0 (size: 1.0 GB)
//   IN: B @ 1
//   OUT: A+B @ 0, 1
//   OUT: A+B @ G2
//   A @ 0 -> 1; B @ 1 -> 0
//   A+B @ 0
//   A+B @ 1 -> 2, 3
//   B @ 1 -> 0 -> 3          # relay through 0
//
// This header is the syntax tree; parser.h reads and prints it, semantics.h gives it meaning.

// Where a token starts in the source text (1-based); {0, 0} for programs built in code.
struct SourceLocation {
    int line = 0;
    int column = 0;
};

// An aggregate: a set of atoms combined with the operator's ⊕ (order-free), written A+B.
using Aggregate = std::set<std::string>;
std::string aggregate_to_string(const Aggregate& aggregate); // "A+B", atoms sorted

// A GPU id or the name of a partition.
struct Site {
    bool is_partition = false;
    int gpu = 0;
    std::string partition;

    static Site of_gpu(int gpu) { return Site{false, gpu, {}}; }
    static Site of_partition(std::string name) { return Site{true, 0, std::move(name)}; }
    std::string to_string() const;
    friend bool operator==(const Site&, const Site&) = default;
};

// A named set of GPUs: explicit members, or only a size (the compiler chooses the members;
// this is how operator placement is chosen).
struct Partition {
    std::string name;
    std::vector<int> members; // explicit members, when size is unset
    std::optional<int> size;  // `{size k}`
    SourceLocation location;
    friend bool operator==(const Partition& a, const Partition& b) {
        return a.name == b.name && a.members == b.members && a.size == b.size;
    }
};

// IN: atom @ gpu (size: ...). The same atom may be declared at several GPUs (copies).
struct InDecl {
    std::string atom;
    int gpu = 0;
    double bytes = 1e9; // default 1 GB
    SourceLocation location;
    friend bool operator==(const InDecl& a, const InDecl& b) {
        return a.atom == b.atom && a.gpu == b.gpu && a.bytes == b.bytes;
    }
};

// OUT: aggregate @ sites — the aggregate must end up at every listed GPU and at every GPU of
// every listed partition.
struct OutDecl {
    Aggregate aggregate;
    std::vector<Site> sites;
    SourceLocation location;
    friend bool operator==(const OutDecl& a, const OutDecl& b) {
        return a.aggregate == b.aggregate && a.sites == b.sites;
    }
};

// aggregate @ source [-> hop]...: form the aggregate at the source (from disjoint aggregates
// present there), then send it along the hops. `A @ 0 -> 1, 2` multicasts; `A @ 0 -> 5 -> 6`
// relays through 5 (every hop but the last names exactly one site); no hops is a local
// aggregation. A partition as source means every site of the partition.
struct Action {
    Aggregate aggregate;
    Site source;
    std::vector<std::vector<Site>> hops;
    SourceLocation location;
    std::string to_string() const; // one line, as the printer writes it
    friend bool operator==(const Action& a, const Action& b) {
        return a.aggregate == b.aggregate && a.source == b.source && a.hops == b.hops;
    }
};

// A program is a set of actions, not a sequence: their order in the text carries no meaning.
struct Program {
    std::vector<int> gpus;
    std::vector<Partition> partitions;
    std::vector<InDecl> ins;
    std::vector<OutDecl> outs;
    std::vector<Action> actions;

    const Partition* find_partition(const std::string& name) const;
    // Equality ignores source locations and the order of actions (a program is a set).
    friend bool operator==(const Program& a, const Program& b);
};

} // namespace einsummable::exprog
