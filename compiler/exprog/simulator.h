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
struct SimTask {
    enum class Kind { transfer, aggregate };
    Kind kind = Kind::transfer;
    int src_gpu = 0; // the source of a transfer; the GPU of an aggregate
    int dst_gpu = 0; // transfer only
    double bytes = 0.0;
    std::vector<int> deps; // indices of tasks that must finish first
    std::string label;     // names the task in errors and traces
};

SimTask transfer_task(int src_gpu, int dst_gpu, double bytes, std::vector<int> deps = {},
                      std::string label = "");
SimTask aggregate_task(int gpu, double bytes, std::vector<int> deps = {}, std::string label = "");

struct TaskTrace {
    int task = 0;
    double start = 0.0; // when the dependencies were met (a transfer's latency follows)
    double end = 0.0;   // when the last byte arrived
    double bytes = 0.0;
    std::vector<std::string> resources; // names of the resources the task's flow used
};

struct SimulationResult {
    double makespan_s = 0.0;      // the latest end; 0 for no tasks
    std::vector<TaskTrace> trace; // one per task, in task order
};

// InvalidArgument naming the task for: a GPU out of range, src == dst for a transfer, negative
// or non-finite bytes, a dependency out of range, a dependency cycle.
absl::StatusOr<SimulationResult> simulate(const Topology& topology,
                                          const std::vector<SimTask>& tasks);

} // namespace einsummable::exprog
