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

// The steps of a closure run: its instances taken round by round in the order it fired them,
// each a form step at its source (unless its chunk is there already) and a send per destination.
class StepBuilder {
public:
    StepBuilder(const Program& program, const std::vector<ActionInstance>& instances,
                const ClosureRun& run)
        : instances_(instances), run_(run), waits_(order_predecessors(program)),
          departures_(program.actions.size()), declared_(initial_state(program)) {}

    std::vector<ProgramStep> build() && {
        std::vector<size_t> order(instances_.size());
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
            return run_.firings[a].round < run_.firings[b].round;
        });
        size_t next = 0;
        while (next < order.size() && run_.firings[order[next]].round >= 0) {
            // One round: every instance sees the state from before the round (the closure's
            // decomposition), and what the round produces is recorded once it is over.
            const int round = run_.firings[order[next]].round;
            produced_now_.clear();
            for (; next < order.size() && run_.firings[order[next]].round == round; ++next) {
                add_instance(instances_[order[next]], run_.firings[order[next]].parts);
            }
            for (const auto& [fact, step] : produced_now_) {
                if (!declared_.count(fact)) {
                    producer_.emplace(fact, step); // kept only when first: earlier rounds win
                }
            }
        }
        return std::move(steps_);
    }

private:
    // Where an instance's sends read from: the step they wait for (-1: none), the chunk they
    // read at the source, and the form step the instance added (-1: none).
    struct Source {
        int ready = -1;
        Chunk chunk;
        int form_step = -1;
    };

    int producer_of(const Fact& fact) const {
        auto it = producer_.find(fact);
        return it == producer_.end() ? -1 : it->second;
    }

    // ORDER: the departures of the actions a first-hop instance's action is ordered after.
    std::vector<int> order_after_of(const ActionInstance& instance) const {
        std::vector<int> order_after;
        if (instance.hop == 0) {
            for (int before : waits_[instance.action_idx]) {
                order_after.insert(order_after.end(), departures_[before].begin(),
                                   departures_[before].end());
            }
            std::sort(order_after.begin(), order_after.end());
            order_after.erase(std::unique(order_after.begin(), order_after.end()),
                              order_after.end());
        }
        return order_after;
    }

    void add_instance(const ActionInstance& instance, const std::vector<Fact>& parts) {
        const std::vector<int> order_after = order_after_of(instance);
        // ORDER holds back an instance's first-hop sends; its local aggregation runs as soon
        // as its parts are there, while earlier sends continue. Only an instance that sends
        // nothing (a local aggregation) has its form step held back.
        const bool sends_any =
            std::any_of(instance.destinations.begin(), instance.destinations.end(),
                        [&](int destination) { return destination != instance.source; });
        const Source source = form(instance, parts, sends_any ? std::vector<int>{} : order_after);
        const std::vector<int> sends = add_sends(instance, source, order_after);
        if (instance.hop == 0) {
            std::vector<int>& departed = departures_[instance.action_idx];
            if (!sends.empty()) {
                departed.insert(departed.end(), sends.begin(), sends.end());
            } else if (source.form_step >= 0) {
                departed.push_back(source.form_step);
            } else if (source.ready >= 0) {
                departed.push_back(source.ready);
            }
        }
    }

    // The instance's aggregate at its source: present already (its one part), formed by
    // another instance this round, or a new form step of its parts (held back by
    // `form_order_after`).
    Source form(const ActionInstance& instance, const std::vector<Fact>& parts,
                const std::vector<int>& form_order_after) {
        Source source;
        source.chunk = instance.chunk;
        const bool present = parts.size() == 1 && parts[0].aggregate == instance.aggregate;
        const Fact formed{instance.aggregate, instance.source, instance.chunk};
        auto formed_now = produced_now_.find(formed);
        if (present) {
            source.ready = producer_of(parts[0]);
            source.chunk = parts[0].chunk;
            if (parts[0].chunk != instance.chunk && source.ready >= 0) {
                // The closure now holds this chunk at the source too: it comes from the
                // fact it was read out of.
                produced_now_.emplace(formed, source.ready);
            }
        } else if (formed_now != produced_now_.end() &&
                   steps_[formed_now->second].kind == ProgramStep::Kind::form) {
            // Another instance of this round forms the same chunk here: one form serves
            // both (say a local sum and a send of that sum that became enabled together).
            source.ready = formed_now->second;
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
            form.order_after = form_order_after;
            steps_.push_back(std::move(form));
            source.form_step = source.ready = static_cast<int>(steps_.size()) - 1;
            produced_now_.emplace(formed, source.ready);
        }
        return source;
    }

    // One send step per destination other than the source; their indices.
    std::vector<int> add_sends(const ActionInstance& instance, const Source& source,
                               const std::vector<int>& order_after) {
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
            send.source_chunk = source.chunk;
            send.after = source.ready;
            send.order_after = order_after;
            send.action_idx = instance.action_idx;
            steps_.push_back(std::move(send));
            sends.push_back(static_cast<int>(steps_.size()) - 1);
            produced_now_.emplace(Fact{instance.aggregate, destination, instance.chunk},
                                  sends.back());
        }
        return sends;
    }

    const std::vector<ActionInstance>& instances_;
    const ClosureRun& run_;
    const std::vector<std::vector<int>> waits_; // ORDER
    // Per action, the steps of its first-hop instances' departures so far.
    std::vector<std::vector<int>> departures_;
    const State declared_;
    std::vector<ProgramStep> steps_;
    std::map<Fact, int> producer_;     // the step that first materialised a fact; absent for INs
    std::map<Fact, int> produced_now_; // what the current round materialises
};

std::vector<ProgramStep> steps_of(const Program& program,
                                  const std::vector<ActionInstance>& instances,
                                  const ClosureRun& run) {
    return StepBuilder(program, instances, run).build();
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
