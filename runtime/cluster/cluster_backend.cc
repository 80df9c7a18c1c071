#include "runtime/cluster/cluster_backend.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/physical/rank_split.h"
#include "compiler/support/status_macros.h"
#include "runtime/cluster/exec_graph_wire.h"
#include "spdlog/spdlog.h"

namespace einsummable::runtime::cluster {
namespace {

using physical::BufferId;
using physical::ExecGraph;
using physical::RankSplit;

// What every executable and resident memory of the cluster shares: the channel, the turn of
// runs, the heartbeat, and whether a rank has stopped answering.
class Cluster {
public:
    Cluster(std::shared_ptr<Backend> local, std::shared_ptr<RankChannel> channel,
            ClusterOptions options)
        : local_(std::move(local)), channel_(std::move(channel)), options_(std::move(options)) {}

    ~Cluster() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            stopping_ = true;
        }
        stop_.notify_all();
        if (heartbeat_.joinable()) {
            heartbeat_.join();
        }
    }

    void start_heartbeat() {
        heartbeat_ = std::thread([this] { beat(); });
    }

    Backend& local() const { return *local_; }
    int ranks() const { return channel_->ranks(); }
    int devices_per_rank() const { return local_->devices(); }
    uint64_t next_id() { return next_id_.fetch_add(1); }
    std::mutex& run_turn() { return run_turn_; }

    // A range of `count` message tags of the split graph's own, [base, base + count): the first
    // gap in [1, max_tag] long enough (0 for a graph without messages, which holds none).
    // ResourceExhausted when none is.
    absl::StatusOr<int> take_tags(int count) {
        if (count == 0) {
            return 0;
        }
        std::lock_guard<std::mutex> lock(mutex_);
        int64_t base = 1;
        for (const auto& [taken, length] : tags_) {
            if (base + count <= taken) {
                break;
            }
            base = std::max<int64_t>(base, int64_t{taken} + length);
        }
        if (base + count - 1 > options_.max_tag) {
            int64_t held = 0;
            for (const auto& [taken, length] : tags_) {
                held += length;
            }
            return absl::ResourceExhaustedError(absl::StrCat(
                "a plan over the cluster needs ", count, " message tags in one range; the ",
                tags_.size(), " plans prepared hold ", held, " of the transport's ",
                options_.max_tag, " (release plans, or unload models)"));
        }
        tags_[static_cast<int>(base)] = count;
        return static_cast<int>(base);
    }
    void return_tags(int base) {
        std::lock_guard<std::mutex> lock(mutex_);
        tags_.erase(base);
    }

    absl::Status broken() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return broken_;
    }

    // A started request: its reply to come, and what it was, for the log line of a rank that
    // stops answering.
    struct Pending {
        std::future<absl::StatusOr<v1::RankReply>> reply;
        uint64_t id = 0;
    };

    Pending start(int rank, std::string what, v1::RankRequest request) {
        const uint64_t id = next_id();
        request.set_id(id);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            in_flight_[id] = {rank, std::move(what), std::chrono::steady_clock::now()};
        }
        return {channel_->call(rank, request), id};
    }

    // The reply of a started request, its status made one: the rank's failure, prefixed with
    // the rank; Unavailable when the rank cannot be reached or has stopped answering.
    absl::StatusOr<v1::RankReply> finish(int rank, Pending& pending) {
        while (pending.reply.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
            if (absl::Status status = broken(); !status.ok()) {
                forget(pending.id);
                return status;
            }
        }
        forget(pending.id);
        absl::StatusOr<v1::RankReply> got = pending.reply.get();
        if (!got.ok()) {
            mark_broken(absl::UnavailableError(
                absl::StrCat("rank ", rank, " cannot be reached: ", got.status().message())));
            return broken();
        }
        if (got->code() != 0) {
            return absl::Status(static_cast<absl::StatusCode>(got->code()),
                                absl::StrCat("rank ", rank, ": ", got->message()));
        }
        return got;
    }

    absl::StatusOr<v1::RankReply> call(int rank, std::string what, v1::RankRequest request) {
        EINSUMMABLE_RETURN_IF_ERROR(broken());
        Pending pending = start(rank, std::move(what), std::move(request));
        return finish(rank, pending);
    }

private:
    struct InFlight {
        int rank = 0;
        std::string what;
        std::chrono::steady_clock::time_point since;
    };

    void forget(uint64_t id) {
        std::lock_guard<std::mutex> lock(mutex_);
        in_flight_.erase(id);
    }

    // The first failure breaks the cluster for good: logged, and everything awaited fails.
    void mark_broken(const absl::Status& error) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!broken_.ok()) {
                return;
            }
            broken_ = error;
        }
        spdlog::critical("cluster: {}", std::string(error.message()));
        channel_->fail_pending(error);
    }

    // What `rank` was handling, oldest first: "'run a plan' (sent 3.2 s ago)".
    std::string doing(int rank) const {
        std::lock_guard<std::mutex> lock(mutex_);
        const auto now = std::chrono::steady_clock::now();
        std::string out;
        for (const auto& [id, request] : in_flight_) {
            if (request.rank != rank || request.what == "ping") {
                continue;
            }
            const double ago = std::chrono::duration<double>(now - request.since).count();
            absl::StrAppend(&out, out.empty() ? "" : ", ", "'", request.what, "' (sent ",
                            absl::StrFormat("%.1f", ago), " s ago)");
        }
        return out.empty() ? "nothing rank 0 had asked" : out;
    }

    // Pings every rank every quarter of rank_timeout; a ping unanswered after rank_timeout
    // breaks the cluster, naming the rank and what it was handling.
    void beat() {
        const auto timeout = options_.rank_timeout;
        const auto interval =
            std::max<std::chrono::milliseconds>(timeout / 4, std::chrono::milliseconds(10));
        std::vector<std::optional<Pending>> pings(ranks());
        std::vector<std::chrono::steady_clock::time_point> sent(ranks());
        std::unique_lock<std::mutex> lock(mutex_);
        while (!stopping_ && broken_.ok()) {
            lock.unlock();
            const auto now = std::chrono::steady_clock::now();
            for (int rank = 1; rank < ranks(); ++rank) {
                std::optional<Pending>& ping = pings[rank];
                if (ping &&
                    ping->reply.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
                    absl::StatusOr<v1::RankReply> reply = ping->reply.get();
                    forget(ping->id);
                    ping.reset();
                    if (!reply.ok()) {
                        mark_broken(absl::UnavailableError(absl::StrCat(
                            "rank ", rank, " cannot be reached (", reply.status().message(),
                            "); it was handling ", doing(rank))));
                    }
                }
                if (ping && now - sent[rank] > timeout) {
                    mark_broken(absl::UnavailableError(
                        absl::StrCat("rank ", rank, " did not answer a heartbeat within ",
                                     absl::StrFormat("%.3g", timeout.count() / 1000.0),
                                     " s (--rank_timeout_seconds): dead or hung; it was handling ",
                                     doing(rank))));
                }
                if (!ping) {
                    v1::RankRequest request;
                    request.mutable_ping();
                    ping = start(rank, "ping", std::move(request));
                    sent[rank] = now;
                }
            }
            lock.lock();
            stop_.wait_for(lock, interval, [this] { return stopping_; });
        }
    }

    const std::shared_ptr<Backend> local_;
    const std::shared_ptr<RankChannel> channel_;
    const ClusterOptions options_;
    std::atomic<uint64_t> next_id_{1};
    std::mutex run_turn_;
    mutable std::mutex mutex_;
    std::condition_variable stop_;
    bool stopping_ = false;                  // guarded by mutex_
    absl::Status broken_;                    // guarded by mutex_
    std::map<uint64_t, InFlight> in_flight_; // guarded by mutex_
    std::map<int, int> tags_;                // guarded by mutex_: base -> count, taken
    std::thread heartbeat_;
};

// Resident arenas spread over the ranks as the devices are: rank 0's on the local backend, the
// others' held by their ranks under `id_`.
class ClusterResidentMemory final : public ResidentMemory {
public:
    ClusterResidentMemory(std::shared_ptr<Cluster> cluster, uint64_t id, std::vector<int64_t> bytes,
                          std::shared_ptr<ResidentMemory> local, int ranks_used)
        : cluster_(std::move(cluster)), id_(id), bytes_(std::move(bytes)), local_(std::move(local)),
          ranks_used_(ranks_used) {}

    ~ClusterResidentMemory() override {
        for (int rank = 1; rank < ranks_used_; ++rank) {
            v1::RankRequest request;
            request.mutable_release_resident()->set_resident(id_);
            (void)cluster_->call(rank, "release resident memory", std::move(request));
        }
    }

    uint64_t id() const { return id_; }
    const std::shared_ptr<ResidentMemory>& local() const { return local_; }

    absl::Status write(int device, int64_t offset, absl::Span<const std::byte> data) override {
        EINSUMMABLE_ASSIGN_OR_RETURN(const auto where, place(device));
        const auto [rank, local_device] = where;
        if (rank == 0) {
            return local_->write(local_device, offset, data);
        }
        v1::RankRequest request;
        v1::ResidentWrite* write = request.mutable_resident_write();
        write->set_resident(id_);
        write->set_device(local_device);
        write->set_offset(offset);
        write->set_data(reinterpret_cast<const char*>(data.data()), data.size());
        return cluster_->call(rank, "write resident memory", std::move(request)).status();
    }

    absl::Status read(int device, int64_t offset, absl::Span<std::byte> data) const override {
        EINSUMMABLE_ASSIGN_OR_RETURN(const auto where, place(device));
        const auto [rank, local_device] = where;
        if (rank == 0) {
            return local_->read(local_device, offset, data);
        }
        v1::RankRequest request;
        v1::ResidentRead* read = request.mutable_resident_read();
        read->set_resident(id_);
        read->set_device(local_device);
        read->set_offset(offset);
        read->set_bytes(static_cast<int64_t>(data.size()));
        EINSUMMABLE_ASSIGN_OR_RETURN(
            v1::RankReply reply, cluster_->call(rank, "read resident memory", std::move(request)));
        if (reply.data().size() != data.size()) {
            return absl::InternalError(absl::StrCat(
                "rank ", rank, " returned ", reply.data().size(), " bytes of ", data.size()));
        }
        std::copy_n(reinterpret_cast<const std::byte*>(reply.data().data()), data.size(),
                    data.data());
        return absl::OkStatus();
    }

    std::vector<int64_t> allocated_bytes() const override { return bytes_; }

private:
    // The rank of `device` and its number there; InvalidArgument for a device without an arena.
    absl::StatusOr<std::pair<int, int>> place(int device) const {
        if (device < 0 || device >= static_cast<int>(bytes_.size())) {
            return absl::InvalidArgumentError(absl::StrCat(
                "device ", device, " has no resident arena (", bytes_.size(), " devices)"));
        }
        return std::pair<int, int>{device / cluster_->devices_per_rank(),
                                   device % cluster_->devices_per_rank()};
    }

    const std::shared_ptr<Cluster> cluster_;
    const uint64_t id_;
    const std::vector<int64_t> bytes_;
    const std::shared_ptr<ResidentMemory> local_;
    const int ranks_used_;
};

class ClusterExecutable final : public Executable {
public:
    // `tags`: the first of the message tags the split's parts use (Cluster::take_tags).
    ClusterExecutable(std::shared_ptr<Cluster> cluster, uint64_t id, const ExecGraph& graph,
                      RankSplit split, std::unique_ptr<Executable> local, int tags)
        : cluster_(std::move(cluster)), id_(id), graph_(graph), split_(std::move(split)),
          local_(std::move(local)), tags_(tags) {}

    ~ClusterExecutable() override {
        local_.reset();
        for (int rank = 1; rank < ranks(); ++rank) {
            v1::RankRequest request;
            request.mutable_release()->set_executable(id_);
            (void)cluster_->call(rank, "release a plan", std::move(request));
        }
        cluster_->return_tags(tags_);
    }

    absl::Status write_buffer(BufferId buffer, absl::Span<const std::byte> data) override {
        EINSUMMABLE_ASSIGN_OR_RETURN(RankSplit::Home home, home_of(buffer));
        if (home.rank == 0) {
            return local_->write_buffer(home.buffer, data);
        }
        v1::RankRequest request;
        v1::WriteBuffer* write = request.mutable_write_buffer();
        write->set_executable(id_);
        write->set_buffer(home.buffer);
        write->set_data(reinterpret_cast<const char*>(data.data()), data.size());
        return cluster_->call(home.rank, "write a buffer", std::move(request)).status();
    }

    absl::Status read_buffer(BufferId buffer, absl::Span<std::byte> data) override {
        EINSUMMABLE_ASSIGN_OR_RETURN(RankSplit::Home home, home_of(buffer));
        if (home.rank == 0) {
            return local_->read_buffer(home.buffer, data);
        }
        if (static_cast<int64_t>(data.size()) != graph_.buffers[buffer].bytes()) {
            return absl::InvalidArgumentError(absl::StrCat(
                physical::buffer_label(graph_, buffer), " holds ", graph_.buffers[buffer].bytes(),
                " bytes; the host data has ", data.size()));
        }
        v1::RankRequest request;
        v1::ReadBuffer* read = request.mutable_read_buffer();
        read->set_executable(id_);
        read->set_buffer(home.buffer);
        EINSUMMABLE_ASSIGN_OR_RETURN(
            v1::RankReply reply, cluster_->call(home.rank, "read a buffer", std::move(request)));
        if (reply.data().size() != data.size()) {
            return absl::InternalError(absl::StrCat("rank ", home.rank, " returned ",
                                                    reply.data().size(), " bytes of ",
                                                    physical::buffer_label(graph_, buffer)));
        }
        std::copy_n(reinterpret_cast<const std::byte*>(reply.data().data()), data.size(),
                    data.data());
        return absl::OkStatus();
    }

    absl::Status run() override {
        EINSUMMABLE_RETURN_IF_ERROR(cluster_->broken());
        // Each split graph has tags of its own, so runs of different ones overlap, unless the
        // ranks' messages are matched by order (NCCL): then one at a time over the cluster.
        std::unique_lock<std::mutex> turn(cluster_->run_turn(), std::defer_lock);
        if (cluster_->local().split_runs_take_turns()) {
            turn.lock();
        }
        std::vector<Cluster::Pending> replies;
        for (int rank = 1; rank < ranks(); ++rank) {
            v1::RankRequest request;
            request.mutable_run()->set_executable(id_);
            replies.push_back(cluster_->start(rank, "run a plan", std::move(request)));
        }
        absl::Status status = local_->run();
        for (int rank = 1; rank < ranks(); ++rank) {
            absl::StatusOr<v1::RankReply> reply = cluster_->finish(rank, replies[rank - 1]);
            if (reply.ok()) {
                std::lock_guard<std::mutex> lock(moved_mutex_);
                remote_moved_[rank].assign(reply->values().begin(), reply->values().end());
            } else if (status.ok()) {
                status = reply.status();
            }
        }
        runs_.fetch_add(1, std::memory_order_relaxed);
        return status;
    }

    // Within a rank, what its part's copies moved (rank 0's executable; the others' totals as
    // their last Run reply gave them); between ranks, what the split's messages carry per run.
    std::vector<std::vector<int64_t>> bytes_moved() const override {
        const int devices = graph_.devices;
        std::vector<std::vector<int64_t>> moved(devices, std::vector<int64_t>(devices, 0));
        const int64_t runs = runs_.load(std::memory_order_relaxed);
        for (int src = 0; src < devices; ++src) {
            for (int dst = 0; dst < devices; ++dst) {
                moved[src][dst] = runs * split_.crossing_bytes[src][dst];
            }
        }
        const int per_rank = split_.devices_per_rank;
        auto add_part = [&](int rank, const std::vector<int64_t>& values) {
            const int part_devices = split_.parts[rank].devices;
            if (values.size() != static_cast<size_t>(part_devices * part_devices)) {
                return; // no successful run reported yet
            }
            for (int s = 0; s < part_devices; ++s) {
                for (int d = 0; d < part_devices; ++d) {
                    moved[rank * per_rank + s][rank * per_rank + d] +=
                        values[static_cast<size_t>(s * part_devices + d)];
                }
            }
        };
        std::vector<int64_t> local_values;
        for (const std::vector<int64_t>& row : local_->bytes_moved()) {
            local_values.insert(local_values.end(), row.begin(), row.end());
        }
        add_part(0, local_values);
        std::lock_guard<std::mutex> lock(moved_mutex_);
        for (int rank = 1; rank < ranks(); ++rank) {
            add_part(rank, remote_moved_[rank]);
        }
        return moved;
    }

    std::vector<int64_t> allocated_bytes() const override {
        std::vector<int64_t> bytes(graph_.devices, 0);
        for (size_t d = 0; d < graph_.arena_bytes.size(); ++d) {
            bytes[d] = graph_.arena_bytes[d];
        }
        return bytes;
    }

private:
    int ranks() const { return static_cast<int>(split_.parts.size()); }

    absl::StatusOr<RankSplit::Home> home_of(BufferId buffer) const {
        if (buffer < 0 || buffer >= static_cast<BufferId>(graph_.buffers.size())) {
            return absl::InvalidArgumentError(absl::StrCat("buffer b", buffer,
                                                           " does not exist (the graph has ",
                                                           graph_.buffers.size(), " buffers)"));
        }
        return split_.buffer_homes[buffer];
    }

    const std::shared_ptr<Cluster> cluster_;
    const uint64_t id_;
    const ExecGraph& graph_;
    const RankSplit split_;
    std::unique_ptr<Executable> local_;
    const int tags_;
    std::atomic<int64_t> runs_{0};
    mutable std::mutex moved_mutex_;
    // Per rank, its part's copy bytes, [src][dst] row-major over its devices, as of its last
    // successful Run reply (entry 0 unused). Guarded by moved_mutex_.
    std::vector<std::vector<int64_t>> remote_moved_ =
        std::vector<std::vector<int64_t>>(split_.parts.size());
};

class ClusterBackend final : public Backend {
public:
    explicit ClusterBackend(std::shared_ptr<Cluster> cluster) : cluster_(std::move(cluster)) {}

    std::string name() const override { return cluster_->local().name(); }
    int devices() const override { return cluster_->ranks() * cluster_->devices_per_rank(); }
    KernelsInfo kernels() const override { return cluster_->local().kernels(); }
    logical::AttentionSplits attention_splits() const override {
        return cluster_->local().attention_splits();
    }
    absl::Status unrecoverable_error() const override {
        EINSUMMABLE_RETURN_IF_ERROR(cluster_->broken());
        return cluster_->local().unrecoverable_error();
    }

    using Backend::prepare;
    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const ExecGraph& graph, std::shared_ptr<ResidentMemory> resident) override {
        return prepare(graph, std::move(resident), nullptr);
    }

    absl::StatusOr<std::unique_ptr<Executable>>
    prepare(const ExecGraph& graph, std::shared_ptr<ResidentMemory> resident,
            const support::Cancellation* cancellation) override {
        EINSUMMABLE_RETURN_IF_ERROR(cluster_->broken());
        EINSUMMABLE_RETURN_IF_ERROR(
            support::check_cancelled(cancellation, "the backend's preparation"));
        EINSUMMABLE_RETURN_IF_ERROR(physical::check_exec_graph(graph, devices()));
        std::shared_ptr<ClusterResidentMemory> memory;
        if (resident != nullptr) {
            memory = std::dynamic_pointer_cast<ClusterResidentMemory>(resident);
            if (memory == nullptr) {
                return absl::InvalidArgumentError(
                    "the resident memory was not allocated by the cluster backend");
            }
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(RankSplit split,
                                     physical::split_by_rank(graph, cluster_->devices_per_rank()));
        // The split's tags [0, messages) moved to a range of this executable's own.
        EINSUMMABLE_ASSIGN_OR_RETURN(const int tags, cluster_->take_tags(split.messages));
        for (ExecGraph& part : split.parts) {
            for (physical::ExecNode& node : part.nodes) {
                if (node.kind == physical::NodeKind::send ||
                    node.kind == physical::NodeKind::recv) {
                    node.tag += tags;
                }
            }
        }
        const uint64_t id = cluster_->next_id();
        const int ranks = static_cast<int>(split.parts.size());
        std::vector<Cluster::Pending> replies;
        for (int rank = 1; rank < ranks; ++rank) {
            v1::RankRequest request;
            v1::Prepare* prepare = request.mutable_prepare();
            prepare->set_executable(id);
            prepare->set_resident(memory != nullptr ? memory->id() : 0);
            *prepare->mutable_part() = to_wire(split.parts[rank]);
            replies.push_back(cluster_->start(rank, "prepare a plan", std::move(request)));
        }
        absl::StatusOr<std::unique_ptr<Executable>> local = cluster_->local().prepare(
            split.parts[0], memory != nullptr ? memory->local() : nullptr, cancellation);
        absl::Status status = local.status();
        std::vector<bool> prepared(ranks, false);
        for (int rank = 1; rank < ranks; ++rank) {
            absl::Status remote = cluster_->finish(rank, replies[rank - 1]).status();
            prepared[rank] = remote.ok();
            if (status.ok() && !remote.ok()) {
                status = remote;
            }
        }
        if (!status.ok()) {
            for (int rank = 1; rank < ranks; ++rank) {
                if (prepared[rank]) {
                    v1::RankRequest request;
                    request.mutable_release()->set_executable(id);
                    (void)cluster_->call(rank, "release a plan", std::move(request));
                }
            }
            cluster_->return_tags(tags);
            return status;
        }
        spdlog::debug("cluster: prepared executable {} over {} ranks ({} messages per run)", id,
                      ranks, split.messages);
        // Part 0's graph moves into the executable with the split's vector of parts, which
        // keeps its address: the local executable goes on reading it there.
        return std::unique_ptr<Executable>(std::make_unique<ClusterExecutable>(
            cluster_, id, graph, std::move(split), *std::move(local), tags));
    }

    absl::StatusOr<std::shared_ptr<ResidentMemory>>
    allocate_resident(const std::vector<int64_t>& bytes) override {
        EINSUMMABLE_RETURN_IF_ERROR(cluster_->broken());
        if (static_cast<int>(bytes.size()) > devices()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "resident arenas for ", bytes.size(), " devices; the cluster has ", devices()));
        }
        const int per_rank = cluster_->devices_per_rank();
        const int ranks =
            std::max<int>(1, (static_cast<int>(bytes.size()) + per_rank - 1) / per_rank);
        auto slice = [&](int rank) {
            const size_t first = static_cast<size_t>(rank) * per_rank;
            const size_t last = std::min(bytes.size(), first + per_rank);
            return std::vector<int64_t>(bytes.begin() + std::min(first, bytes.size()),
                                        bytes.begin() + last);
        };
        const uint64_t id = cluster_->next_id();
        for (int rank = 1; rank < ranks; ++rank) {
            v1::RankRequest request;
            request.mutable_allocate_resident()->set_resident(id);
            for (int64_t b : slice(rank)) {
                request.mutable_allocate_resident()->add_bytes(b);
            }
            absl::Status status =
                cluster_->call(rank, "allocate resident memory", std::move(request)).status();
            if (!status.ok()) {
                for (int done = 1; done < rank; ++done) {
                    v1::RankRequest release;
                    release.mutable_release_resident()->set_resident(id);
                    (void)cluster_->call(done, "release resident memory", std::move(release));
                }
                return status;
            }
        }
        absl::StatusOr<std::shared_ptr<ResidentMemory>> local =
            cluster_->local().allocate_resident(slice(0));
        std::shared_ptr<ClusterResidentMemory> memory = std::make_shared<ClusterResidentMemory>(
            cluster_, id, bytes, local.ok() ? *local : nullptr, ranks);
        if (!local.ok()) {
            return local.status(); // the remote arenas are released with `memory`
        }
        return std::shared_ptr<ResidentMemory>(std::move(memory));
    }

private:
    std::shared_ptr<Cluster> cluster_;
};

} // namespace

absl::StatusOr<std::shared_ptr<Backend>> make_cluster_backend(std::shared_ptr<Backend> local,
                                                              std::shared_ptr<RankChannel> channel,
                                                              const ClusterOptions& options) {
    auto cluster = std::make_shared<Cluster>(std::move(local), std::move(channel), options);
    for (int rank = 1; rank < cluster->ranks(); ++rank) {
        v1::RankRequest request;
        v1::Hello* hello = request.mutable_hello();
        hello->set_version(options.version);
        hello->set_ranks(cluster->ranks());
        hello->set_devices_per_rank(cluster->devices_per_rank());
        hello->set_backend(cluster->local().name());
        EINSUMMABLE_RETURN_IF_ERROR(cluster->call(rank, "hello", std::move(request)).status());
    }
    cluster->start_heartbeat();
    spdlog::info("cluster: {} ranks x {} {} devices", cluster->ranks(), cluster->devices_per_rank(),
                 cluster->local().name());
    return std::shared_ptr<Backend>(std::make_shared<ClusterBackend>(std::move(cluster)));
}
} // namespace einsummable::runtime::cluster
