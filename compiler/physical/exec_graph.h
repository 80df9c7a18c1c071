#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/join_agg_spec.h"
#include "compiler/ir/operator.h"
#include "compiler/ir/partial_block.h"

namespace einsummable::physical {

// The executable form of a plan (docs/design.md "ExecGraph"): buffers placed on devices and nodes
// that read and write them. A backend (runtime/) runs it; nothing here does I/O.

using BufferId = int;

// A dense row-major block of one tensor, stored in the tensor's dtype on one device.
struct Buffer {
    int device = 0;
    ir::DType dtype = ir::DType::f32;
    ir::Box box;        // absolute positions inside the whole tensor
    std::string tensor; // the graph tensor it belongs to (for printing and errors)
    // Persistent buffers (graph-input blocks, saved outputs) live for the whole plan and are
    // never shared; the others live from their writer to their last reader.
    bool persistent = false;
    // The static memory plan: byte offset inside the device's arena — or, for a resident
    // buffer, inside the device's resident arena: memory the plans of one model share, which
    // holds its resident inputs (resident_layout.h) and which no node writes.
    int64_t offset = 0;
    bool resident = false; // implies persistent
    // A partial result of an aggregation with statistics (ir::carries_stats): after the
    // elements, padded to 4 bytes, one f32 statistic (ir::PartialBlock) per vector along the
    // box's last dimension, row-major over ir::stats_box(box). Kernels write them, slices, copies
    // and concats carry them, an aggregate combines them; the complete result has none.
    bool stats = false;
    // A view (parent >= 0) has no memory of its own: its elements are those of `box` inside
    // buffer `parent`'s row-major elements, which must be one contiguous run of them
    // (contiguous_offset), so its bytes are [offset, offset + bytes()) of its parent's. Views of
    // views are allowed; the buffer at the end of the chain (view_root) owns the memory. A view
    // carries no statistics, shares its parent's device and dtype, and takes its root's
    // `persistent` and `resident`; the memory plan sets its offset from its parent's and keeps
    // the root alive as long as any view of it is used. Writing a view writes the parent's
    // bytes: a copy into a view is a copy into a sub-range of the parent, and a block assembled
    // from views written in place needs no concat.
    BufferId parent = -1;

    bool is_view() const { return parent >= 0; }
    int64_t elements() const { return box.volume(); }
    int64_t bytes() const { return ir::block_bytes(box, dtype, stats); }
    // Byte offset of the statistics from the buffer's start (when stats).
    int64_t stats_offset() const { return ir::stats_offset(box, dtype); }
};

enum class NodeKind {
    slice,     // inputs[0] -> outputs[0]: the part outputs[0].box of a larger block (with its
               // statistics, when both carry them; an output without drops them)
    copy,      // inputs[0] on one device -> outputs[0] (same box and statistics) on another
    aggregate, // inputs (same box, one device) combined with `agg` -> outputs[0]; for
               // log_sum_exp and arg_max the inputs carry statistics and the output does while
               // incomplete
    concat,    // inputs (boxes tiling outputs[0].box, one device, all with statistics or
               // none, as the output) stitched -> outputs[0]
    kernel,    // one function spec of one operator: inputs/outputs in the spec's order
    // A rank's part of a graph split over processes (rank_split.h) talks to the other ranks:
    send, // inputs[0] (or nothing: a token, which only orders) -> rank `peer`, message `tag`
    recv, // message `tag` from rank `peer` -> outputs[0] (or nothing: a token)
};

// Slices of chunks that are one contiguous run of their input, and concats of chunks whose
// inputs can all be written in place, are not nodes: lower() makes their outputs (respectively
// inputs) views (Buffer::parent; lower.h use_views). Other slices and concats stay nodes.

absl::string_view node_kind_name(NodeKind kind);

struct ExecGraph;
// The box of a saved output whose blocks (ExecGraph::outputs) are `blocks`: the smallest box
// containing them all (they tile it). Precondition: blocks is not empty.
ir::Box saved_output_box(const ExecGraph& graph, const std::vector<BufferId>& blocks);
// The position, in elements, of the first element of `region` inside the row-major block
// `whole` when `region` lies inside `whole` as one contiguous run of it: every dimension after
// the first one where `region` is more than one element wide spans all of `whole`'s. nullopt
// otherwise (a strided region, or one not inside `whole`).
std::optional<int64_t> contiguous_offset(const ir::Box& whole, const ir::Box& region);

struct ExecNode {
    NodeKind kind = NodeKind::kernel;
    int device = 0; // where it runs; a copy runs on its destination device
    std::vector<BufferId> inputs;
    std::vector<BufferId> outputs;
    ir::AggOp agg = ir::AggOp::none; // aggregate only
    // kernel only: the graph node, its operator (owned by the graph the plan keeps) and the
    // function spec (boxes equal the input and output buffers' boxes).
    int graph_node = -1;
    std::string label; // "<graph node name>#<function>", for prints and errors
    const ir::Operator* op = nullptr;
    int function = -1;
    ir::FunctionSpec spec;
    // send and recv only: the rank at the other end, the device of the node at the other end
    // (numbered in that rank's part: a transport between GPUs, such as NCCL's, addresses the
    // GPU), and the message's tag, unique among the messages of the split graph (a send and its
    // recv share it).
    int peer = -1;
    int peer_device = -1;
    int tag = -1;
    // Nodes (indices into ExecGraph::nodes, all smaller than this node's) that must finish
    // first: the writers of its inputs, and — where the memory plan reuses bytes — every
    // earlier user of the memory its outputs overwrite.
    std::vector<int> deps;
};

// Node order is a valid sequential schedule; deps allow any order consistent with them.
//
// Well-formed (what lower() produces and check_exec_graph in exec_graph_check.h checks): buffers
// lie inside their device's arena; a node's buffers are on its device (a copy's input on another);
// a slice's output box lies inside its input's; a concat's inputs tile its output exactly; an
// aggregate's inputs share its output's box; statistics follow the node rules above (a slice may
// drop them, a log_sum_exp or arg_max aggregate's inputs all carry them, nothing adds them but a
// kernel or such an aggregate); a kernel's buffers have the shapes of its spec's blocks; no output
// overlaps, in the arena, the node's inputs or other outputs; deps name earlier nodes; a view lies,
// as one contiguous run, inside its parent (same device and dtype, no statistics, its root's flags,
// the offset its position gives) with no cycle of parents, and its root's bytes are not reused
// by another buffer while any node uses the root or one of its views. An empty arena_bytes
// means no arena on any device.
struct ExecGraph {
    int devices = 1;
    std::vector<Buffer> buffers;
    std::vector<ExecNode> nodes;
    // Per device: bytes of the arena the memory plan needs (the peak of live buffers, aligned).
    std::vector<int64_t> arena_bytes;
    // Per device: bytes of the resident arena the graph's resident buffers lie in (the layout's
    // arena_bytes); empty when it has none. The backend binds the graph to that memory.
    std::vector<int64_t> resident_bytes;
    // Graph inputs: the blocks load() fills (each a persistent buffer), by tensor name; resident
    // inputs are not here (they are written once, into the resident arenas).
    std::map<std::string, std::vector<BufferId>> input_blocks;
    // Saved outputs, by tensor name: the persistent buffers holding its blocks, each on the
    // device that computed it (Buffer::device, box and offset say where), tiling the whole
    // tensor; the runtime fetches each block into its part of the host tensor
    // (runtime::read_saved_output). A saved graph input is one block, the whole tensor on
    // device 0.
    std::map<std::string, std::vector<BufferId>> outputs;
    // Kernels must compute every output element the same way whatever block it lies in (a
    // batch-invariant plan, runtime::CompileOptions::batch_invariant): set by the runtime, not
    // by lower(); the CPU backend runs such graphs' kernels in kernels::cpu::BatchInvariantScope.
    bool batch_invariant = false;

    // The buffer that owns `id`'s memory: `id` itself, or the end of its chain of parents.
    BufferId view_root(BufferId id) const;
    // Sets every view's offset, persistent and resident from its parent's (parents first).
    void place_views();
    // Bytes moved by copy nodes, [src][dst] (a rank's sends and receives are not copies).
    std::vector<std::vector<int64_t>> copy_bytes() const;
    // One line per buffer and node; stable, for golden files.
    std::string to_string() const;
};

} // namespace einsummable::physical
