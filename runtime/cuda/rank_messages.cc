#include "runtime/cuda/rank_messages.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/host_flag.h"

namespace einsummable::runtime::cuda {

using kernels::cuda::cuda_status;

absl::StatusOr<RankTransportKind> parse_rank_transport(absl::string_view text) {
    if (text == "nccl") {
        return RankTransportKind::nccl;
    }
    if (text == "mpi") {
        return RankTransportKind::mpi;
    }
    return absl::InvalidArgumentError(absl::StrCat("unknown rank transport '", text,
                                                   "' (runtime::check_backend_request "
                                                   "names the choices)"));
}

absl::StatusOr<std::unique_ptr<StagedMessages>>
StagedMessages::create(std::shared_ptr<Transport> transport, int messages) {
    std::unique_ptr<StagedMessages> staged(new StagedMessages());
    staged->transport_ = std::move(transport);
    staged->slots_.resize(static_cast<size_t>(messages));
    if (messages > 0) {
        void* flags = nullptr;
        EINSUMMABLE_RETURN_IF_ERROR(
            cuda_status(cudaHostAlloc(&flags, sizeof(uint32_t) * static_cast<size_t>(messages),
                                      cudaHostAllocMapped | cudaHostAllocPortable),
                        "cudaHostAlloc of the flags of messages through host memory"));
        staged->flags_ = static_cast<uint32_t*>(flags);
        std::memset(flags, 0, sizeof(uint32_t) * static_cast<size_t>(messages));
    }
    return staged;
}

StagedMessages::~StagedMessages() {
    {
        // Receives too: after a failed graph one may still be pending, and the transport
        // would write into freed memory. A broken cluster fails what is pending.
        std::unique_lock<std::mutex> lock(mutex_);
        idle_.wait(lock, [this] { return in_flight_ == 0; });
    }
    if (flags_ != nullptr) {
        cudaFreeHost(flags_);
    }
}

void StagedMessages::record(const Slot& slot, bool send, const absl::Status& status) {
    if (status.ok()) {
        return;
    }
    std::lock_guard<std::mutex> lock(mutex_);
    if (error_.ok()) {
        error_ =
            absl::Status(status.code(), absl::StrCat(send ? "sending" : "receiving", " message ",
                                                     slot.tag, send ? " to" : " from", " rank ",
                                                     slot.peer, ": ", status.message()));
    }
}

void StagedMessages::finished(bool send) {
    std::lock_guard<std::mutex> lock(mutex_);
    sending_ -= send ? 1 : 0;
    if (--in_flight_ == 0 || (send && sending_ == 0)) {
        idle_.notify_all();
    }
}

void CUDART_CB StagedMessages::start_send(void* data) {
    // A host function: no CUDA call here. The transport copies or sends from another thread.
    Slot& slot = *static_cast<Slot*>(data);
    StagedMessages* self = slot.self;
    {
        std::lock_guard<std::mutex> lock(self->mutex_);
        ++self->sending_;
        ++self->in_flight_;
    }
    self->transport_->send(slot.peer, slot.tag, {slot.send_data, slot.bytes},
                           [self, &slot](absl::Status status) {
                               self->record(slot, true, status);
                               self->finished(true);
                           });
}

void CUDART_CB StagedMessages::start_recv(void* data) {
    Slot& slot = *static_cast<Slot*>(data);
    StagedMessages* self = slot.self;
    __atomic_store_n(slot.flag, 0u, __ATOMIC_RELEASE);
    {
        std::lock_guard<std::mutex> lock(self->mutex_);
        ++self->in_flight_;
    }
    self->transport_->recv(slot.peer, slot.tag, {slot.recv_data, slot.bytes},
                           [self, &slot](absl::Status status) {
                               // The failure first, so that the run that waits for this
                               // message reports it; then the flag, also on failure (the
                               // waiting kernel must end); last the count the destructor
                               // waits for, after which nothing here is touched.
                               self->record(slot, false, status);
                               __atomic_store_n(slot.flag, 1u, __ATOMIC_RELEASE);
                               self->finished(false);
                           });
}

absl::Status StagedMessages::enqueue_send(int slot_idx, int peer, int tag,
                                          absl::Span<const std::byte> data, cudaStream_t stream) {
    Slot& slot = slots_.at(static_cast<size_t>(slot_idx));
    slot = Slot{this, peer, tag, data.data(), nullptr, data.size(), nullptr};
    return cuda_status(cudaLaunchHostFunc(stream, &StagedMessages::start_send, &slot),
                       "cudaLaunchHostFunc (a send)");
}

absl::Status StagedMessages::enqueue_recv(int slot_idx, int peer, int tag,
                                          absl::Span<std::byte> data, cudaStream_t stream) {
    Slot& slot = slots_.at(static_cast<size_t>(slot_idx));
    slot = Slot{this, peer, tag, nullptr, data.data(), data.size(), flags_ + slot_idx};
    EINSUMMABLE_RETURN_IF_ERROR(
        cuda_status(cudaLaunchHostFunc(stream, &StagedMessages::start_recv, &slot),
                    "cudaLaunchHostFunc (a recv)"));
    return cuda_status(kernels::cuda::launch_wait_host_flag(slot.flag, stream),
                       "the kernel waiting for a message");
}

absl::Status StagedMessages::finish_run() {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return sending_ == 0; });
    absl::Status error = std::move(error_);
    error_ = absl::OkStatus();
    return error;
}

} // namespace einsummable::runtime::cuda
