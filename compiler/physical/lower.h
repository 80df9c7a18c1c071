#pragma once

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "compiler/physical/exec_graph.h"
#include "compiler/physical/physical_plan.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/support/cancellation.h"

namespace einsummable::physical {

// Lowers a physical plan to an ExecGraph (docs/physical.md "Lowering"), operators in NodeId order:
//   - graph inputs: one persistent buffer per distinct (block, device) a consumer's function
//     spec reads, filled by load(); for a tensor `resident` holds (resident_layout.h, same type,
//     same device count), the block is a resident buffer (Buffer::resident, at the layout's
//     offset) — the plan that defined the layout reads exactly its blocks, and a plan pinned
//     to it reads them through the tensor's exchange programs, whose IN atoms are cells sliced
//     from the resident block at the atom's device;
//   - every exchange program's steps (exprog::program_steps) in order: an IN atom is its cell
//     sliced from the producer's kernel output (the output itself when the cell is the whole
//     block); a form step is an aggregate node; a send step is a copy node;
//   - each function spec's input block is the concat of the cells it covers at its device (the
//     cell's buffer itself when it is the whole block); then one kernel node per function spec;
//   - a saved output's exchange program (which leaves each of its blocks at one device that
//     wrote it, aggregated there when several did) is lowered like the others; the buffer of
//     each block at its holder becomes persistent — a kernel's output itself where one function
//     spec wrote the block — and ExecGraph::outputs lists them. Nothing gathers it whole.
// Then use_views turns the contiguous slices and in-place concats of chunks (pipelined
// exchanges: a chunk read out of a larger fact, a cell stitched from chunks) into views, and
// plan_memory assigns offsets. Buffers and nodes are created only when used, so an atom
// no step reads is never sliced. Cancelled once `cancellation` (polled per operator, then by
// plan_memory; null: never) is set.
// `views` false leaves every slice and concat a node (for comparisons: node counts, tests).
absl::StatusOr<ExecGraph> lower(const ir::Graph& graph, const PhysicalPlan& plan,
                                const ResidentLayout* resident = nullptr,
                                const support::Cancellation* cancellation = nullptr,
                                bool views = true);

// What lower() emits for one operator input's exchange alone (an exchange whose
// input_idx >= 0), for pricing it by the whole-plan simulator's rules (compile_physical's
// choice of chunking): the producer's kernel outputs — or the resident blocks — as buffers no
// node writes, the program's steps, each function spec k's input block assembled at devices[k],
// and views as use_views makes them; no memory plan. `plan` holds the producer's placement
// (the operators before the consumer).
ExecGraph lower_exchange(const ir::Graph& graph, const PhysicalPlan& plan, const Exchange& exchange,
                         const ir::JoinAggSpec& consumer, const std::vector<int>& devices,
                         const ResidentLayout* resident = nullptr);

// Reorders the nodes of a graph without a memory plan so that, among the nodes whose deps are
// done, the one of the least (batch[node], index) comes first (Kahn's algorithm), deps
// renumbered. lower() passes each node's micro-batch (physical_plan.h OperatorPlacement::
// micro_batch: a kernel's and its input assembly's are its function spec's; an exchange's
// transfers and aggregates take the latest of their deps'), so a device that runs its nodes in
// order — the backends' streams, the whole-plan simulator — finishes the first micro-batch of every
// operator before the second of any, and a saved output's first blocks leave while the rest is
// computed. With every batch 0 the order is unchanged.
void order_by_micro_batch(ExecGraph& graph, const std::vector<int>& batch);

// Buffer views instead of data movement (Buffer::parent), over a graph without a memory plan:
//   - a slice whose output is one contiguous run of its input (and carries no statistics)
//     becomes a view of its input: no node;
//   - a concat into a transient buffer whose every input is a transient buffer without statistics,
//   written by one node
//     (which reads nothing of the output), read by no other concat, and one contiguous run of
//     the output has its inputs made views of its output: each writer writes in place (a copy
//     into a sub-range, an aggregate or kernel into its part) and the concat disappears.
// Strided slices and concats stay nodes. The nodes that waited for a removed node wait for what
// it waited for; node order is kept. `candidates` (per node; null: every node) limits which
// slices and concats may go: lower() passes those of chunks only. Applied to every slice and
// concat, views made plans of whole atoms slower as often as faster in the whole-plan
// simulator (a root lives from its first part's writer, every writer waits for the users of
// the bytes it reuses: the LLaMA block at 128K tokens on 16 devices went 26.9 -> 45.6 ms), so
// plans without chunks lower as before.
void use_views(ExecGraph& graph, const std::vector<bool>* candidates = nullptr);

// The static memory plan: per device, persistent buffers first (never reused), then every
// other buffer in the order of its first writer, at the lowest 64-byte-aligned offset free from its
// writer to its last reader (first fit over the live buffers). Where a buffer takes bytes an
// earlier buffer used, its writers gain deps on that buffer's writers and readers — the latest
// such users only, the earlier ones it waits for through them — so any execution order that
// respects deps is safe. A view takes no bytes: its root (ExecGraph::view_root) lives from the
// first node that writes it or any of its views to the last that uses one, and every such writer
// counts as the root's writer. Sets Buffer::offset (views' from their parents'),
// ExecGraph::arena_bytes and adds to ExecNode::deps (which must already hold the data
// dependencies). Cancelled once `cancellation` (null: never) is set: polled before every buffer
// placed (a 10,000-operator graph has hundreds of thousands), so a cancelled plan stops within one
// placement, leaving the graph half-planned.
absl::Status plan_memory(ExecGraph& graph, const support::Cancellation* cancellation = nullptr);

} // namespace einsummable::physical
