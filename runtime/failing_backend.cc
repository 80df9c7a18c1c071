#include "runtime/failing_backend.h"

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "compiler/support/status_macros.h"

namespace einsummable::runtime {
namespace {

// What the backend and its executables share: runs left before the failure, and the failure.
class Fault {
public:
    Fault(int64_t runs, absl::Status error) : runs_left_(runs), error_(std::move(error)) {}

    // OK while the backend has not failed.
    absl::Status failed() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return failed_ ? error_ : absl::OkStatus();
    }
    // OK for a run that may go ahead; the error for the one that fails, and all after it.
    absl::Status take_run() {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!failed_ && runs_left_ > 0) {
            --runs_left_;
            return absl::OkStatus();
        }
        failed_ = true;
        return error_;
    }

private:
    mutable std::mutex mutex_;
    int64_t runs_left_;
    bool failed_ = false;
    const absl::Status error_;
};

class FailingExecutable final : public Executable {
public:
    FailingExecutable(std::unique_ptr<Executable> inner, std::shared_ptr<Fault> fault)
        : inner_(std::move(inner)), fault_(std::move(fault)) {}

    absl::Status write_buffer(physical::BufferId buffer,
                              absl::Span<const std::byte> data) override {
        EINSUMMABLE_RETURN_IF_ERROR(fault_->failed());
        return inner_->write_buffer(buffer, data);
    }
    absl::Status read_buffer(physical::BufferId buffer, absl::Span<std::byte> data) override {
        EINSUMMABLE_RETURN_IF_ERROR(fault_->failed());
        return inner_->read_buffer(buffer, data);
    }
    absl::Status run() override {
        EINSUMMABLE_RETURN_IF_ERROR(fault_->take_run());
        return inner_->run();
    }
    std::vector<std::vector<int64_t>> bytes_moved() const override { return inner_->bytes_moved(); }
    std::vector<int64_t> allocated_bytes() const override { return inner_->allocated_bytes(); }

private:
    std::unique_ptr<Executable> inner_;
    std::shared_ptr<Fault> fault_;
};

class FailingBackend final : public Backend {
public:
    FailingBackend(std::shared_ptr<Backend> inner, std::shared_ptr<Fault> fault)
        : inner_(std::move(inner)), fault_(std::move(fault)) {}

    std::string name() const override { return inner_->name(); }
    int devices() const override { return inner_->devices(); }
    KernelsInfo kernels() const override { return inner_->kernels(); }
    logical::AttentionSplits attention_splits() const override {
        return inner_->attention_splits();
    }
    absl::Status unrecoverable_error() const override { return fault_->failed(); }

    using Backend::prepare;
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident) override {
        return prepare(graph, std::move(resident), nullptr);
    }
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const physical::ExecGraph& graph, std::shared_ptr<ResidentMemory> resident,
            const support::Cancellation* cancellation) override {
        EINSUMMABLE_RETURN_IF_ERROR(fault_->failed());
        EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<Executable> inner,
                                     inner_->prepare(graph, std::move(resident), cancellation));
        return std::unique_ptr<Executable>(
            std::make_unique<FailingExecutable>(std::move(inner), fault_));
    }
    absl::StatusOr<std::shared_ptr<ResidentMemory>>
    allocate_resident(const std::vector<int64_t>& bytes) override {
        EINSUMMABLE_RETURN_IF_ERROR(fault_->failed());
        return inner_->allocate_resident(bytes);
    }

private:
    std::shared_ptr<Backend> inner_;
    std::shared_ptr<Fault> fault_;
};

} // namespace

std::shared_ptr<Backend> fail_unrecoverably_after(std::shared_ptr<Backend> backend, int64_t runs,
                                                  absl::Status error) {
    return std::make_shared<FailingBackend>(std::move(backend),
                                            std::make_shared<Fault>(runs, std::move(error)));
}

} // namespace einsummable::runtime
