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

// The meaning of an exchange program (paper section 5.2; docs/exprog.md).
//
// The state is a set of (aggregate, GPU) facts, starting with the IN declarations. An action
// instance — an aggregate formed at one GPU and sent to some GPUs — *fires* when its aggregate
// can be formed at its source from pairwise disjoint aggregates present there; firing adds the
// aggregate at the source and at every destination. All enabled actions fire; the *closure* is
// the state where nothing new fires. A program is *valid* when every action instance fires in
// the closure and every OUT requirement holds in it. Actions form a set: order means nothing.

// GPUs chosen for the partitions declared by size, by partition name.
using Membership = std::map<std::string, std::vector<int>>;

// An aggregate present at a GPU.
using Fact = std::pair<Aggregate, int>;
using State = std::set<Fact>;

// One action with its sites resolved to GPUs: relay chains become one instance per hop, and a
// partition as source one instance per GPU.
struct ActionInstance {
    Aggregate aggregate;
    int source = 0;
    std::vector<int> destinations; // empty for a local aggregation
    int action_idx = 0;            // the Program::actions entry it comes from
};

// Static checks that need no execution: check_declarations (parser.h: declared GPUs,
// partitions and atoms, sizes that fit, only the last hop multicasts), at least one GPU, and no
// relay through a partition of several GPUs. Errors give the line and the culprit.
absl::Status check_well_formed(const Program& program);

// The GPUs of a site under `membership` (explicit partitions use their members).
std::vector<int> site_gpus(const Program& program, const Site& site, const Membership& membership);

// Every action instance of the program under `membership`.
std::vector<ActionInstance> instantiate(const Program& program, const Membership& membership);

// Whether `aggregate` can be formed at `gpu` from pairwise disjoint aggregates present there.
// On success, `parts` (when given) receives one such decomposition, fewest parts first.
bool can_form(const State& state, const Aggregate& aggregate, int gpu,
              std::vector<Aggregate>* parts = nullptr);

// The initial state: every IN declaration.
State initial_state(const Program& program);

// Fires every enabled instance until nothing changes. `rounds` (when given) receives, for each
// instance, the round in which it first fired (0-based), or -1 if it never fires.
State closure(const Program& program, const std::vector<ActionInstance>& instances,
              std::vector<int>* rounds = nullptr);

struct CheckResult {
    Membership membership; // the membership found for the size-declared partitions
    State closure;
};

// Validity under one membership: the error names the first action that can never fire (and
// what is present at its source) or the first unmet OUT requirement (and where it is missing).
absl::Status check_with_membership(const Program& program, const Membership& membership);

// Validity: well-formed, then a search over memberships of the size-declared partitions (in a
// fixed order: each partition's GPU combinations in lexicographic order; partitions may share
// GPUs) for one under which the program is valid, trying at most `max_memberships`. With no
// size-declared partition this is check_with_membership({}).
absl::StatusOr<CheckResult> check_program(const Program& program, int64_t max_memberships = 100000);

} // namespace einsummable::exprog
