#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::physical {

// One ExecGraph cut into the parts that several processes run (docs/cluster.md): rank r holds
// the devices [r * devices_per_rank, (r + 1) * devices_per_rank) of the whole graph, numbered
// from 0 in its part. A part holds its devices' buffers (same offsets, so its arenas are the
// whole graph's arenas of those devices) and nodes; what crosses between ranks becomes
// messages (NodeKind::send / recv, a tag each, shared by the two ends):
//   - a copy from a device of rank A to one of rank B is a send on A (of the source buffer)
//     and a recv on B (into the destination buffer);
//   - a dependency of a node on a node of another rank that the parts do not already order
//     through such a copy is a token: a send without data after the node it waits for, a recv
//     without data before the node that waits.
// Which dependencies a copy's two halves keep: the send waits for everything that the source
// rank knows of (the writers of the source, and what a token brings from a third rank); the
// recv waits for what the destination rank knows of (the earlier users of the destination's
// memory). A node that waited for a copy waits, on the copy's source rank, for its send (the
// source may be overwritten once it is sent), and elsewhere for its recv.
//
// Running every part at once, with the messages delivered, computes what the whole graph
// computes, with the same kernels on the same blocks: bitwise the same results. Pure: no
// process, thread or transport is involved here.
struct RankSplit {
    int devices_per_rank = 1;
    // Rank r's part; as many as the whole graph's devices need (the last may have fewer
    // devices).
    std::vector<ExecGraph> parts;
    // For each buffer of the whole graph: its rank, and its id in that rank's part.
    struct Home {
        int rank = 0;
        BufferId buffer = -1;
    };
    std::vector<Home> buffer_homes;
    // Bytes one run sends between devices of different ranks, [src][dst] over the whole
    // graph's devices (copies within a rank are the parts' own copy_bytes()).
    std::vector<std::vector<int64_t>> crossing_bytes;
    // Tags used: [0, messages). A message's tag is above the tags of every message it depends
    // on (through any chain of dependencies, on any rank): processing every rank's messages in
    // tag order is a schedule the dependencies allow, so a transport that must match a pair's
    // messages by order (NCCL's point-to-point calls) can issue them that way.
    int messages = 0;

    int rank_of_device(int device) const { return device / devices_per_rank; }
};

// InvalidArgument when devices_per_rank < 1 or the graph fails check_exec_graph.
absl::StatusOr<RankSplit> split_by_rank(const ExecGraph& graph, int devices_per_rank);

} // namespace einsummable::physical
