#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/simulator.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// The simulated run of a valid program on a topology (paper section 5.3): every action instance
// becomes a local aggregation at its source (unless the aggregate is already there whole) —
// reading its disjoint parts and writing the result at HBM bandwidth — followed by one transfer
// per destination. A task depends on the tasks that first materialised what it reads. Instances
// are taken in the order the closure fires them.
struct ProgramSimulation {
    std::vector<SimTask> tasks;
    std::vector<int> task_action; // for every task, the Program::actions index it comes from
    SimulationResult result;
};

// The size of an aggregate: the largest of its atoms' IN sizes (the atoms of one aggregate are
// partial values of the same block, so they have one size).
double aggregate_bytes(const Program& program, const Aggregate& aggregate);

// InvalidArgument when the program is not valid under `membership` (check_with_membership's
// error), or when it uses a GPU the topology does not have.
absl::StatusOr<ProgramSimulation>
simulate_program(const Program& program, const Membership& membership, const Topology& topology);

} // namespace einsummable::exprog
