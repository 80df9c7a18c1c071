#include "compiler/physical/plan_simulation.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/logical/time_model.h"
#include "compiler/physical/lower.h"
#include "compiler/support/status_macros.h"

namespace einsummable::physical {
namespace {

int64_t bytes_of(const ExecGraph& exec, const std::vector<BufferId>& buffers) {
    int64_t bytes = 0;
    for (BufferId id : buffers) {
        bytes += exec.buffers[id].bytes();
    }
    return bytes;
}

std::string node_label(const ExecGraph& exec, const ExecNode& node) {
    if (node.kind == NodeKind::kernel) {
        return node.label;
    }
    const Buffer& out = exec.buffers[node.outputs[0]];
    if (node.kind == NodeKind::copy) {
        return absl::StrCat("copy ", out.tensor, " ", exec.buffers[node.inputs[0]].device, "->",
                            node.device);
    }
    return absl::StrCat(node_kind_name(node.kind), " ", out.tensor, " on ", node.device);
}

// Total length of the union of intervals [a, b).
double union_length(std::vector<std::pair<double, double>> intervals) {
    std::sort(intervals.begin(), intervals.end());
    double total = 0.0, begin = 0.0, end = -1.0;
    for (const auto& [a, b] : intervals) {
        if (a > end) {
            total += std::max(0.0, end - begin);
            begin = a;
            end = b;
        } else {
            end = std::max(end, b);
        }
    }
    return total + std::max(0.0, end - begin);
}

// Length of the union of `intervals` outside the disjoint `covered` intervals.
double uncovered_length(std::vector<std::pair<double, double>> intervals,
                        const std::vector<std::pair<double, double>>& covered) {
    std::vector<std::pair<double, double>> both = intervals;
    both.insert(both.end(), covered.begin(), covered.end());
    return union_length(std::move(both)) - union_length(covered);
}

// The topology GPU of each plan device: options.gpus, checked, or device d on GPU d.
absl::StatusOr<std::vector<int>> gpus_of_devices(const ExecGraph& exec,
                                                 const exprog::Topology& topology,
                                                 const PlanSimulationOptions& options) {
    std::vector<int> gpus;
    if (options.gpus.empty()) {
        if (exec.devices > topology.num_gpus()) {
            return absl::InvalidArgumentError(absl::StrCat("the plan has ", exec.devices,
                                                           " devices; topology '", topology.name(),
                                                           "' has ", topology.num_gpus(), " GPUs"));
        }
        for (int d = 0; d < exec.devices; ++d) {
            gpus.push_back(d);
        }
        return gpus;
    }
    if (static_cast<int>(options.gpus.size()) != exec.devices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "gpus names ", options.gpus.size(), " GPUs; the plan has ", exec.devices, " devices"));
    }
    std::set<int> seen;
    for (int gpu : options.gpus) {
        if (gpu < 0 || gpu >= topology.num_gpus()) {
            return absl::InvalidArgumentError(absl::StrCat("GPU ", gpu, " out of range (topology '",
                                                           topology.name(), "' has ",
                                                           topology.num_gpus(), " GPUs)"));
        }
        if (!seen.insert(gpu).second) {
            return absl::InvalidArgumentError(absl::StrCat("GPU ", gpu, " named twice"));
        }
    }
    return options.gpus;
}

// The operator of every node: a kernel's own; an exchange node's is its first reader's (readers
// come later; a node writing a view is read through the view or its root, so both count);
// "" for a node no kernel reads from (the saved outputs' gathering).
std::vector<std::string> node_operators(const ExecGraph& exec) {
    const int n = static_cast<int>(exec.nodes.size());
    std::vector<int> first_reader(exec.buffers.size(), -1);
    std::vector<std::string> node_operator(n, "");
    for (int index = n - 1; index >= 0; --index) {
        const ExecNode& node = exec.nodes[index];
        if (node.kind == NodeKind::kernel) {
            node_operator[index] = node.label.substr(0, node.label.rfind('#'));
        } else {
            int reader = -1;
            for (BufferId written : node.outputs) {
                for (BufferId out : {written, exec.view_root(written)}) {
                    if (first_reader[out] >= 0 && (reader < 0 || first_reader[out] < reader)) {
                        reader = first_reader[out];
                    }
                }
            }
            if (reader >= 0) {
                node_operator[index] = node_operator[reader];
            }
        }
        for (BufferId in : node.inputs) {
            first_reader[in] = index;
            first_reader[exec.view_root(in)] = index;
        }
    }
    return node_operator;
}

// The simulator task of node `index` (docs/simulation.md): a copy a transfer, everything else a
// compute task on its device (none of the saved outputs' delivery when the options leave it out).
absl::StatusOr<exprog::SimTask> task_of_node(const ExecGraph& exec, int index,
                                             const exprog::Topology& topology,
                                             const PlanSimulationOptions& options,
                                             const PlanSimulation& sim) {
    const ExecNode& node = exec.nodes[index];
    if (node.kind == NodeKind::send || node.kind == NodeKind::recv) {
        return absl::InvalidArgumentError(
            absl::StrCat("node ", index, " is a ", node_kind_name(node.kind),
                         ": the whole-plan simulation takes a whole plan, not a rank's part"));
    }
    const int gpu = sim.gpus[node.device];
    std::string label = node_label(exec, node);
    if (!options.offload_saved_outputs && node.kind != NodeKind::kernel &&
        sim.node_operator[index].empty()) {
        // The saved outputs' delivery, left out: it takes no time.
        return exprog::compute_task(gpu, 0.0, node.deps, std::move(label));
    }
    if (node.kind == NodeKind::copy) {
        const int src = sim.gpus[exec.buffers[node.inputs[0]].device];
        // Plan devices map to distinct GPUs, so a copy always crosses between two.
        const double moved = static_cast<double>(exec.buffers[node.outputs[0]].bytes());
        return exprog::transfer_task(src, gpu, moved, node.deps, std::move(label));
    }
    const exprog::DeviceModel& device = topology.device();
    // What the node reads and writes: its buffers, or for an operator's kernel what the operator
    // says it reads of its inputs (embedding: the rows its ids select).
    double bytes = static_cast<double>(bytes_of(exec, node.outputs));
    if (node.kind == NodeKind::kernel && node.op != nullptr) {
        for (int i = 0; i < node.op->num_inputs(); ++i) {
            bytes += node.op->input_bytes_read(node.spec, i);
        }
    } else {
        bytes += static_cast<double>(bytes_of(exec, node.inputs));
    }
    double peak = 0.0;
    double flops = 0.0;
    // Data movement (aggregations, slices, local copies) runs as memory-bound element-wise
    // kernels; a kernel takes its operator's class.
    exprog::KernelClass kernel_class = exprog::KernelClass::elementwise;
    if (node.kind == NodeKind::kernel) {
        kernel_class = node.op != nullptr ? node.op->kernel_class() : exprog::KernelClass::other;
        const ir::DType dtype = exec.buffers[node.outputs[0]].dtype;
        const logical::PeakFlops dtype_peak = logical::peak_flops(device, dtype);
        peak = dtype_peak.flops_per_s;
        flops = node.op != nullptr ? node.op->flops(node.spec) : 0.0;
        if (flops > 0.0 && !(peak > 0.0)) {
            return absl::InvalidArgumentError(
                absl::StrCat("kernel '", node.label, "' is ", ir::dtype_name(dtype),
                             ", but topology '", topology.name(), "' gives no ", dtype_peak.key,
                             " (docs/topologies.md \"Devices\")"));
        }
    }
    const double duration =
        exprog::kernel_seconds(device, kernel_class, topology.hbm_bandwidth(), peak, flops, bytes);
    exprog::SimTask task = exprog::compute_task(gpu, duration, node.deps, std::move(label));
    task.bytes = bytes;
    return task;
}

// The offload of every block of every saved output to the host, from the device holding it once
// its writer (if any: a saved input's block is there from the start) is done.
std::vector<exprog::SimTask> offload_tasks(const ExecGraph& exec, const PlanSimulation& sim) {
    std::vector<int> writer(exec.buffers.size(), -1);
    for (int index = 0; index < static_cast<int>(exec.nodes.size()); ++index) {
        for (BufferId out : exec.nodes[index].outputs) {
            writer[out] = index;
        }
    }
    std::vector<exprog::SimTask> tasks;
    for (const auto& [name, blocks] : exec.outputs) {
        for (BufferId id : blocks) {
            const Buffer& buffer = exec.buffers[id];
            std::vector<int> deps;
            if (writer[id] >= 0) {
                deps.push_back(writer[id]);
            }
            tasks.push_back(exprog::offload_task(
                sim.gpus[buffer.device], static_cast<double>(buffer.bytes()), std::move(deps),
                absl::StrCat("offload ", name, buffer.box.to_string(), " from ", buffer.device)));
        }
    }
    return tasks;
}

// Per plan device: computing, communicating only, idle over the simulated run.
std::vector<DeviceTime> device_times(const ExecGraph& exec, const PlanSimulation& sim) {
    std::vector<std::vector<std::pair<double, double>>> compute(exec.devices),
        transfers(exec.devices);
    std::map<int, int> device_of_gpu;
    for (int d = 0; d < exec.devices; ++d) {
        device_of_gpu[sim.gpus[d]] = d;
    }
    for (size_t index = 0; index < sim.tasks.size(); ++index) {
        const exprog::SimTask& task = sim.tasks[index];
        const exprog::TaskTrace& trace = sim.result.trace[index];
        if (task.kind == exprog::SimTask::Kind::compute) {
            compute[device_of_gpu[task.src_gpu]].emplace_back(trace.start, trace.end);
        } else {
            transfers[device_of_gpu[task.src_gpu]].emplace_back(trace.start, trace.end);
            if (task.dst_gpu != task.src_gpu) { // an offload's is the host
                transfers[device_of_gpu[task.dst_gpu]].emplace_back(trace.start, trace.end);
            }
        }
    }
    std::vector<DeviceTime> times;
    for (int d = 0; d < exec.devices; ++d) {
        DeviceTime time;
        time.compute_s = union_length(compute[d]);
        time.communication_s = uncovered_length(transfers[d], compute[d]);
        time.idle_s = std::max(0.0, sim.predicted_s - time.compute_s - time.communication_s);
        times.push_back(time);
    }
    return times;
}

// Per task: the compute task that ran before it on its GPU (-1: none, or not a compute task).
std::vector<int> previous_on_gpu(const PlanSimulation& sim) {
    const int n = static_cast<int>(sim.tasks.size());
    std::vector<int> previous(n, -1);
    std::map<int, std::vector<int>> by_gpu;
    for (int index = 0; index < n; ++index) {
        if (sim.tasks[index].kind == exprog::SimTask::Kind::compute) {
            by_gpu[sim.tasks[index].src_gpu].push_back(index);
        }
    }
    for (auto& [gpu, indices] : by_gpu) {
        std::stable_sort(indices.begin(), indices.end(), [&](int a, int b) {
            return sim.result.trace[a].start < sim.result.trace[b].start;
        });
        for (size_t at = 1; at < indices.size(); ++at) {
            previous[indices[at]] = indices[at - 1];
        }
    }
    return previous;
}

// The critical path, back from the last node to finish: at each step the previous compute task
// on its GPU when it waited for the GPU, else the dependency that finished last.
std::vector<CriticalStep> critical_path(const ExecGraph& exec, const PlanSimulation& sim) {
    const int n = static_cast<int>(sim.tasks.size());
    std::vector<CriticalStep> path;
    if (n == 0) {
        return path;
    }
    const std::vector<int> previous = previous_on_gpu(sim);
    int current = 0;
    for (int index = 1; index < n; ++index) {
        if (sim.result.trace[index].end >= sim.result.trace[current].end) {
            current = index;
        }
    }
    const double eps = 1e-12 * std::max(1.0, sim.predicted_s);
    while (current >= 0) {
        const exprog::TaskTrace& trace = sim.result.trace[current];
        CriticalStep step{current, trace.start, trace.end, false};
        int next = -1;
        if (trace.start > trace.ready + eps && previous[current] >= 0) {
            step.waited_for_device = true;
            next = previous[current];
        } else {
            for (int dep : sim.tasks[current].deps) {
                if (next < 0 || sim.result.trace[dep].end >= sim.result.trace[next].end) {
                    next = dep;
                }
            }
        }
        path.push_back(step);
        current = next;
    }
    std::reverse(path.begin(), path.end());
    return path;
}

} // namespace

absl::StatusOr<PlanSimulation> simulate_plan(const ExecGraph& exec,
                                             const exprog::Topology& topology,
                                             const PlanSimulationOptions& options) {
    PlanSimulation sim;
    EINSUMMABLE_ASSIGN_OR_RETURN(sim.gpus, gpus_of_devices(exec, topology, options));
    sim.node_operator = node_operators(exec);
    const int n = static_cast<int>(exec.nodes.size());
    sim.tasks.reserve(n);
    for (int index = 0; index < n; ++index) {
        EINSUMMABLE_ASSIGN_OR_RETURN(exprog::SimTask task,
                                     task_of_node(exec, index, topology, options, sim));
        sim.tasks.push_back(std::move(task));
    }
    if (options.offload_saved_outputs) {
        for (exprog::SimTask& task : offload_tasks(exec, sim)) {
            sim.tasks.push_back(std::move(task));
            sim.node_operator.emplace_back();
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(sim.result, exprog::simulate(topology, sim.tasks));
    sim.predicted_s = sim.result.makespan_s;
    sim.devices = device_times(exec, sim);
    sim.critical_path = critical_path(exec, sim);
    return sim;
}

absl::StatusOr<SimulatedPlan> compile_and_simulate(const ir::Graph& graph,
                                                   const logical::LogicalPlan& logical,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& options) {
    EINSUMMABLE_ASSIGN_OR_RETURN(PhysicalPlan physical,
                                 compile_physical(graph, logical, topology, options));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        ExecGraph exec, lower(graph, physical, options.resident, options.synthesis.cancellation));
    EINSUMMABLE_RETURN_IF_ERROR(
        support::check_cancelled(options.synthesis.cancellation, "the plan's simulation"));
    EINSUMMABLE_ASSIGN_OR_RETURN(PlanSimulation simulation, simulate_plan(exec, topology));
    return SimulatedPlan{std::move(physical), std::move(exec), std::move(simulation)};
}

std::string explain_simulation(const ExecGraph& exec, const PlanSimulation& sim) {
    auto ms = [](double seconds) { return absl::StrFormat("%.3f", seconds * 1e3); };
    auto pct = [&](double part) {
        return sim.predicted_s > 0.0 ? absl::StrFormat("%.1f%%", 100.0 * part / sim.predicted_s)
                                     : std::string("-");
    };
    std::string text = absl::StrCat("predicted time: ", ms(sim.predicted_s), " ms (simulated)\n");
    absl::StrAppend(&text, "device  gpu  compute ms       communication-only ms  idle ms\n");
    for (size_t d = 0; d < sim.devices.size(); ++d) {
        const DeviceTime& t = sim.devices[d];
        absl::StrAppend(&text, absl::StrFormat("%6d  %3d  %9s %6s  %9s %6s         %9s %6s\n", d,
                                               sim.gpus[d], ms(t.compute_s), pct(t.compute_s),
                                               ms(t.communication_s), pct(t.communication_s),
                                               ms(t.idle_s), pct(t.idle_s)));
    }

    // A task past the nodes is an offload of a saved output's block.
    const size_t nodes = exec.nodes.size();
    auto is_kernel = [&](size_t index) {
        return index < nodes && exec.nodes[index].kind == NodeKind::kernel;
    };
    auto kind_name = [&](size_t index) {
        return index < nodes ? std::string(node_kind_name(exec.nodes[index].kind))
                             : std::string("offload");
    };
    // Busy time per operator, summed over devices: kernels and exchange work separately.
    std::map<std::string, std::pair<double, double>> per_operator; // kernel s, exchange s
    for (size_t index = 0; index < sim.tasks.size(); ++index) {
        const exprog::TaskTrace& trace = sim.result.trace[index];
        auto& entry = per_operator[sim.node_operator[index].empty() ? "(saved outputs)"
                                                                    : sim.node_operator[index]];
        (is_kernel(index) ? entry.first : entry.second) += trace.end - trace.start;
    }
    absl::StrAppend(&text, "operator busy time, summed over devices (ms): kernels, exchange\n");
    for (const auto& [name, times] : per_operator) {
        absl::StrAppend(
            &text, absl::StrFormat("  %-24s %10s %10s\n", name, ms(times.first), ms(times.second)));
    }

    // Kernels one per line; a run of exchange nodes (slice, copy, aggregate, concat) of one
    // operator, or of the saved outputs' delivery (with its offloads), folded into one line with
    // its counts by kind.
    absl::StrAppend(&text, "critical path (", sim.critical_path.size(), " nodes):\n");
    for (size_t at = 0; at < sim.critical_path.size();) {
        const CriticalStep& first = sim.critical_path[at];
        const std::string& op = sim.node_operator[first.node];
        size_t last = at;
        std::map<std::string, int> kinds;
        if (!is_kernel(first.node)) {
            while (last + 1 < sim.critical_path.size() &&
                   !is_kernel(sim.critical_path[last + 1].node) &&
                   sim.node_operator[sim.critical_path[last + 1].node] == op) {
                ++last;
            }
            for (size_t step = at; step <= last; ++step) {
                ++kinds[kind_name(sim.critical_path[step].node)];
            }
        }
        std::string what = sim.tasks[first.node].label;
        if (last > at) {
            std::vector<std::string> counts;
            for (const auto& [kind, count] : kinds) {
                counts.push_back(absl::StrCat(count, " ", kind));
            }
            what = absl::StrCat("exchange for ", op.empty() ? "(saved outputs)" : op, ": ",
                                absl::StrJoin(counts, ", "));
        }
        absl::StrAppend(&text,
                        absl::StrFormat("  %10s .. %10s ms  %s%s\n", ms(first.start),
                                        ms(sim.critical_path[last].end), what,
                                        first.waited_for_device ? "  (after its device)" : ""));
        at = last + 1;
    }
    return text;
}

} // namespace einsummable::physical
