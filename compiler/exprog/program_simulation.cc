#include "compiler/exprog/program_simulation.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

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

double chunk_bytes(const Program& program, const Aggregate& aggregate, const Chunk& chunk) {
    return aggregate_bytes(program, aggregate) / chunk.count;
}

namespace {

std::vector<ProgramStep> steps_of(const Program& program,
                                  const std::vector<ActionInstance>& instances,
                                  const ClosureRun& run) {
    std::vector<size_t> order(instances.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
        return run.firings[a].round < run.firings[b].round;
    });

    const std::vector<std::vector<int>> waits = order_predecessors(program); // ORDER
    // Per action, the steps of its first-hop instances' departures so far.
    std::vector<std::vector<int>> departures(program.actions.size());

    std::vector<ProgramStep> steps;
    const State declared = initial_state(program);
    std::map<Fact, int> producer; // the step that first materialised a fact; absent for INs
    auto producer_of = [&](const Fact& fact) {
        auto it = producer.find(fact);
        return it == producer.end() ? -1 : it->second;
    };
    size_t next = 0;
    while (next < order.size() && run.firings[order[next]].round >= 0) {
        // One round: every instance sees the state from before the round (the closure's
        // decomposition), and what the round produces is recorded once it is over.
        const int round = run.firings[order[next]].round;
        std::map<Fact, int> produced_now;
        for (; next < order.size() && run.firings[order[next]].round == round; ++next) {
            const ActionInstance& instance = instances[order[next]];
            const std::vector<Fact>& parts = run.firings[order[next]].parts;
            std::vector<int> order_after;
            if (instance.hop == 0) {
                for (int before : waits[instance.action_idx]) {
                    order_after.insert(order_after.end(), departures[before].begin(),
                                       departures[before].end());
                }
                std::sort(order_after.begin(), order_after.end());
                order_after.erase(std::unique(order_after.begin(), order_after.end()),
                                  order_after.end());
            }
            // ORDER holds back an instance's first-hop sends; its local aggregation runs as soon
            // as its parts are there, while earlier sends continue. Only an instance that sends
            // nothing (a local aggregation) has its form step held back.
            const bool sends_any =
                std::any_of(instance.destinations.begin(), instance.destinations.end(),
                            [&](int destination) { return destination != instance.source; });
            const bool present = parts.size() == 1 && parts[0].aggregate == instance.aggregate;
            int ready = -1; // the step the sends wait for
            Chunk source_chunk = instance.chunk;
            int form_step = -1;
            const Fact formed{instance.aggregate, instance.source, instance.chunk};
            auto formed_now = produced_now.find(formed);
            if (present) {
                ready = producer_of(parts[0]);
                source_chunk = parts[0].chunk;
                if (parts[0].chunk != instance.chunk && ready >= 0) {
                    // The closure now holds this chunk at the source too: it comes from the
                    // fact it was read out of.
                    produced_now.emplace(formed, ready);
                }
            } else if (formed_now != produced_now.end() &&
                       steps[formed_now->second].kind == ProgramStep::Kind::form) {
                // Another instance of this round forms the same chunk here: one form serves
                // both (say a local sum and a send of that sum that became enabled together).
                ready = formed_now->second;
            } else {
                ProgramStep form;
                form.kind = ProgramStep::Kind::form;
                form.aggregate = instance.aggregate;
                form.chunk = instance.chunk;
                form.gpu = instance.source;
                form.action_idx = instance.action_idx;
                form.parts = parts;
                for (const Fact& part : parts) {
                    form.part_steps.push_back(producer_of(part));
                }
                if (!sends_any) {
                    form.order_after = order_after;
                }
                steps.push_back(std::move(form));
                form_step = ready = static_cast<int>(steps.size()) - 1;
                produced_now.emplace(formed, ready);
            }
            std::vector<int> sends;
            for (int destination : instance.destinations) {
                if (destination == instance.source) {
                    continue;
                }
                ProgramStep send;
                send.kind = ProgramStep::Kind::send;
                send.aggregate = instance.aggregate;
                send.chunk = instance.chunk;
                send.gpu = instance.source;
                send.destination = destination;
                send.source_chunk = source_chunk;
                send.after = ready;
                send.order_after = order_after;
                send.action_idx = instance.action_idx;
                steps.push_back(std::move(send));
                sends.push_back(static_cast<int>(steps.size()) - 1);
                produced_now.emplace(Fact{instance.aggregate, destination, instance.chunk},
                                     sends.back());
            }
            if (instance.hop == 0) {
                std::vector<int>& departed = departures[instance.action_idx];
                if (!sends.empty()) {
                    departed.insert(departed.end(), sends.begin(), sends.end());
                } else if (form_step >= 0) {
                    departed.push_back(form_step);
                } else if (ready >= 0) {
                    departed.push_back(ready);
                }
            }
        }
        for (const auto& [fact, step] : produced_now) {
            if (!declared.count(fact)) {
                producer.emplace(fact, step); // kept only when first: earlier rounds win
            }
        }
    }
    return steps;
}

} // namespace

std::vector<ProgramStep> program_steps(const Program& program, const Membership& membership) {
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    return steps_of(program, instances, run_closure(program, instances));
}

absl::StatusOr<ProgramSimulation>
simulate_program(const Program& program, const Membership& membership, const Topology& topology) {
    const std::vector<ActionInstance> instances = instantiate(program, membership);
    const ClosureRun run = run_closure(program, instances);
    EINSUMMABLE_RETURN_IF_ERROR(check_closure(program, membership, instances, run));
    for (int gpu : program.gpus) {
        if (gpu < 0 || gpu >= topology.num_gpus()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "the program uses GPU ", gpu, ", the topology has ", topology.num_gpus(), " GPUs"));
        }
    }
    ProgramSimulation simulation;
    auto deps_of = [](int step) { return step < 0 ? std::vector<int>{} : std::vector<int>{step}; };
    for (const ProgramStep& step : steps_of(program, instances, run)) {
        // Every part is read in the formed chunk's extent, so each costs the chunk's bytes.
        const double bytes = chunk_bytes(program, step.aggregate, step.chunk);
        std::vector<int> deps = step.order_after;
        const std::string what =
            absl::StrCat(aggregate_to_string(step.aggregate), step.chunk.to_string());
        if (step.kind == ProgramStep::Kind::form) {
            for (int part_step : step.part_steps) {
                for (int dep : deps_of(part_step)) {
                    deps.push_back(dep);
                }
            }
            const double read = bytes * static_cast<double>(step.parts.size());
            simulation.tasks.push_back(
                aggregate_task(step.gpu, read + bytes, deps, absl::StrCat(what, " @ ", step.gpu)));
        } else {
            for (int dep : deps_of(step.after)) {
                deps.push_back(dep);
            }
            simulation.tasks.push_back(
                transfer_task(step.gpu, step.destination, bytes, deps,
                              absl::StrCat(what, " ", step.gpu, "->", step.destination, " (",
                                           program.actions[step.action_idx].to_string(), ")")));
        }
        simulation.task_action.push_back(step.action_idx);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(simulation.result, simulate(topology, simulation.tasks));
    return simulation;
}

} // namespace einsummable::exprog
