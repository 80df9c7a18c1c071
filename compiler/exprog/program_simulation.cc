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

std::vector<ProgramStep> program_steps(const Program& program, const Membership& membership) {
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    std::vector<int> rounds;
    closure(program, instances, &rounds);
    std::vector<size_t> order(instances.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rounds[a] < rounds[b]; });

    std::vector<ProgramStep> steps;
    State state = initial_state(program);
    std::map<Fact, int> producer; // the step that first materialised a fact; absent for INs
    auto producer_of = [&](const Fact& fact) {
        auto it = producer.find(fact);
        return it == producer.end() ? -1 : it->second;
    };
    size_t next = 0;
    while (next < order.size()) {
        // One round: every instance sees the state from before the round.
        const int round = rounds[order[next]];
        State after = state;
        std::map<Fact, int> produced_now;
        for (; next < order.size() && rounds[order[next]] == round; ++next) {
            const ActionInstance& instance = instances[order[next]];
            const Fact formed{instance.aggregate, instance.source};
            int ready = -1; // the step the sends wait for
            if (state.count(formed)) {
                ready = producer_of(formed);
            } else {
                ProgramStep form;
                form.kind = ProgramStep::Kind::form;
                form.aggregate = instance.aggregate;
                form.gpu = instance.source;
                form.action_idx = instance.action_idx;
                can_form(state, instance.aggregate, instance.source, &form.parts);
                for (const Aggregate& part : form.parts) {
                    form.part_steps.push_back(producer_of({part, instance.source}));
                }
                steps.push_back(std::move(form));
                ready = static_cast<int>(steps.size()) - 1;
                produced_now.emplace(formed, ready);
            }
            after.insert(formed);
            for (int destination : instance.destinations) {
                if (destination == instance.source) {
                    continue;
                }
                ProgramStep send;
                send.kind = ProgramStep::Kind::send;
                send.aggregate = instance.aggregate;
                send.gpu = instance.source;
                send.destination = destination;
                send.after = ready;
                send.action_idx = instance.action_idx;
                steps.push_back(std::move(send));
                const Fact arrived{instance.aggregate, destination};
                produced_now.emplace(arrived, static_cast<int>(steps.size()) - 1);
                after.insert(arrived);
            }
        }
        for (const auto& [fact, step] : produced_now) {
            if (!state.count(fact)) {
                producer.emplace(fact, step);
            }
        }
        state = std::move(after);
    }
    return steps;
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
    ProgramSimulation simulation;
    auto deps_of = [](int step) { return step < 0 ? std::vector<int>{} : std::vector<int>{step}; };
    for (const ProgramStep& step : program_steps(program, membership)) {
        const double bytes = aggregate_bytes(program, step.aggregate);
        if (step.kind == ProgramStep::Kind::form) {
            std::vector<int> deps;
            double read = 0.0;
            for (size_t k = 0; k < step.parts.size(); ++k) {
                read += aggregate_bytes(program, step.parts[k]);
                for (int dep : deps_of(step.part_steps[k])) {
                    deps.push_back(dep);
                }
            }
            simulation.tasks.push_back(
                aggregate_task(step.gpu, read + bytes, deps,
                               absl::StrCat(aggregate_to_string(step.aggregate), " @ ", step.gpu)));
        } else {
            simulation.tasks.push_back(
                transfer_task(step.gpu, step.destination, bytes, deps_of(step.after),
                              absl::StrCat(aggregate_to_string(step.aggregate), " ", step.gpu, "->",
                                           step.destination, " (",
                                           program.actions[step.action_idx].to_string(), ")")));
        }
        simulation.task_action.push_back(step.action_idx);
    }
    absl::StatusOr<SimulationResult> result = simulate(topology, simulation.tasks);
    if (!result.ok()) {
        return result.status();
    }
    simulation.result = *std::move(result);
    return simulation;
}

} // namespace einsummable::exprog
