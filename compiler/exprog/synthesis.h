#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/topology.h"
#include "compiler/support/cancellation.h"

namespace einsummable::exprog {

// Writing the body of an exchange program for a preamble (GPUS, PARTITIONS, IN, OUT; paper
// section 5.3). docs/exprog.md "Simulation and synthesis" describes both modes.
//
// naive: identity placement (size-declared partitions take GPUs in GPUS order, cyclically, in
//   declaration order); every atom an OUT requirement needs is sent straight from one of its
//   copies (the one at the consuming GPU if any, else the first declared) to each consuming GPU,
//   and aggregated there.
// optimized: a seeded local search from the naive program over memberships of size-declared
//   partitions and, per group of OUT requirements, the paper's rewrites: where the aggregate is
//   reduced (aggregation pushdown/pull-up to a root), which copy of each atom is sent (source
//   substitution), and how the result reaches its consumers (multicast, or relay chains
//   through other GPUs: relay introduction/elimination, multicast fission/fusion). Every
//   candidate is checked for validity and costed on the simulator; only improvements are kept
//   (a shorter makespan, or an equal one with less total task time), so the result is never
//   slower than naive. Deterministic for a seed and budget.
//   The search starts from the naive program and exchange_lower_bound (below): it is skipped
//   when naive is within skip_margin of the bound, and it stops as soon as a candidate reaches
//   the bound (no program can be faster); otherwise it spends a budget that follows the gap
//   between naive and the bound (SynthesisOptions::full_budget_gap).
enum class SynthesisMode { naive, optimized };

absl::string_view synthesis_mode_name(SynthesisMode mode);
// "naive", "optimized", or "ai" (the paper's name for optimized).
absl::StatusOr<SynthesisMode> parse_synthesis_mode(absl::string_view name);

struct SynthesisOptions {
    SynthesisMode mode = SynthesisMode::optimized;
    uint64_t seed = 0;
    // The optimized search's budget: candidates tried after the (at most four) whole-program
    // starting points, by the per-group root sweep first and then by random rewrites. It
    // bounds synthesis time: each candidate is one validity check and one simulation.
    int iterations = 600;
    // Size-declared partitions never share a GPU: a membership move that takes a GPU another
    // such partition holds swaps the two. The physical compiler sets it so that an operator's
    // function specs (one size-1 partition each) land on distinct devices.
    bool exclusive_partitions = false;
    // Pipelining (optimized mode; docs/exprog.md "Chunks and order"): after the whole-atom
    // search, programs with chunks and ordered sends are tried too — the best whole program
    // cut into k chunks, the ordered progressive star and the topology's rings — for k = 1, 2,
    // 4, ... up to max_chunks. 0 turns it off (whole atoms, no ORDER: the programs of before).
    int max_chunks = 8;
    // The optimized search is skipped (the naive program returned) when naive simulates within
    // this fraction of exchange_lower_bound: the search could win at most that much.
    double skip_margin = 0.02;
    // The budget follows the gap: a search whose naive program simulates within this relative
    // gap of the bound ((naive - bound) / bound) can win at most that much, and tries only
    // iterations * gap / full_budget_gap candidates after the starting points, at least a
    // quarter of iterations; a larger gap gets all of iterations. 0: every search gets all.
    // 1 keeps every paper setup measured (docs/exprog.md) as it was; 4 does not.
    double full_budget_gap = 1.0;
    // Polled before every candidate; once set, synthesize returns Cancelled. Null: never. Not
    // owned; not part of any cache key (it changes no result, only whether one comes).
    const support::Cancellation* cancellation = nullptr;
};

struct SynthesisResult {
    Program program;          // the preamble with the synthesised actions
    Membership membership;    // for the size-declared partitions
    double simulated_s = 0.0; // makespan on the topology
    double naive_simulated_s = 0.0;
    int candidates = 0; // programs simulated
    // The whole-atom search's budget after its starting points: options.iterations scaled by
    // the gap (full_budget_gap); 0 when the search was skipped or the mode is naive.
    int budget = 0;
    double lower_bound_s = 0.0; // exchange_lower_bound of the preamble
    // Optimized mode: the search was skipped (naive within skip_margin of the bound), or it
    // stopped early because a candidate reached the bound.
    bool skipped = false;
    bool reached_bound = false;
};

// A lower bound on the makespan of every program for `preamble` on `topology`, whatever its
// membership, chunks or routes (docs/exprog.md "Lower bound of an exchange"): one latency plus
// the largest, over GPUs, of the bytes the GPU must receive over its receiving capacity and of
// the bytes it must send over its sending capacity. A GPU must receive, for each group of the
// atoms it lacks that co-occur in aggregates it needs, at least the largest atom of the group
// (one message carries a subset of one aggregate); it must send, likewise, the atoms only it
// holds that another GPU needs. A size-declared partition counts at its cheapest GPU. The
// capacity is a switch's link bandwidth, or on links the distinct resources of the GPU's routes
// to and from every GPU of the topology, listed in GPUS or not, since relays may pass anywhere
// (its links and the shared bridge). 0 when nothing must move.
double exchange_lower_bound(const Program& preamble, const Topology& topology);

// InvalidArgument when the preamble is not well-formed, asks for exclusive partitions larger
// in total than GPUS, already has actions, names a GPU the
// topology lacks, or has an OUT requirement no program can meet (an atom with no IN).
// Cancelled once options.cancellation is set (polled before every candidate).
absl::StatusOr<SynthesisResult> synthesize(const Program& preamble, const Topology& topology,
                                           const SynthesisOptions& options);

} // namespace einsummable::exprog
