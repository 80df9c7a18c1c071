#pragma once

#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/rank_worker.h"
#include "runtime/loopback_transport.h"

namespace einsummable::runtime::cluster {

// Ranks served from threads of this process, for tests of the cluster backend without MPI:
// workers[r] answers rank r's requests (workers[0], rank 0 itself, is unused). Each request and
// reply goes through its wire bytes, as between processes, and is handled on a thread of its
// own, so a run on one rank proceeds while rank 0 runs its part. `network` (may be null) is the
// ranks' loopback transport, whose messages fail_pending fails too.
class LocalRankChannel final : public RankChannel {
public:
    LocalRankChannel(std::vector<std::shared_ptr<RankWorker>> workers,
                     std::shared_ptr<LoopbackNetwork> network = nullptr);
    ~LocalRankChannel() override;
    int ranks() const override { return static_cast<int>(workers_.size()); }
    std::future<absl::StatusOr<v1::RankReply>> call(int rank,
                                                    const v1::RankRequest& request) override;
    void fail_pending(const absl::Status& error) override;

    // For tests of a hung rank: while paused, requests to `rank` are kept, unanswered.
    void pause(int rank);

private:
    using Promise = std::promise<absl::StatusOr<v1::RankReply>>;

    std::vector<std::shared_ptr<RankWorker>> workers_;
    std::shared_ptr<LoopbackNetwork> network_;
    std::mutex mutex_;
    uint64_t next_ = 0;                                 // guarded by mutex_
    std::map<uint64_t, std::shared_ptr<Promise>> open_; // guarded by mutex_
    std::set<int> paused_;                              // guarded by mutex_
    int answering_ = 0;                                 // guarded by mutex_: threads running
    std::condition_variable answered_;
};

} // namespace einsummable::runtime::cluster
