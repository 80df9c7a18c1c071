#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/box.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::runtime::cuda {

// The CUDA graph of one ExecGraph, decided without touching a GPU (docs/cuda.md "graph"):
// which graph node each ExecGraph node becomes, on which device, and which nodes it waits for.
// cuda_executable.cc turns each GraphOp into one node of a cudaGraph through the explicit node
// API; keeping the decisions here, pure, lets tests check on any machine that the graph keeps
// every dependency and orders every conflicting memory access (check_graph_plan).
//
// ExecNode -> GraphOps:
//   kernel    -> kernel: the operator's prepared CUDA kernel (captured into a child graph)
//   aggregate -> aggregate: enqueue_aggregate on the node's device
//   copy      -> memcpy between the devices' memory: on one GPU (virtual devices), or between
//                GPUs that can access each other's memory (peer access);
//                otherwise to_host + from_host through pinned host staging memory
//   slice     -> memcpy when the slice is one contiguous byte range of its input, else a
//                region_copy kernel (strided copy, kernels/cuda/block_ops.h)
//   concat    -> per input: memcpy when it is one contiguous byte range of the output, else a
//                region_copy kernel; the parts write disjoint bytes and run in any order
//   send/recv -> (a rank's part of a graph split over processes, docs/cluster.md) on the device
//                path, one send or recv op on the block's GPU memory (NCCL); on the host path,
//                to_host + send from pinned staging memory, and recv into staging + from_host
//                (rank_messages.h). A token (no block) is the send or recv alone.
// A slice or concat whose output carries log-sum-exp statistics (Buffer::stats, partial results
// of attention split along its keys) copies the statistics of each region the same way, as ops
// of their own (GraphOp::stats); an aggregate of such parts combines values and statistics.
// Strided copies use a kernel, not 2D/3D memcpy nodes: a copy within one GPU's memory is
// faster on the SMs than on a copy engine, and the kernel handles any rank.
//
// Besides the ExecGraph's deps, two orders are added (three on the device path):
//   - the copies leaving one device (memcpy to another device, to_host) run in ExecGraph node
//     order, which is the order of the exchange programs' steps (the synthesiser's schedule
//     assumes a device sends one step after another);
//   - kernels that use their device's scratch memory run one after another on that device.
//   - on the device path, the messages of one GPU run one after another in tag order: NCCL
//     matches a pair's messages by the order they are issued and runs one communicator's
//     operations one at a time (rank_messages.h says why tag order cannot deadlock).
//
// Resident buffers are read where they lie, like any other buffer: a copy, slice or kernel
// reading one takes its address in the resident arena. Nothing is staged for them and nothing
// writes them (check_exec_graph refuses a graph that does; check_graph_plan checks the ops).

// Where a byte range lies. A logical device has two: the executable's own arena (buffers of
// the memory plan) and the resident arena it shares with the other plans of its model
// (Buffer::resident, read only); offsets of one say nothing about the other. The host staging
// memory belongs to no device.
enum class MemorySpace { arena, resident, staging };

// Which bytes of a buffer a range stands for: all of them, or of a buffer that carries
// statistics (Buffer::stats) only its elements or only its statistics.
enum class BufferPart { all, elements, stats };

// A byte range of one logical device's arena or resident arena, or of the host staging memory
// (device == -1).
struct MemoryRange {
    MemorySpace space = MemorySpace::arena;
    int device = 0;
    int64_t offset = 0;
    int64_t bytes = 0;
    // The buffer and the region of it the range holds (-1 and empty for host staging). A
    // strided region's bytes are [offset, offset + bytes) only as a bound: check_graph_plan
    // compares two regions of one buffer by their boxes, so the disjoint parts of a concat do
    // not look like a conflict.
    physical::BufferId buffer = -1;
    ir::Box region;
    // The buffer's bytes `region` names: the elements and statistics of its vectors, or one of
    // the two (region stays in element coordinates; its statistics are stats_box(region)).
    BufferPart part = BufferPart::all;
};

// `empty` stands for work of zero bytes (an empty slice or copy), kept so that deps still pass
// through the node.
enum class GraphOpKind {
    kernel,
    aggregate,
    memcpy,
    to_host,
    from_host,
    region_copy,
    send,
    recv,
    empty
};

// How a rank's messages travel (rank_messages.h): GPU memory to GPU memory (NCCL), or through
// pinned host memory.
enum class MessagePath { device, host };
const char* graph_op_kind_name(GraphOpKind kind);

struct GraphOp {
    GraphOpKind kind = GraphOpKind::kernel;
    int exec_node = 0; // the ExecGraph node it implements
    // The logical device whose GPU runs it: the node's device, except to_host, which runs on
    // the copy's source device.
    int device = 0;
    // Ops (indices into GraphPlan::ops, all smaller) that must finish first.
    std::vector<int> deps;
    // memcpy, to_host, from_host: the bytes moved (src.bytes == dst.bytes).
    MemoryRange src;
    MemoryRange dst;
    // region_copy: copy `region` from the node's inputs[input] buffer into its outputs[0].
    int input = 0;
    ir::Box region;
    // region_copy, memcpy of a slice or concat: the op copies the statistics of `region`, not
    // its elements.
    bool stats = false;
    // send (from src) and recv (into dst): the rank and device at the other end and the
    // message's tag. src or dst is empty for a token; on the host path it is staging memory.
    int peer = -1;
    int peer_device = -1;
    int tag = -1;
    // Every byte range it reads and writes (for check_graph_plan and for printing).
    std::vector<MemoryRange> reads;
    std::vector<MemoryRange> writes;
};

struct GraphPlanOptions {
    // Logical device -> GPU ordinal. Several logical devices may share a GPU.
    std::vector<int> gpu_of_device;
    // peer_access[a][b]: GPU a can read and write GPU b's memory (cudaDeviceCanAccessPeer) once
    // enabled. A copy between two GPUs goes peer-to-peer when both directions are possible.
    std::vector<std::vector<bool>> peer_access;
    // Per ExecGraph node: the node's kernel uses its device's scratch memory.
    std::vector<bool> uses_scratch;
    // How send and recv nodes travel; graphs without them ignore it.
    MessagePath message_path = MessagePath::device;
};

struct GraphPlan {
    std::vector<GraphOp> ops;
    // Per ExecGraph node, its ops (in order).
    std::vector<std::vector<int>> ops_of_node;
    // Pinned host memory the copies through the host need (each has its own range).
    int64_t staging_bytes = 0;

    // Counts per kind, e.g. "12 kernel, 3 memcpy, 1 region_copy".
    std::string summary() const;
};

// InvalidArgument when the options do not cover the graph's devices and nodes, or when on the
// device path one GPU's messages are not in tag order (split_by_rank's parts are). The ExecGraph
// must have passed physical::check_exec_graph.
absl::StatusOr<GraphPlan> plan_graph(const physical::ExecGraph& graph,
                                     const GraphPlanOptions& options);

// Checks that `plan` runs `graph` correctly whatever order the GPU picks among independent
// nodes: every op runs on its node's device (to_host on the source), deps name earlier ops,
// every ExecGraph dep is kept (each op of the dep reaches each op of the node), no op writes
// resident memory (other plans read it at the same time), any two ops whose byte ranges in
// one memory space of one device overlap where at least one writes are ordered, copies
// leaving a device are in node order, scratch users of a device are ordered, and on the device
// path each GPU's messages run one after another in tag order.
// FailedPrecondition naming the ops otherwise. Quadratic in the ops: for tests.
absl::Status check_graph_plan(const physical::ExecGraph& graph, const GraphPlanOptions& options,
                              const GraphPlan& plan);

} // namespace einsummable::runtime::cuda
