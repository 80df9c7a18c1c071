#include "compiler/exprog/semantics.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/parser.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {

namespace {

std::string at_line(const SourceLocation& location) {
    return location.line > 0 ? absl::StrCat("line ", location.line, ": ") : std::string();
}

} // namespace

absl::Status check_well_formed(const Program& program) {
    if (program.gpus.empty()) {
        return absl::InvalidArgumentError("the program declares no GPUS");
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_declarations(program));
    // A relay hop must be one GPU; the syntax allows one partition there, so its size matters.
    for (const Action& action : program.actions) {
        for (size_t hop = 0; hop + 1 < action.hops.size(); ++hop) {
            const Site& site = action.hops[hop][0];
            const Partition* partition =
                site.is_partition ? program.find_partition(site.partition) : nullptr;
            if (partition != nullptr &&
                (partition->size ? *partition->size != 1 : partition->members.size() != 1)) {
                return absl::InvalidArgumentError(
                    absl::StrCat(at_line(action.location), "action '", action.to_string(),
                                 "': relay hop ", hop + 1, " is partition '", site.partition,
                                 "' of several GPUs; only the last hop may multicast"));
            }
        }
    }
    return absl::OkStatus();
}

std::vector<int> site_gpus(const Program& program, const Site& site, const Membership& membership) {
    if (!site.is_partition) {
        return {site.gpu};
    }
    const Partition* partition = program.find_partition(site.partition);
    if (partition == nullptr) {
        return {};
    }
    if (!partition->size) {
        return partition->members;
    }
    auto it = membership.find(site.partition);
    return it == membership.end() ? std::vector<int>{} : it->second;
}

std::string fact_to_string(const Fact& fact) {
    return absl::StrCat(aggregate_to_string(fact.aggregate), fact.chunk.to_string(), " @ ",
                        fact.gpu);
}

std::vector<ActionInstance> instantiate(const Program& program, const Membership& membership) {
    std::vector<ActionInstance> instances;
    for (int action_idx = 0; action_idx < static_cast<int>(program.actions.size()); ++action_idx) {
        const Action& action = program.actions[action_idx];
        for (int source : site_gpus(program, action.source, membership)) {
            if (action.hops.empty()) {
                instances.push_back({action.aggregate, action.chunk, source, {}, action_idx, 0});
                continue;
            }
            int from = source;
            for (size_t hop = 0; hop < action.hops.size(); ++hop) {
                std::vector<int> destinations;
                for (const Site& site : action.hops[hop]) {
                    for (int gpu : site_gpus(program, site, membership)) {
                        if (std::find(destinations.begin(), destinations.end(), gpu) ==
                            destinations.end()) {
                            destinations.push_back(gpu);
                        }
                    }
                }
                instances.push_back({action.aggregate, action.chunk, from, destinations, action_idx,
                                     static_cast<int>(hop)});
                if (!destinations.empty()) {
                    from = destinations.front(); // relay hops name one GPU
                }
            }
        }
    }
    return instances;
}

namespace {

// The facts of a state by GPU and atom, so that forming an aggregate looks only at the facts
// that could be its parts. Holds pointers into a State (std::set nodes do not move).
class FactIndex {
public:
    void add(const Fact* fact) {
        for (const std::string& atom : fact->aggregate) {
            by_gpu_[fact->gpu][atom].push_back(fact);
        }
    }

    bool can_form(const Aggregate& aggregate, const Chunk& chunk, int gpu,
                  std::vector<Fact>* parts) const {
        auto it = by_gpu_.find(gpu);
        if (it == by_gpu_.end()) {
            return aggregate.empty();
        }
        if (parts) {
            parts->clear();
        }
        return cover(it->second, chunk, aggregate, parts);
    }

private:
    using ByAtom = std::map<std::string, std::vector<const Fact*>>;

    // Exact cover of `remaining` by disjoint present aggregates whose chunks contain `chunk`:
    // the smallest atom left must be covered by some present aggregate inside `remaining`.
    // Larger aggregates are tried first (few parts), then the smaller containing chunk.
    static bool cover(const ByAtom& by_atom, const Chunk& chunk, const Aggregate& remaining,
                      std::vector<Fact>* parts) {
        if (remaining.empty()) {
            return true;
        }
        auto it = by_atom.find(*remaining.begin());
        if (it == by_atom.end()) {
            return false;
        }
        std::vector<const Fact*> candidates;
        for (const Fact* fact : it->second) {
            if (fact->chunk.contains(chunk) &&
                std::includes(remaining.begin(), remaining.end(), fact->aggregate.begin(),
                              fact->aggregate.end())) {
                candidates.push_back(fact);
            }
        }
        std::sort(candidates.begin(), candidates.end(), [](const Fact* a, const Fact* b) {
            if (a->aggregate.size() != b->aggregate.size()) {
                return a->aggregate.size() > b->aggregate.size();
            }
            if (a->aggregate != b->aggregate) {
                return a->aggregate < b->aggregate;
            }
            if (a->chunk.count != b->chunk.count) {
                return a->chunk.count > b->chunk.count; // the smaller chunk: less to slice
            }
            return a->chunk.index < b->chunk.index;
        });
        for (const Fact* candidate : candidates) {
            Aggregate rest;
            std::set_difference(remaining.begin(), remaining.end(), candidate->aggregate.begin(),
                                candidate->aggregate.end(), std::inserter(rest, rest.begin()));
            if (parts) {
                parts->push_back(*candidate);
            }
            if (cover(by_atom, chunk, rest, parts)) {
                return true;
            }
            if (parts) {
                parts->pop_back();
            }
        }
        return false;
    }

    std::map<int, ByAtom> by_gpu_;
};

} // namespace

bool can_form(const State& state, const Aggregate& aggregate, int gpu, std::vector<Fact>* parts,
              const Chunk& chunk) {
    FactIndex index;
    for (const Fact& fact : state) {
        if (fact.gpu == gpu) {
            index.add(&fact);
        }
    }
    return index.can_form(aggregate, chunk, gpu, parts);
}

namespace {

// The chunks of `aggregate` present at `gpu` (State orders facts by aggregate, GPU, chunk).
std::vector<Chunk> chunks_at(const State& state, const Aggregate& aggregate, int gpu) {
    std::vector<Chunk> chunks;
    for (auto it = state.lower_bound(Fact{aggregate, gpu, Chunk{-1, 0}});
         it != state.end() && it->aggregate == aggregate && it->gpu == gpu; ++it) {
        chunks.push_back(it->chunk);
    }
    return chunks;
}

} // namespace

bool holds_whole(const State& state, const Aggregate& aggregate, int gpu) {
    return chunks_cover_whole(chunks_at(state, aggregate, gpu));
}

State initial_state(const Program& program) {
    State state;
    for (const InDecl& in : program.ins) {
        state.insert({Aggregate{in.atom}, in.gpu});
    }
    return state;
}

std::vector<std::vector<int>> order_predecessors(const Program& program) {
    std::vector<std::vector<int>> before(program.actions.size());
    if (program.orders.empty()) {
        return before;
    }
    std::map<std::string, int> by_label;
    for (size_t idx = 0; idx < program.actions.size(); ++idx) {
        if (!program.actions[idx].label.empty()) {
            by_label.emplace(program.actions[idx].label, static_cast<int>(idx));
        }
    }
    for (const OrderDecl& order : program.orders) {
        auto first = by_label.find(order.before);
        auto second = by_label.find(order.after);
        if (first != by_label.end() && second != by_label.end()) {
            before[second->second].push_back(first->second);
        }
    }
    return before;
}

namespace {

// One run of the closure: rounds in which every instance that can fire does, against the state
// before the round, until a round enables none.
class ClosureRunner {
public:
    ClosureRunner(const Program& program, const std::vector<ActionInstance>& instances,
                  bool honour_order)
        : instances_(instances) {
        run_.state = initial_state(program);
        for (const Fact& fact : run_.state) {
            index_.add(&fact);
        }
        const size_t n = instances.size();
        run_.firings.assign(n, Firing{});
        init_order(program, honour_order);
        // An instance is looked at again when its source gains a fact that could be one of its
        // parts (one holding the smallest atom of the fact, which the instance's aggregate must
        // hold too), or when an action it waits for departs.
        for (size_t i = 0; i < n; ++i) {
            for (const std::string& atom : instances[i].aggregate) {
                by_source_atom_[{instances[i].source, atom}].push_back(static_cast<int>(i));
            }
        }
        marked_.assign(n, 0);
    }

    ClosureRun run() && {
        // The instances to look at in the next round, in index order (so every round fires in a
        // fixed order); `marked_` keeps each in the list once.
        std::vector<int> candidates(instances_.size());
        std::iota(candidates.begin(), candidates.end(), 0);
        for (int round = 0; !candidates.empty(); ++round) {
            // Everything enabled in this round fires together, against the state before it.
            const std::vector<int> enabled = enabled_in(round, candidates);
            next_.clear();
            fire(round, enabled);
            std::sort(next_.begin(), next_.end());
            for (int i : next_) {
                marked_[i] = 0;
            }
            candidates = std::move(next_);
        }
        for (Firing& firing : run_.firings) {
            if (firing.round < 0) {
                firing.parts.clear();
            }
        }
        return std::move(run_);
    }

private:
    // ORDER: the actions each first-hop instance waits for, and when each action departed
    // (its last first-hop instance fired; -1: it has none, so it never holds anyone up).
    void init_order(const Program& program, bool honour_order) {
        const size_t n = instances_.size();
        const size_t actions = program.actions.size();
        waits_.resize(n);
        waiters_.resize(actions);
        first_hops_left_.assign(actions, 0);
        for (const ActionInstance& instance : instances_) {
            if (instance.hop == 0) {
                ++first_hops_left_[instance.action_idx];
            }
        }
        departed_.assign(actions, kNotYet);
        for (size_t a = 0; a < actions; ++a) {
            if (first_hops_left_[a] == 0) {
                departed_[a] = -1;
            }
        }
        if (!honour_order || program.orders.empty()) {
            return;
        }
        const std::vector<std::vector<int>> predecessors = order_predecessors(program);
        for (size_t i = 0; i < n; ++i) {
            if (instances_[i].hop != 0) {
                continue;
            }
            for (int before : predecessors[instances_[i].action_idx]) {
                waits_[i].push_back(before);
                waiters_[before].push_back(static_cast<int>(i));
            }
        }
    }

    // The candidates not yet fired that wait for no action and whose aggregate their source
    // can form (recording its parts).
    std::vector<int> enabled_in(int round, const std::vector<int>& candidates) {
        std::vector<int> enabled;
        for (int i : candidates) {
            Firing& firing = run_.firings[i];
            if (firing.round >= 0) {
                continue;
            }
            bool waiting = false;
            for (int before : waits_[i]) {
                waiting = waiting || departed_[before] >= round;
            }
            const ActionInstance& instance = instances_[i];
            if (!waiting && index_.can_form(instance.aggregate, instance.chunk, instance.source,
                                            &firing.parts)) {
                enabled.push_back(i);
            }
        }
        return enabled;
    }

    // Fires `enabled` in round `round`: their facts join the state, and the instances those
    // facts or the actions that departed may enable are looked at next round.
    void fire(int round, const std::vector<int>& enabled) {
        for (int i : enabled) {
            run_.firings[i].round = round; // fired: woken no more
        }
        for (int i : enabled) {
            const ActionInstance& instance = instances_[i];
            add_fact({instance.aggregate, instance.source, instance.chunk});
            for (int destination : instance.destinations) {
                add_fact({instance.aggregate, destination, instance.chunk});
            }
            if (instance.hop == 0 && --first_hops_left_[instance.action_idx] == 0) {
                departed_[instance.action_idx] = round;
                wake(waiters_[instance.action_idx]);
            }
        }
    }

    void wake(const std::vector<int>& instances_to_wake) {
        for (int i : instances_to_wake) {
            if (run_.firings[i].round < 0 && !marked_[i]) {
                marked_[i] = 1;
                next_.push_back(i);
            }
        }
    }

    void add_fact(Fact fact) {
        auto [it, inserted] = run_.state.insert(std::move(fact));
        if (!inserted) {
            return;
        }
        index_.add(&*it);
        auto woken = by_source_atom_.find({it->gpu, *it->aggregate.begin()});
        if (woken != by_source_atom_.end()) {
            wake(woken->second);
        }
    }

    static constexpr int kNotYet = std::numeric_limits<int>::max();

    const std::vector<ActionInstance>& instances_;
    ClosureRun run_;
    FactIndex index_;                       // points into run_.state
    std::vector<std::vector<int>> waits_;   // per instance: the actions it waits for (ORDER)
    std::vector<std::vector<int>> waiters_; // per action: the instances waiting for it
    std::vector<int> first_hops_left_;      // per action: first-hop instances not yet fired
    std::vector<int> departed_;             // per action: the round it departed, or kNotYet
    std::map<std::pair<int, std::string>, std::vector<int>> by_source_atom_;
    std::vector<char> marked_; // per instance: in next_ already
    std::vector<int> next_;    // the instances to look at next round
};

} // namespace

ClosureRun run_closure(const Program& program, const std::vector<ActionInstance>& instances,
                       bool honour_order) {
    return ClosureRunner(program, instances, honour_order).run();
}

State closure(const Program& program, const std::vector<ActionInstance>& instances,
              std::vector<int>* rounds) {
    ClosureRun run = run_closure(program, instances);
    if (rounds) {
        rounds->clear();
        for (const Firing& firing : run.firings) {
            rounds->push_back(firing.round);
        }
    }
    return std::move(run.state);
}

namespace {

std::string present_at(const State& state, int gpu) {
    constexpr size_t kShown = 12;
    std::vector<std::string> present;
    size_t more = 0;
    for (const Fact& fact : state) {
        if (fact.gpu != gpu) {
            continue;
        }
        if (present.size() < kShown) {
            present.push_back(
                absl::StrCat(aggregate_to_string(fact.aggregate), fact.chunk.to_string()));
        } else {
            ++more;
        }
    }
    if (present.empty()) {
        return "nothing";
    }
    return absl::StrCat(absl::StrJoin(present, ", "),
                        more > 0 ? absl::StrCat(" and ", more, " more") : "");
}

std::string describe_action(const Program& program, int action_idx) {
    const Action& action = program.actions[action_idx];
    return absl::StrCat(at_line(action.location), "'", action.to_string(), "'");
}

// Every instance fires without ORDER but some do not with it: ORDER and data dependencies form
// a cycle. Each stuck instance waits for another stuck one — an ORDER predecessor that has not
// departed, or the instance that produced (in the order-free closure) a part it lacks — so
// following those edges from the first stuck instance reaches a cycle; the error lists it.
absl::Status order_cycle_error(const Program& program, const std::vector<ActionInstance>& instances,
                               const ClosureRun& ordered, const ClosureRun& free) {
    const size_t n = instances.size();
    // Which instance first produced each fact in the order-free closure.
    std::map<Fact, int> producer;
    {
        std::vector<int> by_round(n);
        std::iota(by_round.begin(), by_round.end(), 0);
        std::stable_sort(by_round.begin(), by_round.end(), [&](int a, int b) {
            return free.firings[a].round < free.firings[b].round;
        });
        for (int i : by_round) {
            producer.emplace(Fact{instances[i].aggregate, instances[i].source, instances[i].chunk},
                             i);
            for (int destination : instances[i].destinations) {
                producer.emplace(Fact{instances[i].aggregate, destination, instances[i].chunk}, i);
            }
        }
    }
    auto stuck = [&](int i) { return ordered.firings[i].round < 0; };
    // The edge out of a stuck instance: the instance it waits for and why.
    // Labels to actions, and each action's first-hop instances, looked up once: a program in
    // error may have thousands of actions.
    std::map<std::string, int> by_label;
    for (size_t idx = 0; idx < program.actions.size(); ++idx) {
        if (!program.actions[idx].label.empty()) {
            by_label.emplace(program.actions[idx].label, static_cast<int>(idx));
        }
    }
    auto action_of = [&](const std::string& label) {
        auto it = by_label.find(label);
        return it == by_label.end() ? -1 : it->second;
    };
    std::vector<std::vector<int>> first_hops(program.actions.size());
    for (size_t j = 0; j < n; ++j) {
        if (instances[j].hop == 0) {
            first_hops[instances[j].action_idx].push_back(static_cast<int>(j));
        }
    }
    auto edge = [&](int i) -> std::pair<int, std::string> {
        const ActionInstance& instance = instances[i];
        if (instance.hop == 0) {
            for (const OrderDecl& order : program.orders) {
                const int before = action_of(order.before);
                if (before < 0 || action_of(order.after) != instance.action_idx) {
                    continue;
                }
                for (int j : first_hops[before]) {
                    if (j != i && stuck(j)) {
                        return {j, absl::StrCat("waits (ORDER ", order.before, " < ", order.after,
                                                order.location.line > 0
                                                    ? absl::StrCat(", line ", order.location.line)
                                                    : std::string(),
                                                ") for")};
                    }
                }
            }
        }
        for (const Fact& part : free.firings[i].parts) {
            bool present = false;
            for (const Chunk& chunk : chunks_at(ordered.state, part.aggregate, part.gpu)) {
                present = present || chunk.contains(instance.chunk);
            }
            auto it = producer.find(part);
            if (!present && it != producer.end() && stuck(it->second)) {
                return {it->second, absl::StrCat("needs ", fact_to_string(part), " from")};
            }
        }
        return {-1, ""};
    };
    int current = -1;
    for (size_t i = 0; i < n && current < 0; ++i) {
        if (stuck(static_cast<int>(i))) {
            current = static_cast<int>(i);
        }
    }
    std::vector<std::pair<int, std::string>> path;
    std::map<int, size_t> seen; // instance -> position in path
    while (current >= 0 && !seen.count(current)) {
        seen[current] = path.size();
        std::pair<int, std::string> next = edge(current);
        path.emplace_back(current, next.second);
        current = next.first;
    }
    std::vector<std::string> steps;
    if (current >= 0) {
        for (size_t k = seen[current]; k < path.size(); ++k) {
            const int to = k + 1 < path.size() ? path[k + 1].first : current;
            steps.push_back(absl::StrCat(
                describe_action(program, instances[path[k].first].action_idx), " ", path[k].second,
                " ", describe_action(program, instances[to].action_idx)));
        }
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "ORDER and data dependencies form a cycle, so these actions never fire: ",
        steps.empty() ? std::string("(cycle not found)") : absl::StrJoin(steps, "; ")));
}

} // namespace

absl::Status check_with_membership(const Program& program, const Membership& membership) {
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    return check_closure(program, membership, instances, run_closure(program, instances));
}

absl::Status check_closure(const Program& program, const Membership& membership,
                           const std::vector<ActionInstance>& instances, const ClosureRun& run) {
    const bool all_fired = std::all_of(run.firings.begin(), run.firings.end(),
                                       [](const Firing& firing) { return firing.round >= 0; });
    if (!all_fired) {
        // Whether ORDER is to blame: without it, does everything fire?
        const ClosureRun free =
            program.orders.empty() ? run : run_closure(program, instances, /*honour_order=*/false);
        for (size_t idx = 0; idx < instances.size(); ++idx) {
            if (free.firings[idx].round >= 0) {
                continue;
            }
            const ActionInstance& instance = instances[idx];
            const Action& action = program.actions[instance.action_idx];
            return absl::InvalidArgumentError(absl::StrCat(
                at_line(action.location), "action '", action.to_string(),
                "' can never fire: ", aggregate_to_string(instance.aggregate),
                instance.chunk.to_string(), " cannot be formed at GPU ", instance.source,
                " from disjoint aggregates there (present at the end: ",
                present_at(free.state, instance.source), ")"));
        }
        return order_cycle_error(program, instances, run, free);
    }
    const State& state = run.state;
    for (const OutDecl& out : program.outs) {
        for (const Site& site : out.sites) {
            for (int gpu : site_gpus(program, site, membership)) {
                if (holds_whole(state, out.aggregate, gpu)) {
                    continue;
                }
                const std::string name = aggregate_to_string(out.aggregate);
                const std::string what =
                    chunks_at(state, out.aggregate, gpu).empty()
                        ? absl::StrCat(name, " never reaches GPU ", gpu)
                        : absl::StrCat("the chunks of ", name, " that reach GPU ", gpu,
                                       " do not cover it");
                return absl::InvalidArgumentError(
                    absl::StrCat(at_line(out.location), "OUT ", name, " @ ", site.to_string(),
                                 " is not met: ", what,
                                 " (present there at the end: ", present_at(state, gpu), ")"));
            }
        }
    }
    return absl::OkStatus();
}

absl::StatusOr<CheckResult> check_program(const Program& program, int64_t max_memberships) {
    EINSUMMABLE_RETURN_IF_ERROR(check_well_formed(program));
    std::vector<const Partition*> sized;
    for (const Partition& partition : program.partitions) {
        if (partition.size) {
            sized.push_back(&partition);
        }
    }
    std::vector<int> gpus = program.gpus;
    std::sort(gpus.begin(), gpus.end());
    // Odometer over one GPU combination per size-declared partition.
    std::vector<std::vector<int>> choice(sized.size());
    for (size_t idx = 0; idx < sized.size(); ++idx) {
        choice[idx].resize(*sized[idx]->size);
        for (int k = 0; k < *sized[idx]->size; ++k) {
            choice[idx][k] = k; // indices into gpus
        }
    }
    auto next_combination = [&](std::vector<int>& combo) {
        const int n = static_cast<int>(gpus.size());
        const int k = static_cast<int>(combo.size());
        for (int pos = k - 1; pos >= 0; --pos) {
            if (combo[pos] < n - k + pos) {
                ++combo[pos];
                for (int later = pos + 1; later < k; ++later) {
                    combo[later] = combo[later - 1] + 1;
                }
                return true;
            }
        }
        for (int pos = 0; pos < k; ++pos) {
            combo[pos] = pos;
        }
        return false;
    };
    absl::Status first_error;
    for (int64_t tried = 0; tried < max_memberships; ++tried) {
        Membership membership;
        for (size_t idx = 0; idx < sized.size(); ++idx) {
            std::vector<int>& members = membership[sized[idx]->name];
            for (int position : choice[idx]) {
                members.push_back(gpus[position]);
            }
        }
        absl::Status status = check_with_membership(program, membership);
        if (status.ok()) {
            CheckResult result;
            result.closure = closure(program, instantiate(program, membership));
            result.membership = std::move(membership);
            return result;
        }
        if (first_error.ok()) {
            first_error = status;
        }
        size_t idx = 0;
        while (idx < sized.size() && !next_combination(choice[idx])) {
            ++idx;
        }
        if (idx == sized.size()) {
            if (sized.empty()) {
                return first_error;
            }
            return absl::InvalidArgumentError(absl::StrCat(
                "no membership of the size-declared partitions makes the program valid; under "
                "the first one tried: ",
                first_error.message()));
        }
    }
    return absl::InvalidArgumentError(
        absl::StrCat("no valid membership among the first ", max_memberships,
                     " tried; under the first one: ", first_error.message()));
}

} // namespace einsummable::exprog
