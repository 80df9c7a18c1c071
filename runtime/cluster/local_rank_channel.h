#pragma once

#include <memory>
#include <vector>

#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/rank_worker.h"

namespace einsummable::runtime::cluster {

// Ranks served from threads of this process, for tests of the cluster backend without MPI:
// workers[r] answers rank r's requests (workers[0], rank 0 itself, is unused). Each request and
// reply goes through its wire bytes, as between processes, and is handled on a thread of its
// own, so a run on one rank proceeds while rank 0 runs its part.
class LocalRankChannel final : public RankChannel {
public:
    explicit LocalRankChannel(std::vector<std::shared_ptr<RankWorker>> workers);
    int ranks() const override { return static_cast<int>(workers_.size()); }
    std::future<absl::StatusOr<v1::RankReply>> call(int rank,
                                                    const v1::RankRequest& request) override;

private:
    std::vector<std::shared_ptr<RankWorker>> workers_;
};

} // namespace einsummable::runtime::cluster
