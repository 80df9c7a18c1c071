#pragma once

#include <cstddef>
#include <functional>
#include <limits>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace einsummable::runtime {

// How a rank's part of a graph split over processes (compiler/physical/rank_split.h) reaches
// the other ranks' parts: the messages of its send and recv nodes. A backend given one runs
// such parts (docs/cluster.md); the MPI transport (runtime/cluster/) is the one between
// processes, the loopback transport (loopback_transport.h) one inside a process.
//
// Messages are matched by (sender, receiver, tag). Tags are unique within one run of one split
// graph, and the split graphs prepared at once hold ranges of tags of their own (the cluster
// backend gives them out), so a message never meets another plan's; one executable runs once
// at a time. Thread-safe.
class Transport {
public:
    // Called once, from any thread, when a message is done: OK, or why it failed.
    using Done = std::function<void(absl::Status)>;

    virtual ~Transport() = default;
    virtual int rank() const = 0;
    virtual int ranks() const = 0;
    // The largest tag a message may have (MPI's MPI_TAG_UB; at least 32767).
    virtual int max_tag() const { return std::numeric_limits<int>::max(); }
    // Starts sending `data` (possibly empty: a token) to rank `peer` as message `tag`; `done`
    // runs once `data` may be reused. `data` must stay valid until then.
    virtual void send(int peer, int tag, absl::Span<const std::byte> data, Done done) = 0;
    // Starts receiving message `tag` from rank `peer` into `data`; `done` runs once it is
    // there. A message of another size is an error (InvalidArgument naming the tag and sizes).
    virtual void recv(int peer, int tag, absl::Span<std::byte> data, Done done) = 0;
};

} // namespace einsummable::runtime
