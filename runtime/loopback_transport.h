#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/transport.h"

namespace einsummable::runtime {

// Several ranks inside one process: ranks() transports whose messages are copied from sender
// to receiver in memory. A send whose recv is not yet posted is kept (a copy of its bytes) and
// done at once, as an eager MPI send is; a recv waits for its send. For tests of split graphs
// without processes (runtime/cluster has the MPI transport between processes).
class LoopbackNetwork {
public:
    explicit LoopbackNetwork(int ranks);
    ~LoopbackNetwork();
    int ranks() const { return static_cast<int>(transports_.size()); }
    std::shared_ptr<Transport> transport(int rank) const { return transports_[rank]; }
    // Every recv still waiting for its send ends now with `error` (a rank has stopped), and so
    // does every later recv that finds no send waiting.
    void fail_pending(const absl::Status& error);

private:
    class Endpoint;
    struct Pending {
        std::vector<std::byte> data;  // a send that came first
        absl::Span<std::byte> target; // or a recv that came first
        Transport::Done done;
        bool is_recv = false;
    };

    void send(int from, int to, int tag, absl::Span<const std::byte> data, Transport::Done done);
    void recv(int from, int to, int tag, absl::Span<std::byte> data, Transport::Done done);

    std::mutex mutex_;
    std::map<std::tuple<int, int, int>, Pending> pending_; // (from, to, tag)
    absl::Status failed_;                                  // fail_pending's error
    std::vector<std::shared_ptr<Transport>> transports_;
};

} // namespace einsummable::runtime
