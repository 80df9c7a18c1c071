#include "compiler/exprog/simulator.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"

namespace einsummable::exprog {

namespace {

// Flows whose completion is within this fraction of the current time of the next event
// finish together with it (absorbs rounding in remaining bytes / rate).
constexpr double kSimultaneous = 1e-12;

std::string task_name(const std::vector<SimTask>& tasks, int index) {
    const std::string& label = tasks[static_cast<size_t>(index)].label;
    return label.empty() ? absl::StrCat("task ", index)
                         : absl::StrCat("task ", index, " ('", label, "')");
}

// Sorted, duplicate-free dependencies of every task.
std::vector<std::vector<int>> unique_deps(const std::vector<SimTask>& tasks) {
    std::vector<std::vector<int>> deps;
    deps.reserve(tasks.size());
    for (const SimTask& task : tasks) {
        std::vector<int> sorted = task.deps;
        std::sort(sorted.begin(), sorted.end());
        sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
        deps.push_back(std::move(sorted));
    }
    return deps;
}

absl::Status validate(const Topology& topology, const std::vector<SimTask>& tasks,
                      const std::vector<std::vector<int>>& deps) {
    const int n = static_cast<int>(tasks.size());
    const int gpus = topology.num_gpus();
    auto error = [&](int index, absl::string_view message) {
        return absl::InvalidArgumentError(absl::StrCat(task_name(tasks, index), ": ", message));
    };
    for (int index = 0; index < n; ++index) {
        const SimTask& task = tasks[static_cast<size_t>(index)];
        const bool transfer = task.kind == SimTask::Kind::transfer;
        if (task.kind == SimTask::Kind::compute &&
            (!std::isfinite(task.duration_s) || task.duration_s < 0.0)) {
            return error(index, absl::StrCat("duration must be finite and not negative, got ",
                                             task.duration_s, " s"));
        }
        if (task.src_gpu < 0 || task.src_gpu >= gpus) {
            return error(index,
                         absl::StrCat(transfer ? "source " : "", "GPU ", task.src_gpu,
                                      " out of range (", topology.name(), " has ", gpus, " GPUs)"));
        }
        if (transfer) {
            if (task.dst_gpu < 0 || task.dst_gpu >= gpus) {
                return error(index,
                             absl::StrCat("destination GPU ", task.dst_gpu, " out of range (",
                                          topology.name(), " has ", gpus, " GPUs)"));
            }
            if (task.src_gpu == task.dst_gpu) {
                return error(index, absl::StrCat("transfer from GPU ", task.src_gpu, " to itself"));
            }
        }
        if (!std::isfinite(task.bytes) || task.bytes < 0.0) {
            return error(index,
                         absl::StrCat("bytes must be finite and not negative, got ", task.bytes));
        }
        for (int dep : task.deps) {
            if (dep < 0 || dep >= n) {
                return error(index,
                             absl::StrCat("dependency ", dep, " out of range (", n, " tasks)"));
            }
        }
    }

    // Kahn's algorithm; what it cannot order lies on or behind a cycle.
    std::vector<int> waiting(static_cast<size_t>(n));
    std::vector<std::vector<int>> dependents(static_cast<size_t>(n));
    std::vector<int> order;
    for (int index = 0; index < n; ++index) {
        waiting[index] = static_cast<int>(deps[index].size());
        for (int dep : deps[index]) {
            dependents[dep].push_back(index);
        }
        if (waiting[index] == 0) {
            order.push_back(index);
        }
    }
    for (size_t next = 0; next < order.size(); ++next) {
        for (int dependent : dependents[order[next]]) {
            if (--waiting[dependent] == 0) {
                order.push_back(dependent);
            }
        }
    }
    if (static_cast<int>(order.size()) == n) {
        return absl::OkStatus();
    }
    // Walk unordered dependencies from an unordered task until one repeats: that is a cycle.
    int current = 0;
    while (waiting[current] == 0) {
        ++current;
    }
    std::vector<int> position(static_cast<size_t>(n), -1);
    std::vector<int> walk;
    while (position[current] < 0) {
        position[current] = static_cast<int>(walk.size());
        walk.push_back(current);
        for (int dep : deps[current]) {
            if (waiting[dep] > 0) {
                current = dep;
                break;
            }
        }
    }
    std::vector<std::string> cycle;
    for (size_t at = static_cast<size_t>(position[current]); at < walk.size(); ++at) {
        cycle.push_back(task_name(tasks, walk[at]));
    }
    cycle.push_back(task_name(tasks, current));
    return absl::InvalidArgumentError(
        absl::StrCat("dependency cycle: ", absl::StrJoin(cycle, " waits for "), " (",
                     task_name(tasks, current), " can never start)"));
}

// Max-min fair rates of flows over shared resources, by progressive filling: repeatedly take
// the resource with the smallest fair share of its remaining capacity among its unfixed flows,
// fix those flows at that share, and subtract it everywhere they pass.
std::vector<double> max_min_rates(const std::vector<Resource>& resources,
                                  const std::vector<const std::vector<int>*>& flows) {
    const size_t num_flows = flows.size();
    std::vector<double> capacity(resources.size());
    std::vector<int> unfixed_users(resources.size(), 0);
    std::vector<std::vector<int>> users(resources.size());
    for (size_t r = 0; r < resources.size(); ++r) {
        capacity[r] = resources[r].capacity;
    }
    for (size_t flow = 0; flow < num_flows; ++flow) {
        for (int r : *flows[flow]) {
            ++unfixed_users[r];
            users[r].push_back(static_cast<int>(flow));
        }
    }
    std::vector<double> rates(num_flows, 0.0);
    std::vector<bool> fixed(num_flows, false);
    size_t unfixed = num_flows;
    while (unfixed > 0) {
        int bottleneck = -1;
        double share = std::numeric_limits<double>::infinity();
        for (size_t r = 0; r < resources.size(); ++r) {
            if (unfixed_users[r] > 0 && capacity[r] / unfixed_users[r] < share) {
                share = capacity[r] / unfixed_users[r];
                bottleneck = static_cast<int>(r);
            }
        }
        for (int flow : users[bottleneck]) {
            if (fixed[flow]) {
                continue;
            }
            fixed[flow] = true;
            rates[flow] = share;
            --unfixed;
            for (int r : *flows[flow]) {
                capacity[r] = std::max(0.0, capacity[r] - share);
                --unfixed_users[r];
            }
        }
    }
    return rates;
}

} // namespace

namespace {

SimTask make_task(SimTask::Kind kind, int src_gpu, int dst_gpu, double bytes, double duration_s,
                  std::vector<int> deps, std::string label) {
    SimTask task;
    task.kind = kind;
    task.src_gpu = src_gpu;
    task.dst_gpu = dst_gpu;
    task.bytes = bytes;
    task.duration_s = duration_s;
    task.deps = std::move(deps);
    task.label = std::move(label);
    return task;
}

} // namespace

SimTask transfer_task(int src_gpu, int dst_gpu, double bytes, std::vector<int> deps,
                      std::string label) {
    return make_task(SimTask::Kind::transfer, src_gpu, dst_gpu, bytes, 0.0, std::move(deps),
                     std::move(label));
}

SimTask aggregate_task(int gpu, double bytes, std::vector<int> deps, std::string label) {
    return make_task(SimTask::Kind::aggregate, gpu, gpu, bytes, 0.0, std::move(deps),
                     std::move(label));
}

SimTask compute_task(int gpu, double duration_s, std::vector<int> deps, std::string label) {
    return make_task(SimTask::Kind::compute, gpu, gpu, 0.0, duration_s, std::move(deps),
                     std::move(label));
}

SimTask offload_task(int gpu, double bytes, std::vector<int> deps, std::string label) {
    return make_task(SimTask::Kind::offload, gpu, gpu, bytes, 0.0, std::move(deps),
                     std::move(label));
}

namespace {

// One run of the event-driven simulation: the tasks' dependency counters, the flows, latencies
// and compute tasks in progress, and the trace being filled in. Between events every flow moves
// at its max-min fair rate; an event is a flow ending, a latency running out or a compute task
// ending.
class Simulation {
public:
    Simulation(const Topology& topology, const std::vector<SimTask>& tasks,
               const std::vector<std::vector<int>>& deps)
        : topology_(topology), tasks_(tasks), latency_(topology.latency_s()),
          gpus_(topology.num_gpus()), resources_(topology.resources()),
          host_(static_cast<int>(resources_.size())) {
        // The host links, after the topology's resources: only offloads use them.
        for (int gpu = 0; gpu < gpus_; ++gpu) {
            resources_.push_back({absl::StrCat("host(", gpu, ")"), topology.host_bandwidth()});
        }
        const size_t n = tasks.size();
        paths_.resize(n);
        result_.trace.resize(n);
        waiting_.resize(n);
        dependents_.resize(n);
        remaining_.assign(n, 0.0);
        wake_.assign(n, 0.0);
        running_.assign(static_cast<size_t>(gpus_), -1);
        running_end_.assign(static_cast<size_t>(gpus_), 0.0);
        queued_.resize(static_cast<size_t>(gpus_));
        for (int index = 0; index < static_cast<int>(n); ++index) {
            init_task(index, deps[index]);
        }
    }

    SimulationResult run() && {
        while (true) {
            settle();
            if (flowing_.empty() && in_latency_.empty() && busy_gpus_ == 0) {
                break;
            }
            std::vector<const std::vector<int>*> flow_paths;
            flow_paths.reserve(flowing_.size());
            for (int index : flowing_) {
                flow_paths.push_back(&paths_[index]);
            }
            const std::vector<double> rates = max_min_rates(resources_, flow_paths);
            advance_to(next_event(rates), rates);
        }
        for (const TaskTrace& trace : result_.trace) {
            result_.makespan_s = std::max(result_.makespan_s, trace.end);
        }
        return std::move(result_);
    }

private:
    // The task's path and trace entry; ready at once when it has no dependencies.
    void init_task(int index, const std::vector<int>& deps) {
        const SimTask& task = tasks_[index];
        if (task.kind == SimTask::Kind::transfer) {
            paths_[index] = topology_.route(task.src_gpu, task.dst_gpu);
        } else if (task.kind == SimTask::Kind::aggregate) {
            paths_[index] = {topology_.hbm(task.src_gpu)};
        } else if (task.kind == SimTask::Kind::offload) {
            paths_[index] = {host_ + task.src_gpu};
        }
        TaskTrace& trace = result_.trace[index];
        trace.task = index;
        trace.bytes = task.bytes;
        for (int r : paths_[index]) {
            trace.resources.push_back(resources_[r].name);
        }
        waiting_[index] = static_cast<int>(deps.size());
        for (int dep : deps) {
            dependents_[dep].push_back(index);
        }
        if (waiting_[index] == 0) {
            ready_.push_back(index);
        }
    }

    void finish(int index) {
        result_.trace[index].end = now_;
        for (int dependent : dependents_[index]) {
            if (--waiting_[dependent] == 0) {
                ready_.push_back(dependent);
            }
        }
    }

    void begin_flow(int index) {
        if (tasks_[index].bytes == 0.0) {
            finish(index);
        } else {
            remaining_[index] = tasks_[index].bytes;
            flowing_.push_back(index);
        }
    }

    // A transfer's latency is its route's (a cluster's NIC latency between nodes); an
    // offload's the topology's; other tasks have none.
    double latency_of(const SimTask& task) const {
        switch (task.kind) {
        case SimTask::Kind::transfer:
            return topology_.latency_s(task.src_gpu, task.dst_gpu);
        case SimTask::Kind::offload:
            return latency_;
        case SimTask::Kind::aggregate:
        case SimTask::Kind::compute:
            return 0.0;
        }
        return 0.0;
    }

    void start(int index) {
        result_.trace[index].ready = now_;
        result_.trace[index].start = now_;
        if (tasks_[index].kind == SimTask::Kind::compute) {
            queued_[tasks_[index].src_gpu].insert(index);
        } else if (const double latency = latency_of(tasks_[index]); latency > 0.0) {
            wake_[index] = now_ + latency;
            in_latency_.push_back(index);
        } else {
            begin_flow(index);
        }
    }

    // Gives every idle GPU its next queued compute task; whether any started.
    bool start_queued_compute() {
        bool changed = false;
        for (int gpu = 0; gpu < gpus_; ++gpu) {
            if (running_[gpu] >= 0 || queued_[gpu].empty()) {
                continue;
            }
            const int index = *queued_[gpu].begin();
            queued_[gpu].erase(queued_[gpu].begin());
            result_.trace[index].start = now_;
            changed = true;
            if (tasks_[index].duration_s == 0.0) {
                finish(index);
            } else {
                running_[gpu] = index;
                running_end_[gpu] = now_ + tasks_[index].duration_s;
                ++busy_gpus_;
            }
        }
        return changed;
    }

    // Starts every ready task and gives every idle GPU its next compute task, until nothing
    // more can start now (starting a task can finish it — no bytes, no latency, no duration —
    // and make others ready).
    void settle() {
        bool changed = true;
        while (changed) {
            changed = false;
            while (!ready_.empty()) {
                std::vector<int> batch = std::move(ready_);
                ready_.clear();
                for (int index : batch) {
                    start(index);
                }
                changed = true;
            }
            if (start_queued_compute()) {
                changed = true;
            }
        }
    }

    // The time of the next event: a latency running out, a compute task or a flow ending.
    double next_event(const std::vector<double>& rates) const {
        double next = std::numeric_limits<double>::infinity();
        for (int index : in_latency_) {
            next = std::min(next, wake_[index]);
        }
        for (int gpu = 0; gpu < gpus_ && busy_gpus_ > 0; ++gpu) {
            if (running_[gpu] >= 0) {
                next = std::min(next, running_end_[gpu]);
            }
        }
        for (size_t flow = 0; flow < flowing_.size(); ++flow) {
            next = std::min(next, now_ + remaining_[flowing_[flow]] / rates[flow]);
        }
        return next;
    }

    // Moves time to `next_event`: the flows move their bytes, and what ends within
    // kSimultaneous of it finishes (in task order) or, out of latency, begins to flow.
    void advance_to(double next_event, const std::vector<double>& rates) {
        const double horizon = next_event + kSimultaneous * next_event;
        const double elapsed = next_event - now_;

        std::vector<int> finished, still_flowing, woken, still_in_latency;
        for (size_t flow = 0; flow < flowing_.size(); ++flow) {
            const int index = flowing_[flow];
            if (now_ + remaining_[index] / rates[flow] <= horizon) {
                finished.push_back(index);
            } else {
                remaining_[index] -= rates[flow] * elapsed;
                still_flowing.push_back(index);
            }
        }
        for (int index : in_latency_) {
            (wake_[index] <= horizon ? woken : still_in_latency).push_back(index);
        }
        for (int gpu = 0; gpu < gpus_ && busy_gpus_ > 0; ++gpu) {
            if (running_[gpu] >= 0 && running_end_[gpu] <= horizon) {
                finished.push_back(running_[gpu]);
                running_[gpu] = -1;
                --busy_gpus_;
            }
        }
        now_ = next_event;
        flowing_ = std::move(still_flowing);
        in_latency_ = std::move(still_in_latency);
        std::sort(finished.begin(), finished.end());
        for (int index : finished) {
            remaining_[index] = 0.0;
            finish(index);
        }
        std::sort(woken.begin(), woken.end());
        for (int index : woken) {
            begin_flow(index);
        }
    }

    const Topology& topology_;
    const std::vector<SimTask>& tasks_;
    const double latency_;
    const int gpus_;
    // The topology's resources, then one host link per GPU (host_ + gpu).
    std::vector<Resource> resources_;
    const int host_;

    SimulationResult result_;
    std::vector<std::vector<int>> paths_; // the resources of each task's flow
    std::vector<int> waiting_;            // dependencies not yet finished
    std::vector<std::vector<int>> dependents_;
    std::vector<int> ready_;

    double now_ = 0.0;
    std::vector<double> remaining_; // bytes left to flow
    std::vector<double> wake_;      // end of a transfer's latency
    std::vector<int> in_latency_;   // tasks waiting out latency
    std::vector<int> flowing_;      // tasks moving bytes
    // Compute tasks: the one each GPU runs (-1: idle) and its end; the ready ones waiting.
    std::vector<int> running_;
    std::vector<double> running_end_;
    std::vector<std::set<int>> queued_;
    int busy_gpus_ = 0;
};

} // namespace

absl::StatusOr<SimulationResult> simulate(const Topology& topology,
                                          const std::vector<SimTask>& tasks) {
    const std::vector<std::vector<int>> deps = unique_deps(tasks);
    EINSUMMABLE_RETURN_IF_ERROR(validate(topology, tasks, deps));
    return Simulation(topology, tasks, deps).run();
}

} // namespace einsummable::exprog
