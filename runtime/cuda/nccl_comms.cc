// NcclComms (rank_messages.h) where NCCL's header was found; nccl_comms_missing.cc otherwise.

#include <algorithm>
#include <future>
#include <string>
#include <utility>

#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "runtime/cuda/nccl_api.h"
#include "runtime/cuda/rank_messages.h"

namespace einsummable::runtime::cuda {
namespace {

using kernels::cuda::cuda_status;

// What rank 0 sends every rank at start: NCCL's id, then how its devices sit on its GPUs (a
// count, then each device's GPU slot: 0,0,1,1 for GPUs [4,4,5,5]). Fixed size, so that a rank
// with another device count still receives it and says what differs.
constexpr int kMaxListedDevices = 1024;
constexpr int kBootstrapTag = 0;
struct Bootstrap {
    ncclUniqueId id;
    int32_t devices = 0;
    int32_t slot_of_device[kMaxListedDevices] = {};
};

std::string list(const int32_t* gpus, int count) {
    return absl::StrJoin(gpus, gpus + count, ",");
}

// A communicator handle, kept untyped in the header.
ncclComm_t as_comm(void* handle) {
    return static_cast<ncclComm_t>(handle);
}

} // namespace

absl::Status nccl_available() {
    return load_nccl().status();
}

std::string NcclComms::describe() const {
    return absl::StrCat("NCCL ", describe_nccl(*api_));
}

absl::Status NcclComms::check(int code, absl::string_view what) const {
    const auto result = static_cast<ncclResult_t>(code);
    if (result == ncclSuccess) {
        return absl::OkStatus();
    }
    const char* last = api_->ncclGetLastError(nullptr);
    return absl::FailedPreconditionError(absl::StrCat(
        what, " failed: ", api_->ncclGetErrorString(result),
        last != nullptr && *last != '\0' ? absl::StrCat(" (", last, ")") : std::string(),
        result == ncclInvalidUsage ? "; NCCL refuses two ranks on one GPU: with one GPU for "
                                     "several ranks use --cuda_rank_transport=mpi"
                                   : ""));
}

absl::StatusOr<std::shared_ptr<NcclComms>> NcclComms::create(Transport& transport,
                                                             const std::vector<int>& gpu_of_device,
                                                             std::chrono::seconds wait) {
    if (gpu_of_device.empty() || gpu_of_device.size() > kMaxListedDevices) {
        return absl::InvalidArgumentError(absl::StrCat(
            "a rank has ", gpu_of_device.size(), " devices; expected 1 to ", kMaxListedDevices));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(const NcclApi* api, load_nccl());
    std::shared_ptr<NcclComms> comms(new NcclComms());
    comms->api_ = api;
    comms->rank_ = transport.rank();
    comms->ranks_ = transport.ranks();
    for (int gpu : gpu_of_device) {
        auto it = std::find(comms->gpus_.begin(), comms->gpus_.end(), gpu);
        comms->slot_of_device_.push_back(static_cast<int>(it - comms->gpus_.begin()));
        if (it == comms->gpus_.end()) {
            comms->gpus_.push_back(gpu);
        }
    }

    // The id, from rank 0 to every other rank. The buffer lives as long as the message may.
    auto bootstrap = std::make_shared<Bootstrap>();
    std::vector<std::future<absl::Status>> messages;
    auto message_done = [&messages, bootstrap]() {
        auto promise = std::make_shared<std::promise<absl::Status>>();
        messages.push_back(promise->get_future());
        return [promise, bootstrap](absl::Status status) { promise->set_value(std::move(status)); };
    };
    const absl::Span<std::byte> bytes(reinterpret_cast<std::byte*>(bootstrap.get()),
                                      sizeof(Bootstrap));
    if (comms->rank_ == 0) {
        EINSUMMABLE_RETURN_IF_ERROR(
            comms->check(api->ncclGetUniqueId(&bootstrap->id), "ncclGetUniqueId"));
        bootstrap->devices = static_cast<int32_t>(gpu_of_device.size());
        std::copy(comms->slot_of_device_.begin(), comms->slot_of_device_.end(),
                  bootstrap->slot_of_device);
        for (int peer = 1; peer < comms->ranks_; ++peer) {
            transport.send(peer, kBootstrapTag, bytes, message_done());
        }
    } else {
        transport.recv(0, kBootstrapTag, bytes, message_done());
    }
    const auto deadline = std::chrono::steady_clock::now() + wait;
    for (std::future<absl::Status>& message : messages) {
        if (message.wait_until(deadline) != std::future_status::ready) {
            return absl::DeadlineExceededError(absl::StrCat(
                "rank ", comms->rank_, ": NCCL's id ",
                comms->rank_ == 0 ? "was not taken by every rank" : "did not come from rank 0",
                " within ", wait.count(), " s"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(message.get());
    }
    // Every other rank answers whether its devices sit on its GPUs as rank 0's do (NCCL ranks
    // are numbered by that), so that rank 0 neither joins a communicator a rank will not join
    // nor waits for one that runs another backend.
    const std::vector<int32_t> mine(comms->slot_of_device_.begin(), comms->slot_of_device_.end());
    const bool same = bootstrap->devices == static_cast<int32_t>(mine.size()) &&
                      std::equal(mine.begin(), mine.end(), bootstrap->slot_of_device);
    const std::string differ = absl::StrCat(
        "rank ", comms->rank_, "'s devices sit on its GPUs as [", list(mine.data(), mine.size()),
        "], rank 0's as [", list(bootstrap->slot_of_device, bootstrap->devices),
        "] (the n-th GPU a device list names is slot n): every rank of a job on the CUDA "
        "backend needs the same shape of --devices");
    auto answers =
        std::make_shared<std::vector<int32_t>>(static_cast<size_t>(std::max(comms->ranks_, 1)), 1);
    messages.clear();
    if (comms->rank_ == 0) {
        for (int peer = 1; peer < comms->ranks_; ++peer) {
            (*answers)[peer] = 0;
            transport.recv(peer, kBootstrapTag,
                           {reinterpret_cast<std::byte*>(&(*answers)[peer]), sizeof(int32_t)},
                           [done = message_done(), answers](absl::Status status) { done(status); });
        }
    } else {
        (*answers)[0] = same ? 1 : 0;
        transport.send(0, kBootstrapTag,
                       {reinterpret_cast<const std::byte*>(answers->data()), sizeof(int32_t)},
                       [done = message_done(), answers](absl::Status status) { done(status); });
    }
    for (size_t peer = 0; peer < messages.size(); ++peer) {
        if (messages[peer].wait_until(deadline) != std::future_status::ready) {
            return absl::DeadlineExceededError(absl::StrCat(
                "rank ", comms->rank_, ": ",
                comms->rank_ == 0 ? "a rank did not answer NCCL's id"
                                  : "rank 0 did not take the answer to NCCL's id",
                " within ", wait.count(),
                " s (does every rank run the CUDA backend? give each the same --backend)"));
        }
        EINSUMMABLE_RETURN_IF_ERROR(messages[peer].get());
    }
    if (!same) {
        return absl::InvalidArgumentError(differ);
    }
    for (int peer = 1; peer < comms->ranks_ && comms->rank_ == 0; ++peer) {
        if ((*answers)[peer] != 1) {
            return absl::InvalidArgumentError(absl::StrCat(
                "rank ", peer, "'s devices do not sit on its GPUs as rank 0's do ([",
                list(mine.data(), mine.size()),
                "]): every rank of a job on the CUDA backend needs the same shape of --devices"));
        }
    }

    const int per_rank = static_cast<int>(comms->gpus_.size());
    comms->comms_.assign(comms->gpus_.size(), nullptr);
    EINSUMMABLE_RETURN_IF_ERROR(comms->check(api->ncclGroupStart(), "ncclGroupStart"));
    absl::Status joined = absl::OkStatus();
    for (int slot = 0; slot < per_rank && joined.ok(); ++slot) {
        joined = cuda_status(cudaSetDevice(comms->gpus_[slot]), "cudaSetDevice");
        if (joined.ok()) {
            ncclComm_t handle = nullptr;
            joined =
                comms->check(api->ncclCommInitRank(&handle, comms->ranks_ * per_rank, bootstrap->id,
                                                   comms->rank_ * per_rank + slot),
                             absl::StrCat("ncclCommInitRank for GPU ", comms->gpus_[slot]));
            comms->comms_[slot] = handle;
        }
    }
    const absl::Status ended = comms->check(api->ncclGroupEnd(), "joining NCCL's communicators");
    EINSUMMABLE_RETURN_IF_ERROR(joined);
    EINSUMMABLE_RETURN_IF_ERROR(ended);
    // Per GPU: a byte that tokens move, and one per NCCL rank that the connecting exchange
    // below receives into.
    const int nccl_ranks = comms->ranks_ * per_rank;
    for (int gpu : comms->gpus_) {
        void* token = nullptr;
        EINSUMMABLE_RETURN_IF_ERROR(cuda_status(cudaSetDevice(gpu), "cudaSetDevice"));
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaMalloc(&token, static_cast<size_t>(1 + nccl_ranks)),
                        "cudaMalloc of the NCCL token buffer"));
        comms->tokens_.push_back(token);
    }
    EINSUMMABLE_RETURN_IF_ERROR(comms->connect());
    return comms;
}

absl::Status NcclComms::connect() {
    // NCCL connects a pair of ranks on their first message, and the connection is a handshake
    // that blocks the caller until the peer makes it too. The plans' messages are captured into
    // CUDA graphs one at a time, in each rank's own order: a rank capturing a message on one
    // GPU could wait for a peer that is capturing another GPU's first, for ever. So every GPU
    // exchanges one byte with every GPU of every other rank here, in one group, which NCCL
    // connects all together; the captures then find their connections made.
    const int per_rank = static_cast<int>(gpus_.size());
    std::vector<cudaStream_t> streams(gpus_.size(), nullptr);
    absl::Status status = absl::OkStatus();
    for (int slot = 0; slot < per_rank && status.ok(); ++slot) {
        status = cuda_status(cudaSetDevice(gpus_[slot]), "cudaSetDevice");
        if (status.ok()) {
            status = cuda_status(cudaStreamCreateWithFlags(&streams[slot], cudaStreamNonBlocking),
                                 "cudaStreamCreate");
        }
    }
    if (status.ok()) {
        status = check(api_->ncclGroupStart(), "ncclGroupStart");
    }
    if (status.ok()) {
        for (int slot = 0; slot < per_rank && status.ok(); ++slot) {
            auto* token = static_cast<std::byte*>(tokens_[slot]);
            for (int peer = 0; peer < ranks_ * per_rank && status.ok(); ++peer) {
                if (peer / per_rank == rank_) {
                    continue; // GPUs of one rank copy, they send no messages
                }
                status = check(
                    api_->ncclSend(token, 1, ncclUint8, peer, as_comm(comms_[slot]), streams[slot]),
                    "ncclSend (connecting)");
                if (status.ok()) {
                    status = check(api_->ncclRecv(token + 1 + peer, 1, ncclUint8, peer,
                                                  as_comm(comms_[slot]), streams[slot]),
                                   "ncclRecv (connecting)");
                }
            }
        }
        const absl::Status ended = check(api_->ncclGroupEnd(), "connecting every pair of GPUs");
        status = status.ok() ? ended : status;
    }
    for (int slot = 0; slot < per_rank; ++slot) {
        if (streams[slot] != nullptr) {
            cudaSetDevice(gpus_[slot]);
            const absl::Status synced =
                cuda_status(cudaStreamSynchronize(streams[slot]), "the connecting exchange");
            status = status.ok() ? synced : status;
            cudaStreamDestroy(streams[slot]);
        }
    }
    return status;
}

NcclComms::~NcclComms() {
    for (size_t slot = 0; slot < comms_.size(); ++slot) {
        if (comms_[slot] != nullptr) {
            cudaSetDevice(gpus_[slot]);
            api_->ncclCommDestroy(as_comm(comms_[slot]));
        }
    }
    for (size_t slot = 0; slot < tokens_.size(); ++slot) {
        cudaSetDevice(gpus_[slot]);
        cudaFree(tokens_[slot]);
    }
}

absl::StatusOr<int> NcclComms::nccl_rank(int peer, int peer_device) const {
    if (peer < 0 || peer >= ranks_ || peer_device < 0 ||
        peer_device >= static_cast<int>(slot_of_device_.size())) {
        return absl::InvalidArgumentError(absl::StrCat("no device ", peer_device, " on rank ", peer,
                                                       " (", ranks_, " ranks of ",
                                                       slot_of_device_.size(), " devices)"));
    }
    // Every rank's devices sit on its GPUs as this rank's do (create checked it).
    return peer * static_cast<int>(gpus_.size()) + slot_of_device_[peer_device];
}

absl::Status NcclComms::message(bool send, int device, void* data, size_t bytes, int peer,
                                int peer_device, cudaStream_t stream) const {
    EINSUMMABLE_ASSIGN_OR_RETURN(int other, nccl_rank(peer, peer_device));
    const int slot = slot_of_device_[static_cast<size_t>(device)];
    if (bytes == 0) {
        data = tokens_[slot];
        bytes = 1;
    }
    ncclComm_t comm = as_comm(comms_[slot]);
    return send ? check(api_->ncclSend(data, bytes, ncclUint8, other, comm, stream),
                        absl::StrCat("ncclSend to rank ", peer, " device ", peer_device))
                : check(api_->ncclRecv(data, bytes, ncclUint8, other, comm, stream),
                        absl::StrCat("ncclRecv from rank ", peer, " device ", peer_device));
}

absl::Status NcclComms::send(int device, const void* data, size_t bytes, int peer, int peer_device,
                             cudaStream_t stream) const {
    // NCCL only reads a send's buffer.
    return message(true, device, const_cast<void*>(data), bytes, peer, peer_device, stream);
}

absl::Status NcclComms::recv(int device, void* data, size_t bytes, int peer, int peer_device,
                             cudaStream_t stream) const {
    return message(false, device, data, bytes, peer, peer_device, stream);
}

} // namespace einsummable::runtime::cuda
