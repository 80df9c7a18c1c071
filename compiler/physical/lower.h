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
// Then plan_memory assigns offsets. Buffers and nodes are created only when used, so an atom
// no step reads is never sliced. Cancelled once `cancellation` (polled per operator, then by
// plan_memory; null: never) is set.
absl::StatusOr<ExecGraph> lower(const ir::Graph& graph, const PhysicalPlan& plan,
                                const ResidentLayout* resident = nullptr,
                                const support::Cancellation* cancellation = nullptr);

// The static memory plan: per device, persistent buffers first (never reused), then every
// other buffer in the order of its writer, at the lowest 64-byte-aligned offset free from its
// writer to its last reader (first fit over the live buffers). Where a buffer takes bytes an
// earlier buffer used, its writer gains deps on that buffer's writer and readers — the latest
// such users only, the earlier ones it waits for through them — so any execution order that
// respects deps is safe. Sets Buffer::offset, ExecGraph::arena_bytes and adds to ExecNode::deps
// (which must already hold the data dependencies). Cancelled once `cancellation` (null: never)
// is set: polled before every buffer placed (a 10,000-operator graph has hundreds of thousands),
// so a cancelled plan stops within one placement, leaving the graph half-planned.
absl::Status plan_memory(ExecGraph& graph, const support::Cancellation* cancellation = nullptr);

} // namespace einsummable::physical
