#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/rank_worker.h"
#include "runtime/transport.h"

namespace einsummable::runtime::cluster {

// Whether an MPI launcher started this process (mpirun/mpiexec of Open MPI, or a PMI/PMIx
// launcher such as Slurm's srun): the variables they set are in the environment.
bool launched_by_mpi();

// This process's place in an MPI job (docs/cluster.md): MPI is initialised on a thread of its
// own, which makes every MPI call of the process and moves the messages forward; the two
// duplicated communicators keep rank 0's requests and replies apart from the plans' messages.
// Over it: the transport of the CPU backend's split graphs (point-to-point sends and receives),
// rank 0's channel to the other ranks, and the other ranks' loop serving rank 0's requests.
class MpiCluster {
public:
    // Initialises MPI (once per process: MPI cannot be initialised again after it ends).
    // Unavailable naming the MPI call that failed.
    static absl::StatusOr<std::shared_ptr<MpiCluster>> start();
    virtual ~MpiCluster() = default;

    virtual int rank() const = 0;
    virtual int ranks() const = 0;
    // The plans' messages to and from the other ranks.
    virtual std::shared_ptr<Transport> transport() = 0;
    // Rank 0: its requests to the other ranks.
    virtual std::shared_ptr<RankChannel> channel() = 0;
    // Ranks other than 0: answers rank 0's requests with `worker`, one at a time in the order
    // they came, until rank 0 sends Shutdown; then returns OK.
    virtual absl::Status serve(RankWorker& worker) = 0;
    // Rank 0: asks every other rank to shut down and waits for its answer (30 s at most each).
    // Then, on every rank: ends MPI. Called by the destructor if not before.
    virtual void stop() = 0;
    // Ends the whole job at once (MPI_Abort with `code`): for a job that cannot go on, whose
    // ranks may not answer a shutdown (one is dead or hung), so that the launcher stops every
    // rank and reports `code` to the supervisor. Does not return.
    [[noreturn]] virtual void abort(int code) = 0;
};

} // namespace einsummable::runtime::cluster
