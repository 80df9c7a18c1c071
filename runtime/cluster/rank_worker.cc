#include "runtime/cluster/rank_worker.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "spdlog/spdlog.h"

namespace einsummable::runtime::cluster {

RankWorker::RankWorker(int rank, std::shared_ptr<Backend> backend, std::string version)
    : rank_(rank), backend_(std::move(backend)), version_(std::move(version)) {}

RankWorker::RankWorker(int rank, absl::Status backend_error, std::string version)
    : rank_(rank),
      backend_error_(backend_error.code(),
                     absl::StrCat("rank ", rank, " has no backend: ", backend_error.message())),
      version_(std::move(version)) {}

RankWorker::~RankWorker() = default;

v1::RankReply RankWorker::handle(const v1::RankRequest& request) {
    absl::StatusOr<v1::RankReply> reply = dispatch(request);
    if (!reply.ok()) {
        v1::RankReply failed;
        failed.set_code(static_cast<int>(reply.status().code()));
        failed.set_message(std::string(reply.status().message()));
        reply = std::move(failed);
    }
    reply->set_id(request.id());
    return *std::move(reply);
}

absl::StatusOr<std::shared_ptr<RankWorker::Part>> RankWorker::part(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = parts_.find(id);
    if (it == parts_.end()) {
        return absl::NotFoundError(absl::StrCat("rank ", rank_, " has no part of executable ", id));
    }
    return it->second;
}

absl::StatusOr<std::shared_ptr<ResidentMemory>> RankWorker::resident(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = residents_.find(id);
    if (it == residents_.end()) {
        return absl::NotFoundError(absl::StrCat("rank ", rank_, " has no resident memory ", id));
    }
    return it->second;
}

absl::StatusOr<v1::RankReply> RankWorker::dispatch(const v1::RankRequest& request) {
    const auto command = request.command_case();
    if (backend_ == nullptr && command != v1::RankRequest::kPing &&
        command != v1::RankRequest::kShutdown) {
        return backend_error_;
    }
    v1::RankReply reply;
    switch (request.command_case()) {
    case v1::RankRequest::kHello: {
        const v1::Hello& hello = request.hello();
        if (hello.version() != version_) {
            return absl::FailedPreconditionError(absl::StrCat("rank ", rank_, " runs einsummabled ",
                                                              version_, "; rank 0 runs ",
                                                              hello.version()));
        }
        if (hello.backend() != backend_->name()) {
            return absl::FailedPreconditionError(absl::StrCat(
                "rank ", rank_, " runs the ", backend_->name(), " backend; rank 0 runs the ",
                hello.backend(), " backend (give every rank the same --backend)"));
        }
        if (hello.devices_per_rank() != backend_->devices()) {
            return absl::FailedPreconditionError(
                absl::StrCat("rank ", rank_, " has ", backend_->devices(),
                             " devices; rank 0 expects ", hello.devices_per_rank(), " per rank"));
        }
        reply.add_values(backend_->devices());
        return reply;
    }
    case v1::RankRequest::kPrepare: {
        const v1::Prepare& prepare = request.prepare();
        auto part = std::make_shared<Part>();
        EINSUMMABLE_ASSIGN_OR_RETURN(part->received, from_wire(prepare.part()));
        std::shared_ptr<ResidentMemory> memory;
        if (prepare.resident() != 0) {
            EINSUMMABLE_ASSIGN_OR_RETURN(memory, resident(prepare.resident()));
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(part->executable,
                                     backend_->prepare(part->received->graph, std::move(memory)));
        std::lock_guard<std::mutex> lock(mutex_);
        if (!parts_.emplace(prepare.executable(), std::move(part)).second) {
            return absl::AlreadyExistsError(absl::StrCat(
                "rank ", rank_, " already has a part of executable ", prepare.executable()));
        }
        return reply;
    }
    case v1::RankRequest::kWriteBuffer: {
        const v1::WriteBuffer& write = request.write_buffer();
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Part> p, part(write.executable()));
        const std::string& data = write.data();
        EINSUMMABLE_RETURN_IF_ERROR(p->executable->write_buffer(
            write.buffer(), {reinterpret_cast<const std::byte*>(data.data()), data.size()}));
        return reply;
    }
    case v1::RankRequest::kReadBuffer: {
        const v1::ReadBuffer& read = request.read_buffer();
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Part> p, part(read.executable()));
        const auto& buffers = p->received->graph.buffers;
        if (read.buffer() < 0 || read.buffer() >= static_cast<int>(buffers.size())) {
            return absl::InvalidArgumentError(absl::StrCat(
                "rank ", rank_, ": buffer b", read.buffer(), " does not exist in its part"));
        }
        std::string* data = reply.mutable_data();
        data->resize(static_cast<size_t>(buffers[read.buffer()].bytes()));
        EINSUMMABLE_RETURN_IF_ERROR(p->executable->read_buffer(
            read.buffer(), {reinterpret_cast<std::byte*>(data->data()), data->size()}));
        return reply;
    }
    case v1::RankRequest::kRun: {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Part> p, part(request.run().executable()));
        std::lock_guard<std::mutex> lock(p->run_mutex);
        EINSUMMABLE_RETURN_IF_ERROR(p->executable->run());
        for (const std::vector<int64_t>& row : p->executable->bytes_moved()) {
            reply.mutable_values()->Add(row.begin(), row.end());
        }
        return reply;
    }
    case v1::RankRequest::kRelease: {
        std::lock_guard<std::mutex> lock(mutex_);
        parts_.erase(request.release().executable());
        return reply;
    }
    case v1::RankRequest::kAllocateResident: {
        const v1::AllocateResident& allocate = request.allocate_resident();
        EINSUMMABLE_ASSIGN_OR_RETURN(
            std::shared_ptr<ResidentMemory> memory,
            backend_->allocate_resident({allocate.bytes().begin(), allocate.bytes().end()}));
        std::lock_guard<std::mutex> lock(mutex_);
        if (!residents_.emplace(allocate.resident(), std::move(memory)).second) {
            return absl::AlreadyExistsError(
                absl::StrCat("rank ", rank_, " already has resident memory ", allocate.resident()));
        }
        return reply;
    }
    case v1::RankRequest::kResidentWrite: {
        const v1::ResidentWrite& write = request.resident_write();
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<ResidentMemory> memory,
                                     resident(write.resident()));
        const std::string& data = write.data();
        EINSUMMABLE_RETURN_IF_ERROR(
            memory->write(write.device(), write.offset(),
                          {reinterpret_cast<const std::byte*>(data.data()), data.size()}));
        return reply;
    }
    case v1::RankRequest::kResidentRead: {
        const v1::ResidentRead& read = request.resident_read();
        EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<ResidentMemory> memory,
                                     resident(read.resident()));
        if (read.bytes() < 0 || read.bytes() > (int64_t{1} << 40)) {
            return absl::InvalidArgumentError(
                absl::StrCat("rank ", rank_, ": a resident read of ", read.bytes(), " bytes"));
        }
        std::string* data = reply.mutable_data();
        data->resize(static_cast<size_t>(read.bytes()));
        EINSUMMABLE_RETURN_IF_ERROR(
            memory->read(read.device(), read.offset(),
                         {reinterpret_cast<std::byte*>(data->data()), data->size()}));
        return reply;
    }
    case v1::RankRequest::kReleaseResident: {
        std::lock_guard<std::mutex> lock(mutex_);
        residents_.erase(request.release_resident().resident());
        return reply;
    }
    case v1::RankRequest::kShutdown:
    case v1::RankRequest::kPing:
        return reply;
    case v1::RankRequest::COMMAND_NOT_SET:
        break;
    }
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank_, ": a request without a command (id ", request.id(), ")"));
}

} // namespace einsummable::runtime::cluster
