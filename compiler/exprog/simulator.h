#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// An event-driven fluid-flow simulator over a DAG of tasks on a Topology (docs/topologies.md,
// "The simulator"). It knows nothing of exchange programs: a caller maps each arrow onto
// transfer and aggregate tasks.
//
// A task starts when all its dependencies have finished. A transfer first waits the
// topology's latency (using no resource), then flows its bytes through route(src, dst); an
// aggregate flows its bytes (the caller passes bytes read + written) through hbm(gpu).
// Concurrent flows share every resource max-min fairly (progressive filling); each flow's rate
// is the minimum over its resources. Rates are recomputed at every flow completion and latency
// expiry. A multicast to k targets is k transfers from one source; they share egress(src).
//
// An offload (the whole-plan simulator's delivery of saved outputs) copies bytes from a GPU to
// the host: it waits the topology's latency, then flows through host(gpu), a resource of the
// GPU's host link (Topology::host_bandwidth) that only offloads use.
//
// A compute task (the whole-plan simulator's kernels, compiler/physical/plan_simulation.h)
// takes a fixed duration on its GPU and uses no resource; a GPU runs one compute task at a
// time, and when it is free it starts the ready one with the smallest index. Transfers and
// aggregates run beside compute tasks.
struct SimTask {
    enum class Kind { transfer, aggregate, compute, offload };
    Kind kind = Kind::transfer;
    int src_gpu = 0;         // the source of a transfer or offload; the GPU of the others
    int dst_gpu = 0;         // transfer only
    double bytes = 0.0;      // transfer and aggregate; informative for compute
    double duration_s = 0.0; // compute only
    std::vector<int> deps;   // indices of tasks that must finish first
    std::string label;       // names the task in errors and traces
};

SimTask transfer_task(int src_gpu, int dst_gpu, double bytes, std::vector<int> deps = {},
                      std::string label = "");
SimTask aggregate_task(int gpu, double bytes, std::vector<int> deps = {}, std::string label = "");
SimTask compute_task(int gpu, double duration_s, std::vector<int> deps = {},
                     std::string label = "");
SimTask offload_task(int gpu, double bytes, std::vector<int> deps = {}, std::string label = "");

struct TaskTrace {
    int task = 0;
    double ready = 0.0; // when the dependencies were met
    // When it started: `ready` for transfers and offloads (whose latency follows) and
    // aggregates; for a
    // compute task, when its GPU took it (later than `ready` while the GPU was busy).
    double start = 0.0;
    double end = 0.0; // when the last byte arrived
    double bytes = 0.0;
    std::vector<std::string> resources; // names of the resources the task's flow used
};

struct SimulationResult {
    double makespan_s = 0.0;      // the latest end; 0 for no tasks
    std::vector<TaskTrace> trace; // one per task, in task order
};

// InvalidArgument naming the task for: a GPU out of range, src == dst for a transfer, negative
// or non-finite bytes or duration, a dependency out of range, a dependency cycle.
absl::StatusOr<SimulationResult> simulate(const Topology& topology,
                                          const std::vector<SimTask>& tasks);

} // namespace einsummable::exprog
