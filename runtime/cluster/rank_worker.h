#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "einsummable/v1/rank.pb.h"
#include "runtime/backend.h"
#include "runtime/cluster/exec_graph_wire.h"

namespace einsummable::runtime::cluster {

// What a rank other than 0 does with rank 0's requests (rank.proto): prepares its parts of the
// plans on its own backend (whose transport reaches the other ranks), writes and reads their
// buffers, runs them, keeps resident memory. Every failure is a reply with its status, never a
// crash. Thread-safe: requests may be handled at once (a run while another plan is prepared).
class RankWorker {
public:
    // `backend` runs this rank's devices; `version` is checked against Hello's.
    RankWorker(int rank, std::shared_ptr<Backend> backend, std::string version);
    // A rank whose backend could not be made: it answers every request but Ping and Shutdown
    // (Hello first) with `backend_error` naming the rank, so that rank 0 stops at once saying
    // why instead of waiting for a rank that is gone. `backend_error` must not be OK.
    RankWorker(int rank, absl::Status backend_error, std::string version);
    ~RankWorker();

    v1::RankReply handle(const v1::RankRequest& request);
    int rank() const { return rank_; }

private:
    struct Part {
        std::unique_ptr<ReceivedGraph> received;
        std::unique_ptr<Executable> executable;
        std::mutex run_mutex; // one run at a time, as Executable requires
    };

    absl::StatusOr<v1::RankReply> dispatch(const v1::RankRequest& request);
    absl::StatusOr<std::shared_ptr<Part>> part(uint64_t id);
    absl::StatusOr<std::shared_ptr<ResidentMemory>> resident(uint64_t id);

    const int rank_;
    const std::shared_ptr<Backend> backend_; // null when backend_error_ says why
    const absl::Status backend_error_;
    const std::string version_;
    std::mutex mutex_;
    std::map<uint64_t, std::shared_ptr<Part>> parts_;               // guarded by mutex_
    std::map<uint64_t, std::shared_ptr<ResidentMemory>> residents_; // guarded by mutex_
};

} // namespace einsummable::runtime::cluster
