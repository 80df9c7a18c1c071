#pragma once

#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/program.h"

namespace einsummable::exprog {

// The meaning of an exchange program (paper section 5.2; docs/exprog.md "Meaning").
//
// The state is a set of facts: a chunk of an aggregate present at a GPU (the whole block is the
// chunk [0/1]), starting with the IN declarations (whole atoms). An action instance — a chunk
// of an aggregate formed at one GPU and sent to some GPUs — *fires* when that chunk can be
// formed at its source from pairwise disjoint aggregates present there, each present in a
// chunk that contains it, and when every action it is ORDERed after has departed (fired its
// first hop in an earlier round). Firing adds the chunk at the source and at every
// destination. All enabled instances of a round fire together; the *closure* is the state
// where nothing new fires. A program is *valid* when every action instance fires in the
// closure and every OUT requirement holds in it: at each required GPU, chunks of the OUT's
// aggregate that cover the whole block. Without ORDER, order means nothing.

// GPUs chosen for the partitions declared by size, by partition name.
using Membership = std::map<std::string, std::vector<int>>;

// A chunk of an aggregate present at a GPU.
struct Fact {
    Aggregate aggregate;
    int gpu = 0;
    Chunk chunk; // the whole block unless set
    friend auto operator<=>(const Fact&, const Fact&) = default;
};
using State = std::set<Fact>;
std::string fact_to_string(const Fact& fact); // "A+B[1/4] @ 3"

// One action with its sites resolved to GPUs: relay chains become one instance per hop, and a
// partition as source one instance per GPU.
struct ActionInstance {
    Aggregate aggregate;
    Chunk chunk;
    int source = 0;
    std::vector<int> destinations; // empty for a local aggregation
    int action_idx = 0;            // the Program::actions entry it comes from
    int hop = 0; // 0: the action's first hop (or its local aggregation), where ORDER applies
};

// Static checks that need no execution: check_declarations (parser.h: declared GPUs,
// partitions and atoms, sizes that fit, only the last hop multicasts), at least one GPU, and no
// relay through a partition of several GPUs. Errors give the line and the culprit.
absl::Status check_well_formed(const Program& program);

// The GPUs of a site under `membership` (explicit partitions use their members).
std::vector<int> site_gpus(const Program& program, const Site& site, const Membership& membership);

// Every action instance of the program under `membership`.
std::vector<ActionInstance> instantiate(const Program& program, const Membership& membership);

// Whether chunk `chunk` of `aggregate` can be formed at `gpu` from pairwise disjoint aggregates
// present there in chunks that contain it. On success, `parts` (when given) receives one such
// decomposition (facts of `state`), tried with larger aggregates first so it has few parts,
// and among facts of one aggregate the smallest chunk that contains `chunk`. A part whose
// aggregate is `aggregate` itself means the chunk is already there (whole or inside a larger
// chunk): nothing to combine.
bool can_form(const State& state, const Aggregate& aggregate, int gpu,
              std::vector<Fact>* parts = nullptr, const Chunk& chunk = Chunk{});

// Whether the OUT-style requirement "`aggregate` at `gpu`" holds in `state`: chunks of it
// present there cover the whole block.
bool holds_whole(const State& state, const Aggregate& aggregate, int gpu);

// The initial state: every IN declaration.
State initial_state(const Program& program);

// For every action (by index), the actions it is ORDERed after (pairs naming an unknown label
// are skipped: check_declarations reports them). One pass over the labels.
std::vector<std::vector<int>> order_predecessors(const Program& program);

// How the closure fired one instance.
struct Firing {
    int round = -1;          // the round in which it fired (0-based); -1: never
    std::vector<Fact> parts; // the decomposition it was formed from (can_form), before its round
};

struct ClosureRun {
    State state;
    std::vector<Firing> firings; // one per instance
};

// Fires every enabled instance until nothing changes, honouring the program's ORDER pairs
// unless `honour_order` is false. Linear in the facts each round adds: an instance is
// looked at again only when its source gained a fact or an action it waits for departed.
ClosureRun run_closure(const Program& program, const std::vector<ActionInstance>& instances,
                       bool honour_order = true);

// The closure's state; `rounds` (when given) receives each instance's firing round (or -1).
State closure(const Program& program, const std::vector<ActionInstance>& instances,
              std::vector<int>* rounds = nullptr);

struct CheckResult {
    Membership membership; // the membership found for the size-declared partitions
    State closure;
};

// Validity under one membership: the error names the first action that can never fire (and
// what is present at its source), or — when every action could fire but for ORDER — the
// cycle of ORDER and data dependencies that blocks them (each action in it and what it waits
// for), or the first unmet OUT requirement (and where it is missing).
absl::Status check_with_membership(const Program& program, const Membership& membership);
// The same for a closure already run (run_closure(program, instances), instances from
// instantiate(program, membership)), so a caller that needs the run too computes it once.
absl::Status check_closure(const Program& program, const Membership& membership,
                           const std::vector<ActionInstance>& instances, const ClosureRun& run);

// Validity: well-formed, then a search over memberships of the size-declared partitions (in a
// fixed order: each partition's GPU combinations in lexicographic order; partitions may share
// GPUs) for one under which the program is valid, trying at most `max_memberships`. With no
// size-declared partition this is check_with_membership({}).
absl::StatusOr<CheckResult> check_program(const Program& program, int64_t max_memberships = 100000);

} // namespace einsummable::exprog
