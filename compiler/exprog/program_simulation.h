#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/simulator.h"
#include "compiler/exprog/topology.h"

namespace einsummable::exprog {

// A valid program as a sequence of primitive steps, the order in which its closure fires them
// (instances in firing rounds; within a round, every instance sees the state from before it).
// An instance whose aggregate is not yet at its source is one `form` step (combining disjoint
// parts present there), then one `send` per destination other than the source. Both the
// simulator and the physical lowering (compiler/physical) walk these steps.
struct ProgramStep {
    enum class Kind { form, send };
    Kind kind = Kind::form;
    Aggregate aggregate;
    int gpu = 0;         // form: where it is formed; send: the source
    int destination = 0; // send only
    // form: the disjoint aggregates at `gpu` it combines (fewest parts; see can_form), each
    // with the step that first put it there (-1: an IN declaration).
    std::vector<Aggregate> parts;
    std::vector<int> part_steps;
    // send: the step that put the aggregate at the source (-1: an IN declaration).
    int after = -1;
    int action_idx = 0;
};

// Precondition: the program is valid under `membership` (check_with_membership).
std::vector<ProgramStep> program_steps(const Program& program, const Membership& membership);

// The simulated run of a valid program on a topology (paper section 5.3): every action instance
// becomes a local aggregation at its source (unless the aggregate is already there whole) —
// reading its disjoint parts and writing the result at HBM bandwidth — followed by one transfer
// per destination. A task depends on the tasks that first materialised what it reads. Instances
// are taken in the order the closure fires them.
struct ProgramSimulation {
    std::vector<SimTask> tasks;   // one per step of program_steps
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
