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
// An instance whose chunk is not yet at its source (whole, or inside a larger chunk there) is
// one `form` step (combining disjoint parts present there), then one `send` per destination
// other than the source. Both the simulator and the physical lowering (compiler/physical)
// walk these steps.
struct ProgramStep {
    enum class Kind { form, send };
    Kind kind = Kind::form;
    Aggregate aggregate;
    Chunk chunk;         // the chunk formed or sent
    int gpu = 0;         // form: where it is formed; send: the source
    int destination = 0; // send only
    // form: the disjoint facts at `gpu` it combines (see can_form; each fact's chunk contains
    // `chunk`, so a part may be read as a slice of a larger chunk), each with the step that
    // first put it there (-1: an IN declaration).
    std::vector<Fact> parts;
    std::vector<int> part_steps;
    // send: the fact at the source it reads (`aggregate` in `chunk` or in a larger chunk
    // containing it) and the step that put it there (-1: an IN declaration).
    Chunk source_chunk;
    int after = -1;
    // ORDER: steps that must finish before this one starts — the departures (first-hop sends,
    // or the form step of a local aggregation) of every action its action is ordered after.
    // Set on an instance's first-hop sends; on its form step only when it sends nothing (a
    // local aggregation). A form step that feeds sends is not held back: it runs once its
    // parts are there, overlapping the sends ahead of it.
    std::vector<int> order_after;
    int action_idx = 0;
};

// Precondition: the program is valid under `membership` (check_with_membership).
std::vector<ProgramStep> program_steps(const Program& program, const Membership& membership);

// The simulated run of a valid program on a topology (paper section 5.3): every action instance
// becomes a local aggregation at its source (unless its chunk is already there) — reading its
// disjoint parts and writing the result at HBM bandwidth — followed by one transfer per
// destination, of the chunk's bytes. A task depends on the tasks that first materialised what
// it reads and on its ORDER predecessors' departures. Instances are taken in the order the
// closure fires them.
struct ProgramSimulation {
    std::vector<SimTask> tasks;   // one per step of program_steps
    std::vector<int> task_action; // for every task, the Program::actions index it comes from
    SimulationResult result;
};

// The size of an aggregate: the largest of its atoms' IN sizes (the atoms of one aggregate are
// partial values of the same block, so they have one size); of a chunk, that over its count.
double aggregate_bytes(const Program& program, const Aggregate& aggregate);
double chunk_bytes(const Program& program, const Aggregate& aggregate, const Chunk& chunk);

// InvalidArgument when the program is not valid under `membership` (check_with_membership's
// error), or when it uses a GPU the topology does not have.
absl::StatusOr<ProgramSimulation>
simulate_program(const Program& program, const Membership& membership, const Topology& topology);

} // namespace einsummable::exprog
