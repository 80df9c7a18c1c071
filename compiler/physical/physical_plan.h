#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/program.h"
#include "compiler/exprog/semantics.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/exprog/topology.h"
#include "compiler/ir/graph.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/synthesis_cache.h"

namespace einsummable::physical {
struct ResidentLayout;
}

namespace einsummable::physical {

// Physical compilation (docs/physical.md; paper 5.1 and 5.3): operators in topological
// order; for every input an operator reads from another operator, an exchange program whose
// atoms are the cells of the overlay grid of the producer's output blocks and the consumer's
// input blocks. docs/physical.md describes the construction.
//
// The preamble of one input: GPUS 0..p-1; one size-1 partition F<k> per function spec k of the
// consumer; IN: every partial copy of every cell where the producer wrote it (atom a<c>_<f>:
// cell c as written by producer function f, at f's device; a cell has several copies exactly
// when the producer aggregates, e.g. a matmul split along its contracted index); OUT: for each
// cell, the ⊕ of all its copies at every partition whose input block contains the cell. The
// body is synthesised in the asked mode; the memberships found for F<k> place the consumer's
// function specs. An operator's first exchange (its largest produced input) chooses the
// placement; its other inputs' programs name the chosen GPUs explicitly. An operator without
// produced inputs takes the identity placement (function k on device k).
//
// Graph inputs have no program: load() writes them straight into the blocks their consumers
// read. Resident inputs (PhysicalOptions::resident, resident_layout.h) are the exception: their
// blocks already live on the devices, so each read gets a program whose IN declares every cell
// at every device holding a resident block that contains it (one atom per cell, no
// aggregation); it counts as a produced input for the placement. A saved output gets one more
// program whose readers are its blocks' holders: each distinct block of the producer's output
// at one device that wrote it — the writer's device that holds the fewest bytes of the output so
// far, the first on a tie — so a block one function spec wrote stays where it is and a block of
// partial results is reduced at one of its writers. The runtime fetches the blocks from there;
// nothing gathers the tensor whole.

// The synthesis defaults of operator exchanges: those of exprog, but whole atoms and no ORDER
// (max_chunks 0). Chunks read and written in place are views (exec_graph.h Buffer::parent), but
// a chunked program still lowers to a copy per chunk and hop and an aggregate per chunk summed,
// each a node the whole-plan simulator charges: with max_chunks 8 the DP plan of chain A on 8
// dgx-v100 GPUs has 12633 nodes (15573 before views) instead of 188 and simulates to 29.0 ms
// (53.1 before views) rather than 24.9 ms (bench/README.md "paper"). PhysicalOptions::
// choose_chunking chunks only the exchanges whose lowering simulates faster, and the pipeline
// keeps such a plan only where the whole plan simulates faster (pipeline::keep_fastest_chunking;
// the time objective's plans get both by default); callers may also turn pipelining on; the
// lowering runs such plans exactly (tests/unit/physical/lowering_test.cc).
exprog::SynthesisOptions default_exchange_synthesis();

struct PhysicalOptions {
    // Mode, seed (mixed per program), iteration budget, pipelining.
    exprog::SynthesisOptions synthesis = default_exchange_synthesis();
    // Shared with other compiles (synthesis_cache.h); null: one for this compile alone, so that
    // its identical exchanges still synthesise once. Not owned.
    SynthesisCache* cache = nullptr;
    // Resident graph inputs (resident_layout.h): the inputs pinned_inputs() gives are read from
    // their resident blocks through an exchange program. Null: none. Not owned.
    const ResidentLayout* resident = nullptr;
    // Per exchange, chunk or not (docs/physical.md "Choosing chunks"): with synthesis.max_chunks
    // > 0, every operator input's exchange is synthesised with whole atoms (max_chunks 0) and,
    // when some step of that program waits on one of its transfers (a relay, a sum of received
    // data: what chunks can overlap), with chunks (synthesis.max_chunks) too, each program
    // priced by what lowering emits for it (lower_exchange) on the whole-plan simulator
    // (exchange_lowered_seconds); the faster is kept (whole atoms on a tie) and its
    // Exchange::simulated_s is that price. Saved outputs keep whole atoms. false: every
    // exchange is synthesised once with synthesis as given.
    bool choose_chunking = false;
};

// One atom of an exchange program: a cell of the tensor as one producer function wrote it.
struct Atom {
    std::string name; // a<cell>_<function>; a<cell> for a resident input
    int cell = 0;
    int producer_function = 0; // -1 for a resident input: the cell of its resident blocks
};

struct Exchange {
    ir::TensorId tensor = 0;
    int input_idx = -1; // the consumer's input it feeds; -1 for a saved output
    std::vector<ir::Box> cells;
    std::vector<Atom> atoms;
    ir::DType dtype = ir::DType::f32; // the tensor's
    // The producer aggregates by log_sum_exp: an aggregate short of its cell's atoms is a
    // partial result with statistics (ir::block_bytes), which IN declares for every atom of a
    // cell of several; the complete aggregate moves without them.
    bool stats = false;
    // The producer's ⊕ reads whole rows (ir::combines_rows: top_k) and a cell has several
    // writers: the program moves whole atoms, never chunks, which could split a row's list.
    bool whole_atoms = false;
    exprog::Program program; // preamble + synthesised body
    exprog::Membership membership;
    double simulated_s = 0.0;
    double naive_simulated_s = 0.0;
    // Set by PhysicalOptions::choose_chunking (0 otherwise; not recorded): what the programs
    // synthesised with whole atoms and with chunks simulate to once lowered
    // (exchange_lowered_seconds; the whole atoms' price twice where chunks were not tried); the
    // kept one's is simulated_s.
    double whole_atoms_lowered_s = 0.0;
    double chunked_lowered_s = 0.0;
};

// The part of an exchange cell that a chunk of it covers (exprog::Chunk: [index/count,
// (index+1)/count) of the block): rows [extent·index/count, extent·(index+1)/count) of the
// cell's *chunk dimension*, its outermost dimension of more than one element. So chunks of one
// count tile the cell, each is one contiguous run of the cell's row-major block (a view of it
// once lowered), a chunk's box contains the boxes of the chunks it contains, and a cell
// thinner than `count` along it has empty chunks (which move and combine nothing).
ir::Box chunk_box(const ir::Box& cell, const exprog::Chunk& chunk);
// The same for the fractions [lo_num/lo_den, hi_num/hi_den) of the cell.
ir::Box fraction_box(const ir::Box& cell, int64_t lo_num, int64_t lo_den, int64_t hi_num,
                     int64_t hi_den);

struct OperatorPlacement {
    ir::NodeId node = 0;
    ir::JoinAggSpec spec;
    std::vector<int> devices; // per function spec
    // Per function spec: its group (logical::OperatorPlan::groups; one device runs a group, and
    // each exchange has one partition F<g> per group g) and its micro-batch, the order the
    // lowering gives its device's work (lower.h order_by_micro_batch). Without micro-batches
    // function k is group k, micro-batch 0.
    std::vector<int> groups;
    std::vector<int> micro_batch;
    std::vector<Exchange> exchanges; // one per input produced by another operator
    int group_count() const;
};

struct PhysicalPlan {
    int devices = 1;
    std::string topology;
    exprog::SynthesisMode mode = exprog::SynthesisMode::optimized;
    std::vector<OperatorPlacement> operators; // by NodeId
    std::vector<Exchange> saved;              // one per saved tensor produced by an operator
    // Bytes every exchange program sends, [src][dst].
    std::vector<std::vector<int64_t>> program_bytes() const;
    // Sum of the programs' simulated times (operators run one after another).
    double simulated_s() const;
};

// Rewrites every exchange program of `plan` (operator inputs and saved outputs) into `chunks`
// chunks with its sends ordered per port (exprog/pipelining.h: split_relays, chunk_actions,
// order_sends): the same meaning, so the plan computes the same thing with chunked, ordered
// copies (tests run chunked plans with it). Simulated times are left as they were. Internal
// when a rewritten program is invalid under its membership (the rewrites keep validity).
absl::Status pipeline_exchanges(PhysicalPlan& plan, const exprog::Topology& topology, int chunks);

// InvalidArgument when the topology has fewer GPUs than the plan's devices, or when synthesis
// fails (naming the operator and input). Cancelled, naming the operator and input, once
// options.synthesis.cancellation is set (polled per exchange and per synthesis candidate).
// With options.choose_chunking and `whole_atoms` not null, *whole_atoms receives the same plan
// with every exchange's whole-atom program (what each chunked one was priced against): the
// plan the whole-plan guard (pipeline, keep_fastest_chunking) compares with, at no synthesis
// of its own.
absl::StatusOr<PhysicalPlan> compile_physical(const ir::Graph& graph,
                                              const logical::LogicalPlan& logical,
                                              const exprog::Topology& topology,
                                              const PhysicalOptions& options,
                                              PhysicalPlan* whole_atoms = nullptr);

// Where an exchange sits in the plan, for the function that gives it a body.
struct ExchangeSite {
    ir::NodeId node = -1; // the consuming operator; -1 for a saved output
    int input_idx = -1;   // the operator's input it feeds; -1 for a saved output
    ir::TensorId tensor = 0;
    std::string what; // "operator 'mm' input 1 ('h')" or "saved output 'y'", for errors
    // The plan so far (every operator before the consumer) and the consumer's spec; null for
    // a saved output. What pricing an exchange by its lowering needs.
    const PhysicalPlan* plan = nullptr;
    const ir::JoinAggSpec* consumer = nullptr;
    // The group of each of the consumer's function specs (OperatorPlacement::groups); null:
    // function k is group k.
    const std::vector<int>* groups = nullptr;
};

// The time the whole-plan simulator (plan_simulation.h) takes for the nodes lower() emits for
// one operator input's exchange, alone on a quiet machine: its copies, its aggregates (one per
// chunk summed) and the slices and concats that views do not replace, from the producer's
// outputs to the consumer's input blocks (lower_exchange). The consumer's devices are those
// the exchange's membership (or its partitions' members) gives. InvalidArgument when the
// simulator refuses the graph.
absl::StatusOr<double> exchange_lowered_seconds(const ir::Graph& graph, const ExchangeSite& site,
                                                const Exchange& exchange,
                                                const exprog::Topology& topology,
                                                const ResidentLayout* resident);

// Gives an exchange whose preamble is built (tensor, input_idx, cells, atoms, and a program
// without actions) its body: the program with its actions, the membership of its size-declared
// partitions and its times. compile_physical synthesises it; restore_plan (plan_record.h)
// takes a recorded one and checks it against the preamble.
using ExchangeBodyFn = absl::FunctionRef<absl::Status(const ExchangeSite&, Exchange&)>;

// The construction compile_physical follows (above), with every body given by `body`, called
// once per exchange: operators in NodeId order, each one's produced inputs largest first, then
// the saved outputs in graph.saved() order. An operator's placement is the membership its
// first exchange's body gives; InvalidArgument naming the operator when that does not put
// every group of function specs (micro-batches: logical::OperatorPlan::groups) on its own
// device of 0..p-1.
absl::StatusOr<PhysicalPlan> build_physical(const ir::Graph& graph,
                                            const logical::LogicalPlan& logical,
                                            const exprog::Topology& topology,
                                            exprog::SynthesisMode mode, ExchangeBodyFn body,
                                            const ResidentLayout* resident = nullptr);

// On a cluster topology (several nodes, exprog::Topology::nodes): the bytes the plan's exchange
// programs send between GPUs of different nodes, and the least any programs for the same
// exchanges could send. The least counts, per exchange and per node holding a GPU that an OUT
// names, the block of every OUT aggregate with an atom on no GPU of that node: such a block must
// enter the node at least once, whole (a partial sum is as large as the block). Both are 0 on one
// node.
struct NodeCrossing {
    double sent_bytes = 0.0;
    double least_bytes = 0.0;
};
NodeCrossing node_crossing(const PhysicalPlan& plan, const exprog::Topology& topology);

// Every operator's exchange programs, printed with their simulated times.
std::string explain_exchanges(const ir::Graph& graph, const PhysicalPlan& plan);

} // namespace einsummable::physical
