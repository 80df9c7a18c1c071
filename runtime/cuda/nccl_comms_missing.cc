// NcclComms (rank_messages.h) in a build configured without NCCL's header: every use says so.
// The mpi path (--cuda_rank_transport=mpi) needs no NCCL.

#include "absl/status/status.h"
#include "runtime/cuda/rank_messages.h"

namespace einsummable::runtime::cuda {
namespace {

absl::Status missing() {
    return absl::FailedPreconditionError(
        "this build has no NCCL (nccl.h was not found when it was configured: the CUDA "
        "toolkit's libnccl-dev, or pip install nvidia-nccl-cu13 into .venv, then configure "
        "again); use --cuda_rank_transport=mpi");
}

} // namespace

absl::Status nccl_available() {
    return missing();
}

absl::StatusOr<std::shared_ptr<NcclComms>> NcclComms::create(Transport&, const std::vector<int>&,
                                                             std::chrono::seconds) {
    return missing();
}

NcclComms::~NcclComms() = default;

std::string NcclComms::describe() const {
    return "no NCCL";
}

absl::Status NcclComms::send(int, const void*, size_t, int, int, cudaStream_t) const {
    return missing();
}

absl::Status NcclComms::recv(int, void*, size_t, int, int, cudaStream_t) const {
    return missing();
}

} // namespace einsummable::runtime::cuda
