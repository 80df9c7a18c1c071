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
//   c0: A[0/2] @ 0 -> 2      # chunk 0 of 2 of A, labelled c0
//   c1: A[1/2] @ 0 -> 2
//   ORDER: c0 < c1           # c1 starts once c0's data has left GPU 0
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

// A chunk of a block: part `index` of `count` equal parts along the block's elements, the
// interval [index/count, (index+1)/count) of it; count 1 is the whole block. A chunk of an
// aggregate is the aggregate of the atoms' same chunks. Written `[index/count]` after an
// aggregate, nothing for the whole.
struct Chunk {
    int index = 0;
    int count = 1;

    static constexpr int kMaxCount = 4096;

    bool whole() const { return count == 1; }
    // Whether this chunk's interval contains `other`'s (every chunk contains itself).
    bool contains(const Chunk& other) const;
    // "[index/count]", or "" for the whole block.
    std::string to_string() const;
    friend auto operator<=>(const Chunk&, const Chunk&) = default;
};

// Whether `chunks` (intervals, possibly overlapping) cover the whole block.
bool chunks_cover_whole(std::vector<Chunk> chunks);

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

// [label:] aggregate[chunk] @ source [-> hop]...: form the aggregate (or its chunk) at the
// source (from disjoint aggregates present there whose chunks contain it), then send it along
// the hops. `A @ 0 -> 1, 2` multicasts; `A @ 0 -> 5 -> 6` relays through 5 (every hop but the
// last names exactly one site); no hops is a local aggregation. A partition as source means
// every site of the partition. A label names the action in ORDER declarations.
struct Action {
    Aggregate aggregate;
    Site source;
    std::vector<std::vector<Site>> hops;
    SourceLocation location;
    Chunk chunk;                   // the whole block unless set
    std::string label;             // empty: unlabelled
    std::string to_string() const; // one line, as the printer writes it
    friend bool operator==(const Action& a, const Action& b) {
        return a.label == b.label && a.aggregate == b.aggregate && a.chunk == b.chunk &&
               a.source == b.source && a.hops == b.hops;
    }
};

// ORDER: before < after — every instance of the action labelled `after` starts (forms its
// aggregate, or sends it when already formed) only once every instance of `before` has
// *departed*: its data has left its source (every first-hop transfer finished), or, for a
// local aggregation, the aggregate is formed. A chain `a < b < c` is the pairs (a, b), (b, c).
struct OrderDecl {
    std::string before;
    std::string after;
    SourceLocation location;       // of `before` in the text
    SourceLocation after_location; // of `after`
    friend bool operator==(const OrderDecl& a, const OrderDecl& b) {
        return a.before == b.before && a.after == b.after;
    }
};

// A program is a set of actions, not a sequence: their order in the text carries no meaning;
// only ORDER declarations order them.
struct Program {
    std::vector<int> gpus;
    std::vector<Partition> partitions;
    std::vector<InDecl> ins;
    std::vector<OutDecl> outs;
    std::vector<Action> actions;
    std::vector<OrderDecl> orders;

    const Partition* find_partition(const std::string& name) const;
    // The index in `actions` of the action labelled `label`, or -1.
    int find_action(const std::string& label) const;
    // Equality ignores source locations, the order of actions (a program is a set) and the
    // order of ORDER pairs.
    friend bool operator==(const Program& a, const Program& b);
};

} // namespace einsummable::exprog
