#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/simulator.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"

namespace einsummable::physical {

// The whole-plan simulator (docs/simulation.md): one event-driven run of a plan's ExecGraph on a
// topology, every node one task of exprog::simulate, so that transfers of different operators
// that overlap in time share the links.
//
//   - kernel: a compute task on its device taking
//       max(FLOPs / (peak(dtype) · compute_efficiency(c)), bytes / (hbm · memory_efficiency(c)))
//       + launch_overhead
//     (exprog::kernel_seconds with the DeviceModel of the topology; c the operator's
//     kernel_class(); FLOPs from Operator::flops of its function spec, dtype that of its first
//     output, bytes its inputs plus outputs);
//   - aggregate, slice, concat: compute tasks moving their bytes (inputs read plus output
//     written) through HBM at the elementwise class's memory efficiency, plus the launch
//     overhead;
//   - copy: a transfer over the topology's route between the two devices (its latency, then
//     fluid flow, max-min fair with every other transfer in flight);
//   - the delivery of the saved outputs: each block of a saved output (ExecGraph::outputs) is
//     offloaded from the device holding it to the host once its writer is done (an offload
//     task: the latency, then its bytes over the GPU's host link, Topology::host_bandwidth),
//     every device at once, the blocks of one device sharing its link.
// A device runs one compute task at a time, the ready one first in node order; transfers run
// beside compute. Every node waits for its deps (the writers of what it reads and, where the
// memory plan reuses bytes, the earlier users of those bytes). Graph inputs are resident when
// the plan starts (load() is not simulated), as in a measured run; the saved outputs' delivery
// (the reductions of their partial blocks, then the offloads) is simulated unless options say
// otherwise.
struct PlanSimulationOptions {
    // The topology GPU each device of the plan runs on; empty: device d on GPU d.
    std::vector<int> gpus;
    // false: the saved outputs' delivery takes no time — no offloads, and the nodes of their
    // exchanges (the copies and aggregates that reduce blocks several devices wrote) are free —
    // as for outputs left where they were computed (what the paper's measurements are taken
    // to include).
    bool offload_saved_outputs = true;
};

// Time of one device over the simulated run: computing (a compute task running),
// communicating only (a transfer into or out of it in flight, no compute task), idle (the
// rest). The three add up to the predicted time.
struct DeviceTime {
    double compute_s = 0.0;
    double communication_s = 0.0;
    double idle_s = 0.0;
};

// One step of the critical path: a task (a node, or an offload past the nodes) and why it
// started when it did.
struct CriticalStep {
    int node = 0;
    double start = 0.0;
    double end = 0.0;
    // true: it waited for its device (the previous step ran on the same device before it);
    // false: it waited for the previous step's data.
    bool waited_for_device = false;
};

struct PlanSimulation {
    double predicted_s = 0.0;
    // Task n < exec.nodes.size() is ExecGraph node n; the rest (with offload_saved_outputs)
    // are the offloads of the saved outputs' blocks, in ExecGraph::outputs order.
    std::vector<exprog::SimTask> tasks;
    exprog::SimulationResult result;
    std::vector<DeviceTime> devices; // per plan device
    // From a node that starts at time 0 to the last node to finish: each step's start is the
    // previous step's end (data or device), so the durations along it add up to predicted_s.
    std::vector<CriticalStep> critical_path;
    // Per task: the graph operator it belongs to (a kernel's own operator; an exchange node the
    // operator whose input it prepares; "" for the saved outputs' delivery), for colouring.
    std::vector<std::string> node_operator;
    std::vector<int> gpus; // the topology GPU of each plan device
};

// InvalidArgument when the plan has more devices than the topology has GPUs (or
// options.gpus names a GPU out of range, twice, or not one per device), or when a kernel's
// dtype has no peak in the topology (naming the kernel and the key, e.g. peak_bf16).
absl::StatusOr<PlanSimulation> simulate_plan(const ExecGraph& exec,
                                             const exprog::Topology& topology,
                                             const PlanSimulationOptions& options = {});

// A logical plan taken through physical compilation (compile_physical), lowering and the
// simulator: what einsummable-plan --simulate and bench/paper report. Cancelled once
// options.synthesis.cancellation is set (polled by each stage, and between them).
struct SimulatedPlan {
    PhysicalPlan physical;
    ExecGraph exec;
    PlanSimulation simulation;
};
absl::StatusOr<SimulatedPlan> compile_and_simulate(const ir::Graph& graph,
                                                   const logical::LogicalPlan& logical,
                                                   const exprog::Topology& topology,
                                                   const PhysicalOptions& options);

// The predicted time, per-device compute / communication-only / idle, time per operator and
// node kind, and the critical path (consecutive steps of one operator and kind folded into
// one line), as plain text.
std::string explain_simulation(const ExecGraph& exec, const PlanSimulation& simulation);

} // namespace einsummable::physical
