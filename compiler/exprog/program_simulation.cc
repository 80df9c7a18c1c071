#include "compiler/exprog/program_simulation.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace einsummable::exprog {

double aggregate_bytes(const Program& program, const Aggregate& aggregate) {
    double bytes = 0.0;
    for (const InDecl& in : program.ins) {
        if (aggregate.count(in.atom)) {
            bytes = std::max(bytes, in.bytes);
        }
    }
    return bytes;
}

absl::StatusOr<ProgramSimulation>
simulate_program(const Program& program, const Membership& membership, const Topology& topology) {
    if (absl::Status status = check_with_membership(program, membership); !status.ok()) {
        return status;
    }
    for (int gpu : program.gpus) {
        if (gpu < 0 || gpu >= topology.num_gpus()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "the program uses GPU ", gpu, ", the topology has ", topology.num_gpus(), " GPUs"));
        }
    }
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    std::vector<int> rounds;
    closure(program, instances, &rounds);
    std::vector<size_t> order(instances.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rounds[a] < rounds[b]; });

    ProgramSimulation simulation;
    State state = initial_state(program);
    std::map<Fact, int> producer; // the task that first materialised a fact; absent for INs
    auto deps_of = [&](const Fact& fact) {
        auto it = producer.find(fact);
        return it == producer.end() ? std::vector<int>{} : std::vector<int>{it->second};
    };
    size_t next = 0;
    while (next < order.size()) {
        // One round: every instance sees the state from before the round.
        const int round = rounds[order[next]];
        State after = state;
        std::map<Fact, int> produced_now;
        for (; next < order.size() && rounds[order[next]] == round; ++next) {
            const ActionInstance& instance = instances[order[next]];
            const Action& action = program.actions[instance.action_idx];
            const double bytes = aggregate_bytes(program, instance.aggregate);
            const Fact formed{instance.aggregate, instance.source};
            std::vector<int> ready; // what the transfers wait for
            if (state.count(formed)) {
                ready = deps_of(formed);
            } else {
                std::vector<Aggregate> parts;
                can_form(state, instance.aggregate, instance.source, &parts);
                std::vector<int> deps;
                double read = 0.0;
                for (const Aggregate& part : parts) {
                    read += aggregate_bytes(program, part);
                    for (int dep : deps_of({part, instance.source})) {
                        deps.push_back(dep);
                    }
                }
                simulation.tasks.push_back(aggregate_task(
                    instance.source, read + bytes, deps,
                    absl::StrCat(aggregate_to_string(instance.aggregate), " @ ", instance.source)));
                simulation.task_action.push_back(instance.action_idx);
                const int task = static_cast<int>(simulation.tasks.size()) - 1;
                produced_now.emplace(formed, task);
                ready = {task};
            }
            after.insert(formed);
            for (int destination : instance.destinations) {
                if (destination == instance.source) {
                    continue;
                }
                simulation.tasks.push_back(transfer_task(
                    instance.source, destination, bytes, ready,
                    absl::StrCat(aggregate_to_string(instance.aggregate), " ", instance.source,
                                 "->", destination, " (", action.to_string(), ")")));
                simulation.task_action.push_back(instance.action_idx);
                const Fact arrived{instance.aggregate, destination};
                produced_now.emplace(arrived, static_cast<int>(simulation.tasks.size()) - 1);
                after.insert(arrived);
            }
        }
        for (const auto& [fact, task] : produced_now) {
            if (!state.count(fact)) {
                producer.emplace(fact, task);
            }
        }
        state = std::move(after);
    }
    absl::StatusOr<SimulationResult> result = simulate(topology, simulation.tasks);
    if (!result.ok()) {
        return result.status();
    }
    simulation.result = *std::move(result);
    return simulation;
}

} // namespace einsummable::exprog
