#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "runtime/transport.h"

namespace einsummable::runtime::cuda {

// How the CUDA backend runs a rank's part of a graph split over processes (docs/cluster.md,
// "The CUDA backend"): its send and recv nodes become ops of the part's CUDA graph, on one of two
// paths.
//
//   nccl: GPU memory to GPU memory. Each op is an ncclSend or ncclRecv captured into the graph.
//         NCCL matches a pair's messages by the order they are issued, not by tag, and one
//         communicator's operations must not run concurrently, so the ops of each GPU run one
//         after another in tag order (graph_plan.h); the split's tags make that a schedule every
//         rank can follow at once (physical::RankSplit::messages). NCCL refuses two ranks on one
//         GPU.
//   mpi:  staged through pinned host memory, sent by the rank's Transport (MPI between
//         processes). A send copies its block out and starts the message from a host function;
//         a recv starts the message from a host function, a one-thread kernel waits for it to
//         arrive (kernels/cuda/host_flag.h), then the block is copied in. No host function
//         blocks, so the ops need no order, and any number of ranks may share a GPU: this is
//         the path of the one-GPU two-process check (scripts/gpu-check). Slower: each message
//         crosses PCIe twice.
enum class RankTransportKind { nccl, mpi };

struct NcclApi; // nccl_api.h, built where NCCL's header was found

// OK when this build has NCCL's header and the library loads (nccl_api.h); else
// FailedPrecondition saying which is missing.
absl::Status nccl_available();
absl::StatusOr<RankTransportKind> parse_rank_transport(absl::string_view text);

// One NCCL communicator per GPU of this rank, over the GPUs of every rank: rank r's i-th
// distinct GPU (slot i: in the order its device list first names them) is NCCL rank r * G + i,
// where G is the number of distinct GPUs per rank. Every rank's devices must sit on its GPUs
// the same way (0,0,1,1 and 2,2,3,3 do; 0,1,1,1 and 0,0,1,1 do not).
class NcclComms {
public:
    // Collective over every rank of `transport`, each calling it at start (before any plan
    // runs) with its own device list (logical device -> GPU ordinal): rank 0 makes NCCL's id and
    // sends it, with its devices' slots, to every other rank as message 0 of the transport (no
    // split graph runs yet, so the tag meets none of theirs); each rank answers whether its
    // slots agree (InvalidArgument naming both where not) and all join the communicators.
    // FailedPrecondition when NCCL cannot be loaded or refuses (two ranks on one GPU among the
    // reasons, named in the error), DeadlineExceeded when rank 0's id does not come within `wait`.
    static absl::StatusOr<std::shared_ptr<NcclComms>>
    create(Transport& transport, const std::vector<int>& gpu_of_device,
           std::chrono::seconds wait = std::chrono::seconds(120));
    ~NcclComms();
    NcclComms(const NcclComms&) = delete;
    NcclComms& operator=(const NcclComms&) = delete;

    // Enqueue on `stream` (a stream of device `device`'s GPU; capturable) sending `bytes` bytes at
    // `data` (GPU memory of that device) to device `peer_device` of rank `peer`, or receiving
    // them from it. bytes == 0 is a token: one byte of a buffer kept for tokens moves instead
    // (NCCL may skip an empty message, which would then order nothing).
    absl::Status send(int device, const void* data, size_t bytes, int peer, int peer_device,
                      cudaStream_t stream) const;
    absl::Status recv(int device, void* data, size_t bytes, int peer, int peer_device,
                      cudaStream_t stream) const;

    int rank() const { return rank_; }
    // The distinct GPUs of this rank, in NCCL rank order.
    const std::vector<int>& gpus() const { return gpus_; }
    // "NCCL 2.28.9 from /usr/local/cuda/lib/libnccl.so.2".
    std::string describe() const;

private:
    NcclComms() = default;
    absl::StatusOr<int> nccl_rank(int peer, int peer_device) const;
    // send's and recv's work: ncclSend or ncclRecv of `bytes` at `data` (a token's byte when 0).
    absl::Status message(bool send, int device, void* data, size_t bytes, int peer, int peer_device,
                         cudaStream_t stream) const;
    // OK, or FailedPrecondition for NCCL's result (an ncclResult_t) naming `what`.
    absl::Status check(int result, absl::string_view what) const;
    // Connects every GPU with every GPU of every other rank (create's last step; says why).
    absl::Status connect();

    const NcclApi* api_ = nullptr;
    int rank_ = 0;
    int ranks_ = 1;
    std::vector<int> gpus_;
    std::vector<int> slot_of_device_; // device -> index into gpus_
    std::vector<void*> comms_;        // per slot: its ncclComm_t
    std::vector<void*> tokens_;       // per slot: bytes tokens move
};

// The mpi path's messages of one executable: the host functions its graph calls, the flags its
// waiting kernels poll, and the sends still in flight.
class StagedMessages {
public:
    // `messages` ops will be enqueued (slots 0 .. messages - 1). FailedPrecondition when the
    // flags' pinned memory cannot be had.
    static absl::StatusOr<std::unique_ptr<StagedMessages>>
    create(std::shared_ptr<Transport> transport, int messages);
    // Waits for the messages still in flight, which use staging memory the executable frees
    // next.
    ~StagedMessages();

    // Enqueue on `stream` (capturable): a host function that starts sending `data` (pinned host
    // memory that stays unchanged until finish_run) as message `tag` to rank `peer`.
    absl::Status enqueue_send(int slot, int peer, int tag, absl::Span<const std::byte> data,
                              cudaStream_t stream);
    // Enqueue on `stream`: a host function that starts receiving message `tag` from rank `peer`
    // into `data` (pinned host memory), then a kernel that holds the stream until it is there
    // (or failed: the run then reports it).
    absl::Status enqueue_recv(int slot, int peer, int tag, absl::Span<std::byte> data,
                              cudaStream_t stream);
    // After the graph finished: waits for the run's sends to be done; the first failure of any
    // of the run's messages, naming its tag and peer, or OK. Clears it for the next run.
    absl::Status finish_run();

private:
    struct Slot {
        StagedMessages* self = nullptr;
        int peer = 0;
        int tag = 0;
        const std::byte* send_data = nullptr;
        std::byte* recv_data = nullptr;
        size_t bytes = 0;
        uint32_t* flag = nullptr; // recv: 1 once done
    };
    StagedMessages() = default;
    static void CUDART_CB start_send(void* slot);
    static void CUDART_CB start_recv(void* slot);
    // A message's end: its failure (if any) kept for finish_run, then the counts.
    void record(const Slot& slot, bool send, const absl::Status& status);
    void finished(bool send);

    std::shared_ptr<Transport> transport_;
    std::vector<Slot> slots_;
    uint32_t* flags_ = nullptr; // mapped pinned memory, one per slot
    std::mutex mutex_;
    std::condition_variable idle_;
    int sending_ = 0;   // sends started and not done
    int in_flight_ = 0; // sends and receives started and not done
    absl::Status error_;
};

// What a CudaExecutable running a rank's part needs to reach the other ranks.
struct RankMessages {
    std::shared_ptr<Transport> transport;
    // The nccl path's communicators; null: the mpi path, through `transport`.
    std::shared_ptr<const NcclComms> nccl;
};

} // namespace einsummable::runtime::cuda
