#pragma once

#include <chrono>
#include <future>
#include <limits>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "einsummable/v1/rank.pb.h"
#include "runtime/backend.h"

namespace einsummable::runtime::cluster {

// Rank 0's line to the other ranks (rank.proto): one request, one reply. The MPI channel
// (mpi_cluster.h) is the one between processes; local_rank_channel.h serves the ranks from
// threads of one process, for tests. Thread-safe.
class RankChannel {
public:
    virtual ~RankChannel() = default;
    // Ranks, rank 0 included.
    virtual int ranks() const = 0;
    // Sends `request` to `rank` (1 <= rank < ranks()); the future holds its reply, or
    // Unavailable when the rank cannot be reached.
    virtual std::future<absl::StatusOr<v1::RankReply>> call(int rank,
                                                            const v1::RankRequest& request) = 0;
    // A rank has stopped answering: every reply still awaited, and every message of a plan's
    // run still in flight on this rank, ends now with `error`, so that nothing waits for it.
    virtual void fail_pending(const absl::Status& error) = 0;
};

struct ClusterOptions {
    // The build rank 0 runs (EINSUMMABLE_VERSION); every rank must answer Hello with it.
    std::string version;
    // The heartbeat (docs/cluster.md "Faults"): rank 0 pings every rank every quarter of
    // rank_timeout; a rank that has not answered a ping within rank_timeout is taken for dead
    // or hung. The backend then fails beyond recovery (unrecoverable_error, and a log line
    // naming the rank and the request it was handling), and every reply and message still
    // awaited fails at once with Unavailable. Replies themselves (a run's) wait as long as the
    // rank answers its pings.
    std::chrono::milliseconds rank_timeout{std::chrono::seconds(30)};
    // The transport's largest tag (Transport::max_tag). Every prepared split graph holds a
    // range of tags of its own, [1, max_tag] shared among them (tag 0 stays free: the NCCL
    // start uses it); a prepare that finds no range long enough is ResourceExhausted.
    int max_tag = std::numeric_limits<int>::max();
};

// The backend of rank 0 of a daemon run over channel->ranks() processes (docs/cluster.md):
// devices() = ranks x local->devices(); device d lives on rank d / local->devices(). prepare()
// splits the graph (physical::split_by_rank), prepares part 0 on `local` (which must have a
// transport to the other ranks' backends) and sends every other part to its rank; a run runs
// every rank's part at once. Runs of different executables overlap, unless the local backend
// says they take turns (Backend::split_runs_take_turns). Says Hello to every rank
// first: FailedPrecondition naming the rank when one runs another version or another device
// count, Unavailable when one does not answer.
absl::StatusOr<std::shared_ptr<Backend>> make_cluster_backend(std::shared_ptr<Backend> local,
                                                              std::shared_ptr<RankChannel> channel,
                                                              const ClusterOptions& options);

} // namespace einsummable::runtime::cluster
