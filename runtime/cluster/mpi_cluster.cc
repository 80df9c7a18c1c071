#include "runtime/cluster/mpi_cluster.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <mpi.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace einsummable::runtime::cluster {

bool launched_by_mpi() {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "PMI_RANK"}) {
        if (std::getenv(name) != nullptr) {
            return true;
        }
    }
    return false;
}

namespace {

constexpr int kRequestTag = 1;
constexpr int kReplyTag = 2;
// A message longer than an int counts goes as several MPI messages of at most this many bytes
// under one tag, which MPI delivers in order between one pair of ranks.
constexpr size_t kPieceBytes = size_t{1} << 30;

std::string mpi_error(const char* call, int code) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(code, text, &length);
    return absl::StrCat(call, " failed: ", std::string(text, static_cast<size_t>(length)));
}

// Where a reply rank 0 waits for goes.
using ReplyPromise = std::promise<absl::StatusOr<v1::RankReply>>;

// One transfer in flight: its MPI requests (a piece each) and what to call when all are done.
struct Transfer {
    bool control = false; // a request or reply between ranks, not a plan's message
    bool receive = false;
    std::vector<MPI_Request> requests;
    std::vector<int> piece_bytes; // a receive's: what each piece must hold
    int peer = 0;
    int tag = 0;
    std::function<void(absl::Status)> done;
    std::string owned; // a control message's bytes, kept until sent
};

// What the progress thread is asked to start.
struct Start {
    enum class Kind { send, recv, control_send } kind;
    MPI_Comm comm = MPI_COMM_NULL;
    int peer = 0;
    int tag = 0;
    const std::byte* send_data = nullptr;
    std::byte* recv_data = nullptr;
    size_t bytes = 0;
    std::string owned;
    std::function<void(absl::Status)> done;
};

class Mpi final : public MpiCluster, public std::enable_shared_from_this<Mpi> {
public:
    Mpi() = default;
    ~Mpi() override { stop(); }

    absl::Status init() {
        std::promise<absl::Status> ready;
        std::future<absl::Status> started = ready.get_future();
        thread_ = std::thread([this, &ready] { progress(ready); });
        absl::Status status = started.get();
        if (!status.ok()) {
            thread_.join();
        }
        return status;
    }

    int rank() const override { return rank_; }
    int ranks() const override { return ranks_; }

    std::shared_ptr<Transport> transport() override;
    std::shared_ptr<RankChannel> channel() override;

    absl::Status serve(RankWorker& worker) override {
        // Requests run on threads of their own, so a ping is answered while a run goes on;
        // rank 0 waits for each reply before it sends what depends on it.
        int handling = 0;
        std::mutex handling_mutex;
        std::condition_variable handled;
        // The reply to `request` (nullopt: its bytes did not parse), sent to rank 0.
        auto answer = [this, &worker](const std::optional<v1::RankRequest>& request) {
            v1::RankReply reply;
            if (!request) {
                reply.set_code(static_cast<int>(absl::StatusCode::kInvalidArgument));
                reply.set_message(absl::StrCat("rank ", rank_, ": a request that does not parse"));
            } else {
                reply = worker.handle(*request);
            }
            std::promise<absl::Status> sent;
            std::future<absl::Status> was_sent = sent.get_future();
            send_control(0, kReplyTag, reply.SerializeAsString(),
                         [&sent](absl::Status status) { sent.set_value(status); });
            return was_sent.get();
        };
        absl::Status result = absl::OkStatus();
        while (true) {
            std::string bytes;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                requests_ready_.wait(lock, [&] { return !requests_.empty() || finished_; });
                if (requests_.empty()) {
                    result = absl::UnavailableError("MPI ended before rank 0 sent Shutdown");
                    break;
                }
                bytes = std::move(requests_.front());
                requests_.pop_front();
            }
            std::optional<v1::RankRequest> request(std::in_place);
            if (!request->ParseFromString(bytes)) {
                request.reset();
            }
            const auto command =
                request ? request->command_case() : v1::RankRequest::COMMAND_NOT_SET;
            if (command == v1::RankRequest::kPing || command == v1::RankRequest::kShutdown) {
                if (absl::Status status = answer(request); !status.ok()) {
                    result = status;
                    break;
                }
                if (command == v1::RankRequest::kShutdown) {
                    spdlog::info("rank {}: rank 0 asked it to shut down", rank_);
                    break;
                }
                continue;
            }
            {
                std::lock_guard<std::mutex> lock(handling_mutex);
                ++handling;
            }
            std::thread([&, request = std::move(request)] {
                if (absl::Status status = answer(request); !status.ok()) {
                    spdlog::error("rank {}: could not answer rank 0: {}", rank_, status.ToString());
                }
                std::lock_guard<std::mutex> lock(handling_mutex);
                --handling;
                handled.notify_all();
            }).detach();
        }
        std::unique_lock<std::mutex> lock(handling_mutex);
        handled.wait(lock, [&] { return handling == 0; });
        return result;
    }

    void fail_pending(const absl::Status& error) {
        std::map<uint64_t, std::shared_ptr<ReplyPromise>> waiting;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (failed_.ok()) {
                failed_ = error;
            }
            waiting.swap(waiting_);
        }
        wake_.notify_all();
        for (auto& [id, promise] : waiting) {
            promise->set_value(error);
        }
    }

    [[noreturn]] void abort(int code) override {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            abort_code_ = code;
        }
        wake_.notify_all();
        // The progress thread calls MPI_Abort, which ends the process; should it not, leave
        // without MPI.
        std::this_thread::sleep_for(std::chrono::seconds(10));
        std::_Exit(code);
    }

    void stop() override {
        std::call_once(stopped_, [this] {
            if (!thread_.joinable()) {
                return;
            }
            if (rank_ == 0 && ranks_ > 1) {
                shutdown_ranks();
            }
            {
                std::lock_guard<std::mutex> lock(mutex_);
                stopping_ = true;
            }
            wake_.notify_all();
            thread_.join();
        });
    }

    // Rank 0's requests, matched to their replies by id.
    std::future<absl::StatusOr<v1::RankReply>> call(int rank, const v1::RankRequest& request) {
        auto promise = std::make_shared<ReplyPromise>();
        std::future<absl::StatusOr<v1::RankReply>> future = promise->get_future();
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (finished_) {
                promise->set_value(absl::UnavailableError("MPI has ended"));
                return future;
            }
            waiting_[request.id()] = promise;
        }
        send_control(rank, kRequestTag, request.SerializeAsString(),
                     [this, id = request.id()](absl::Status status) {
                         if (status.ok()) {
                             return;
                         }
                         std::shared_ptr<ReplyPromise> waiter;
                         {
                             std::lock_guard<std::mutex> lock(mutex_);
                             auto it = waiting_.find(id);
                             if (it == waiting_.end()) {
                                 return;
                             }
                             waiter = std::move(it->second);
                             waiting_.erase(it);
                         }
                         waiter->set_value(status);
                     });
        return future;
    }

    void submit(Start start) {
        absl::Status refused;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (finished_ || stopping_) {
                refused = absl::UnavailableError("MPI has ended");
            } else if (!failed_.ok() && start.kind != Start::Kind::control_send) {
                refused = failed_;
            } else {
                starts_.push_back(std::move(start));
            }
        }
        if (!refused.ok()) {
            start.done(refused); // outside the lock: a callback may take it (call's does)
            return;
        }
        wake_.notify_all();
    }

    MPI_Comm data_comm() const { return data_comm_; }
    // Set by the progress thread before start() returns.
    int max_tag() const { return max_tag_; }

private:
    void send_control(int peer, int tag, std::string bytes,
                      std::function<void(absl::Status)> done) {
        Start start;
        start.kind = Start::Kind::control_send;
        start.comm = control_comm_;
        start.peer = peer;
        start.tag = tag;
        start.owned = std::move(bytes);
        start.done = std::move(done);
        submit(std::move(start));
    }

    void shutdown_ranks() {
        std::vector<std::future<absl::StatusOr<v1::RankReply>>> replies;
        for (int r = 1; r < ranks_; ++r) {
            v1::RankRequest request;
            request.set_id(UINT64_MAX - static_cast<uint64_t>(r));
            request.mutable_shutdown();
            replies.push_back(call(r, request));
        }
        for (int r = 1; r < ranks_; ++r) {
            if (replies[r - 1].wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
                spdlog::warn("rank {} did not answer Shutdown within 30 s", r);
            }
        }
    }

    // The progress thread: initialises MPI, then starts what is submitted, polls what is in
    // flight and the incoming control messages, and calls back; ends MPI when stopped.
    void progress(std::promise<absl::Status>& ready) {
        int provided = 0;
        int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
        if (code != MPI_SUCCESS) {
            ready.set_value(absl::UnavailableError(mpi_error("MPI_Init_thread", code)));
            return;
        }
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
        MPI_Comm_size(MPI_COMM_WORLD, &ranks_);
        MPI_Comm_dup(MPI_COMM_WORLD, &control_comm_);
        MPI_Comm_dup(MPI_COMM_WORLD, &data_comm_);
        MPI_Comm_set_errhandler(control_comm_, MPI_ERRORS_RETURN);
        MPI_Comm_set_errhandler(data_comm_, MPI_ERRORS_RETURN);
        int* tag_ub = nullptr;
        int found = 0;
        MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
        max_tag_ = found != 0 && tag_ub != nullptr ? *tag_ub : 32767;
        ready.set_value(absl::OkStatus());

        std::list<Transfer> active;
        auto idle_wait = std::chrono::microseconds(20);
        while (true) {
            std::deque<Start> starts;
            bool stopping = false;
            absl::Status failed;
            int abort_code = -1;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                stopping = stopping_;
                starts.swap(starts_);
                failed = failed_;
                abort_code = abort_code_;
            }
            if (abort_code >= 0) {
                MPI_Abort(MPI_COMM_WORLD, abort_code);
            }
            if (!failed.ok()) {
                abandon(active, failed);
            }
            bool progressed = !starts.empty();
            for (Start& start : starts) {
                begin(start, active);
            }
            progressed |= poll_control();
            progressed |= poll_active(active);
            if (stopping && active.empty()) {
                break;
            }
            if (progressed) {
                idle_wait = std::chrono::microseconds(20);
            } else {
                std::unique_lock<std::mutex> lock(mutex_);
                wake_.wait_for(lock, idle_wait,
                               [&] { return !starts_.empty() || stopping_ || abort_code_ >= 0; });
                idle_wait = std::min<std::chrono::microseconds>(idle_wait * 2,
                                                                std::chrono::microseconds(1000));
            }
        }
        MPI_Comm_free(&control_comm_);
        MPI_Comm_free(&data_comm_);
        MPI_Finalize();
        std::map<uint64_t, std::shared_ptr<ReplyPromise>> waiting;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            finished_ = true;
            waiting.swap(waiting_);
        }
        requests_ready_.notify_all();
        for (auto& [id, promise] : waiting) {
            promise->set_value(absl::UnavailableError("MPI ended before the rank answered"));
        }
    }

    void begin(Start& start, std::list<Transfer>& active) {
        Transfer transfer;
        transfer.done = std::move(start.done);
        transfer.control = start.kind == Start::Kind::control_send;
        transfer.receive = start.kind == Start::Kind::recv;
        transfer.peer = start.peer;
        transfer.tag = start.tag;
        if (start.tag > max_tag_) {
            transfer.done(absl::InvalidArgumentError(absl::StrCat(
                "message tag ", start.tag, " is above MPI's largest tag, ", max_tag_)));
            return;
        }
        const std::byte* send_data = start.send_data;
        size_t bytes = start.bytes;
        if (start.kind == Start::Kind::control_send) {
            transfer.owned = std::move(start.owned);
            send_data = reinterpret_cast<const std::byte*>(transfer.owned.data());
            bytes = transfer.owned.size();
            if (bytes > static_cast<size_t>(INT_MAX)) {
                transfer.done(absl::InvalidArgumentError(
                    absl::StrCat("a request of ", bytes, " bytes; at most ", INT_MAX)));
                return;
            }
        }
        // Pieces of at most kPieceBytes; an empty message is one empty piece.
        size_t offset = 0;
        do {
            const int piece = static_cast<int>(std::min(kPieceBytes, bytes - offset));
            MPI_Request request = MPI_REQUEST_NULL;
            int code = MPI_SUCCESS;
            if (start.kind == Start::Kind::recv) {
                code = MPI_Irecv(start.recv_data + offset, piece, MPI_BYTE, start.peer, start.tag,
                                 start.comm, &request);
            } else {
                code = MPI_Isend(send_data + offset, piece, MPI_BYTE, start.peer, start.tag,
                                 start.comm, &request);
            }
            if (code != MPI_SUCCESS) {
                // Pieces already started are left to complete; their buffer is the caller's.
                transfer.done(absl::UnavailableError(absl::StrCat(
                    mpi_error(start.kind == Start::Kind::recv ? "MPI_Irecv" : "MPI_Isend", code),
                    " (rank ", start.peer, ", tag ", start.tag, ")")));
                return;
            }
            transfer.requests.push_back(request);
            if (transfer.receive) {
                transfer.piece_bytes.push_back(piece);
            }
            offset += static_cast<size_t>(piece);
        } while (offset < bytes);
        active.push_back(std::move(transfer));
    }

    // A rank has stopped answering (fail_pending): the plans' messages in flight end now with
    // `error`. Receives are cancelled; sends are let go (MPI may still deliver them). Requests
    // and replies between the ranks are kept: the shutdown still goes to the ranks that live.
    void abandon(std::list<Transfer>& active, const absl::Status& error) {
        for (auto it = active.begin(); it != active.end();) {
            if (it->control) {
                ++it;
                continue;
            }
            for (MPI_Request& request : it->requests) {
                if (request != MPI_REQUEST_NULL) {
                    if (it->receive) {
                        MPI_Cancel(&request);
                    }
                    MPI_Request_free(&request);
                }
            }
            auto done = std::move(it->done);
            it = active.erase(it);
            done(error);
        }
    }

    bool poll_active(std::list<Transfer>& active) {
        bool progressed = false;
        std::vector<MPI_Status> statuses;
        for (auto it = active.begin(); it != active.end();) {
            int complete = 0;
            // Only a receive's statuses are read: whether each piece had the size expected.
            statuses.resize(it->receive ? it->requests.size() : 0);
            const int code =
                MPI_Testall(static_cast<int>(it->requests.size()), it->requests.data(), &complete,
                            it->receive ? statuses.data() : MPI_STATUSES_IGNORE);
            if (code != MPI_SUCCESS || complete != 0) {
                absl::Status status = code == MPI_SUCCESS
                                          ? received_sizes(*it, statuses)
                                          : absl::UnavailableError(mpi_error("MPI_Testall", code));
                auto done = std::move(it->done);
                it = active.erase(it);
                done(status);
                progressed = true;
            } else {
                ++it;
            }
        }
        return progressed;
    }

    // A shorter message than the receive expected completes without an MPI error: the
    // Transport's contract makes it one.
    static absl::Status received_sizes(const Transfer& transfer,
                                       const std::vector<MPI_Status>& statuses) {
        for (size_t i = 0; i < transfer.piece_bytes.size(); ++i) {
            int count = 0;
            MPI_Get_count(&statuses[i], MPI_BYTE, &count);
            if (count != transfer.piece_bytes[i]) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "message ", transfer.tag, " from rank ", transfer.peer, " has ", count,
                    " bytes in piece ", i, "; the receiver expects ", transfer.piece_bytes[i]));
            }
        }
        return absl::OkStatus();
    }

    // Requests (other ranks) or replies (rank 0) that arrived on the control communicator.
    bool poll_control() {
        int flag = 0;
        MPI_Message message;
        MPI_Status status;
        if (MPI_Improbe(MPI_ANY_SOURCE, MPI_ANY_TAG, control_comm_, &flag, &message, &status) !=
                MPI_SUCCESS ||
            flag == 0) {
            return false;
        }
        int count = 0;
        MPI_Get_count(&status, MPI_BYTE, &count);
        std::string bytes(static_cast<size_t>(std::max(count, 0)), '\0');
        MPI_Mrecv(bytes.data(), count, MPI_BYTE, &message, MPI_STATUS_IGNORE);
        if (status.MPI_TAG == kRequestTag) {
            {
                std::lock_guard<std::mutex> lock(mutex_);
                requests_.push_back(std::move(bytes));
            }
            requests_ready_.notify_all();
            return true;
        }
        v1::RankReply reply;
        if (!reply.ParseFromString(bytes)) {
            spdlog::error("rank {}: a reply from rank {} that does not parse", rank_,
                          status.MPI_SOURCE);
            return true;
        }
        std::shared_ptr<ReplyPromise> waiter;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            auto it = waiting_.find(reply.id());
            if (it != waiting_.end()) {
                waiter = std::move(it->second);
                waiting_.erase(it);
            }
        }
        if (waiter != nullptr) {
            waiter->set_value(std::move(reply));
        }
        return true;
    }

    std::thread thread_;
    std::once_flag stopped_;
    int rank_ = 0;
    int ranks_ = 1;
    int max_tag_ = 32767;
    MPI_Comm control_comm_ = MPI_COMM_NULL;
    MPI_Comm data_comm_ = MPI_COMM_NULL;

    std::mutex mutex_;
    std::condition_variable wake_;
    std::condition_variable requests_ready_;
    std::deque<Start> starts_;         // guarded by mutex_
    std::deque<std::string> requests_; // guarded by mutex_
    bool stopping_ = false;            // guarded by mutex_
    bool finished_ = false;            // guarded by mutex_
    absl::Status failed_;              // guarded by mutex_: fail_pending's error
    int abort_code_ = -1;              // guarded by mutex_: abort()'s code, once asked
    std::map<uint64_t, std::shared_ptr<ReplyPromise>> waiting_; // guarded by mutex_
};

class MpiTransport final : public Transport {
public:
    explicit MpiTransport(std::shared_ptr<Mpi> mpi) : mpi_(std::move(mpi)) {}
    int rank() const override { return mpi_->rank(); }
    int ranks() const override { return mpi_->ranks(); }
    int max_tag() const override { return mpi_->max_tag(); }
    void send(int peer, int tag, absl::Span<const std::byte> data, Done done) override {
        Start start = message(Start::Kind::send, peer, tag, data.size(), std::move(done));
        start.send_data = data.data();
        mpi_->submit(std::move(start));
    }
    void recv(int peer, int tag, absl::Span<std::byte> data, Done done) override {
        Start start = message(Start::Kind::recv, peer, tag, data.size(), std::move(done));
        start.recv_data = data.data();
        mpi_->submit(std::move(start));
    }

private:
    Start message(Start::Kind kind, int peer, int tag, size_t bytes, Done done) const {
        Start start;
        start.kind = kind;
        start.comm = mpi_->data_comm();
        start.peer = peer;
        start.tag = tag;
        start.bytes = bytes;
        start.done = std::move(done);
        return start;
    }

    std::shared_ptr<Mpi> mpi_;
};

class MpiChannel final : public RankChannel {
public:
    explicit MpiChannel(std::shared_ptr<Mpi> mpi) : mpi_(std::move(mpi)) {}
    int ranks() const override { return mpi_->ranks(); }
    std::future<absl::StatusOr<v1::RankReply>> call(int rank,
                                                    const v1::RankRequest& request) override {
        return mpi_->call(rank, request);
    }
    void fail_pending(const absl::Status& error) override { mpi_->fail_pending(error); }

private:
    std::shared_ptr<Mpi> mpi_;
};

std::shared_ptr<Transport> Mpi::transport() {
    return std::make_shared<MpiTransport>(shared_from_this());
}

std::shared_ptr<RankChannel> Mpi::channel() {
    return std::make_shared<MpiChannel>(shared_from_this());
}

} // namespace

absl::StatusOr<std::shared_ptr<MpiCluster>> MpiCluster::start() {
    auto mpi = std::make_shared<Mpi>();
    if (absl::Status status = mpi->init(); !status.ok()) {
        return status;
    }
    return std::shared_ptr<MpiCluster>(std::move(mpi));
}

} // namespace einsummable::runtime::cluster
