#include "compiler/exprog/semantics.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/parser.h"

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
    if (absl::Status status = check_declarations(program); !status.ok()) {
        return status;
    }
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

std::vector<ActionInstance> instantiate(const Program& program, const Membership& membership) {
    std::vector<ActionInstance> instances;
    for (int action_idx = 0; action_idx < static_cast<int>(program.actions.size()); ++action_idx) {
        const Action& action = program.actions[action_idx];
        for (int source : site_gpus(program, action.source, membership)) {
            if (action.hops.empty()) {
                instances.push_back({action.aggregate, source, {}, action_idx});
                continue;
            }
            int from = source;
            for (const std::vector<Site>& hop : action.hops) {
                std::vector<int> destinations;
                for (const Site& site : hop) {
                    for (int gpu : site_gpus(program, site, membership)) {
                        if (std::find(destinations.begin(), destinations.end(), gpu) ==
                            destinations.end()) {
                            destinations.push_back(gpu);
                        }
                    }
                }
                instances.push_back({action.aggregate, from, destinations, action_idx});
                if (!destinations.empty()) {
                    from = destinations.front(); // relay hops name one GPU
                }
            }
        }
    }
    return instances;
}

namespace {

// Exact cover of `remaining` by disjoint aggregates present at `gpu`: the smallest atom left
// must be covered by some present aggregate inside `remaining`. Tries larger parts first so
// the decomposition found uses few parts.
bool cover(const std::vector<const Aggregate*>& present, Aggregate remaining,
           std::vector<Aggregate>* parts) {
    if (remaining.empty()) {
        return true;
    }
    const std::string& atom = *remaining.begin();
    for (const Aggregate* candidate : present) {
        if (!candidate->count(atom) || !std::includes(remaining.begin(), remaining.end(),
                                                      candidate->begin(), candidate->end())) {
            continue;
        }
        Aggregate rest;
        std::set_difference(remaining.begin(), remaining.end(), candidate->begin(),
                            candidate->end(), std::inserter(rest, rest.begin()));
        if (parts) {
            parts->push_back(*candidate);
        }
        if (cover(present, std::move(rest), parts)) {
            return true;
        }
        if (parts) {
            parts->pop_back();
        }
    }
    return false;
}

} // namespace

bool can_form(const State& state, const Aggregate& aggregate, int gpu,
              std::vector<Aggregate>* parts) {
    std::vector<const Aggregate*> present;
    for (const Fact& fact : state) {
        if (fact.second == gpu && std::includes(aggregate.begin(), aggregate.end(),
                                                fact.first.begin(), fact.first.end())) {
            present.push_back(&fact.first);
        }
    }
    std::stable_sort(present.begin(), present.end(),
                     [](const Aggregate* a, const Aggregate* b) { return a->size() > b->size(); });
    if (parts) {
        parts->clear();
    }
    return cover(present, aggregate, parts);
}

State initial_state(const Program& program) {
    State state;
    for (const InDecl& in : program.ins) {
        state.insert({Aggregate{in.atom}, in.gpu});
    }
    return state;
}

State closure(const Program& program, const std::vector<ActionInstance>& instances,
              std::vector<int>* rounds) {
    State state = initial_state(program);
    std::vector<int> fired(instances.size(), -1);
    for (int round = 0;; ++round) {
        // Everything enabled in this round fires together, against the state before the round.
        std::vector<size_t> enabled;
        for (size_t idx = 0; idx < instances.size(); ++idx) {
            if (fired[idx] < 0 &&
                can_form(state, instances[idx].aggregate, instances[idx].source)) {
                enabled.push_back(idx);
            }
        }
        if (enabled.empty()) {
            break;
        }
        for (size_t idx : enabled) {
            fired[idx] = round;
            const ActionInstance& instance = instances[idx];
            state.insert({instance.aggregate, instance.source});
            for (int destination : instance.destinations) {
                state.insert({instance.aggregate, destination});
            }
        }
    }
    if (rounds) {
        *rounds = std::move(fired);
    }
    return state;
}

namespace {

std::string present_at(const State& state, int gpu) {
    std::vector<std::string> present;
    for (const Fact& fact : state) {
        if (fact.second == gpu) {
            present.push_back(aggregate_to_string(fact.first));
        }
    }
    return present.empty() ? "nothing" : absl::StrJoin(present, ", ");
}

} // namespace

absl::Status check_with_membership(const Program& program, const Membership& membership) {
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    std::vector<int> rounds;
    const State state = closure(program, instances, &rounds);
    for (size_t idx = 0; idx < instances.size(); ++idx) {
        if (rounds[idx] >= 0) {
            continue;
        }
        const ActionInstance& instance = instances[idx];
        const Action& action = program.actions[instance.action_idx];
        return absl::InvalidArgumentError(
            absl::StrCat(at_line(action.location), "action '", action.to_string(),
                         "' can never fire: ", aggregate_to_string(instance.aggregate),
                         " cannot be formed at GPU ", instance.source,
                         " from disjoint aggregates there (present at the end: ",
                         present_at(state, instance.source), ")"));
    }
    for (const OutDecl& out : program.outs) {
        for (const Site& site : out.sites) {
            for (int gpu : site_gpus(program, site, membership)) {
                if (!state.count({out.aggregate, gpu})) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        at_line(out.location), "OUT ", aggregate_to_string(out.aggregate), " @ ",
                        site.to_string(), " is not met: ", aggregate_to_string(out.aggregate),
                        " never reaches GPU ", gpu,
                        " (present there at the end: ", present_at(state, gpu), ")"));
                }
            }
        }
    }
    return absl::OkStatus();
}

absl::StatusOr<CheckResult> check_program(const Program& program, int64_t max_memberships) {
    if (absl::Status status = check_well_formed(program); !status.ok()) {
        return status;
    }
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
