#include "runtime/cpu/cpu_executable.h"

#include <algorithm>
#include <cstring>
#include <new>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "compiler/physical/exec_graph_check.h"
#include "compiler/support/status_macros.h"
#include "runtime/cpu/node_ops.h"

namespace einsummable::runtime::cpu {

using physical::BufferId;
using physical::ExecGraph;
using physical::ExecNode;
using physical::NodeKind;

CpuExecutable::CpuExecutable(const ExecGraph& graph, std::shared_ptr<WorkerPool> pool)
    : graph_(graph), devices_(graph.devices), pool_(std::move(pool)) {}

CpuExecutable::~CpuExecutable() = default;

absl::StatusOr<std::unique_ptr<CpuExecutable>>
CpuExecutable::create(const ExecGraph& graph, std::shared_ptr<WorkerPool> pool,
                      std::shared_ptr<const CpuResidentMemory> resident,
                      const support::Cancellation* cancellation,
                      std::shared_ptr<Transport> transport) {
    std::unique_ptr<CpuExecutable> exe(new CpuExecutable(graph, std::move(pool)));
    const int devices = graph.devices;
    for (int n = 0; n < static_cast<int>(graph.nodes.size()); ++n) {
        const ExecNode& node = graph.nodes[n];
        if (node.kind != NodeKind::send && node.kind != NodeKind::recv) {
            continue;
        }
        if (transport == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat(physical::node_label(graph, n),
                             ": the graph is a rank's part of a split graph, and the cpu backend "
                             "has no transport to the other ranks"));
        }
        if (node.peer >= transport->ranks() || node.peer == transport->rank()) {
            return absl::InvalidArgumentError(absl::StrCat(
                physical::node_label(graph, n), ": rank ", transport->rank(), " of ",
                transport->ranks(), " cannot exchange messages with rank ", node.peer));
        }
        exe->transport_ = transport;
    }

    if (!graph.resident_bytes.empty()) {
        if (resident == nullptr) {
            return absl::InvalidArgumentError(
                "the graph reads resident buffers and no resident memory was given");
        }
        for (int d = 0; d < devices; ++d) {
            const int64_t have = d < resident->devices() ? resident->allocated_bytes()[d] : 0;
            if (have < graph.resident_bytes[d]) {
                return absl::InvalidArgumentError(
                    absl::StrCat("device ", d, "'s resident arena has ", have,
                                 " bytes; the graph needs ", graph.resident_bytes[d]));
            }
            exe->resident_bases_.push_back(resident->base(d));
        }
        exe->resident_ = std::move(resident);
    }
    for (int d = 0; d < devices; ++d) {
        const int64_t bytes = graph.arena_bytes.empty() ? 0 : graph.arena_bytes[d];
        // Zeroed once, so a buffer read before anything wrote it reads zeros rather than another
        // run's leftovers.
        Arena arena = allocate_unzeroed_arena(bytes);
        if (!arena) {
            return absl::ResourceExhaustedError(
                absl::StrCat("cannot allocate device ", d, "'s arena of ", bytes, " bytes"));
        }
        if (!zero_arena(arena.get(), bytes, cancellation)) {
            return support::cancelled_error(
                absl::StrCat("the backend's preparation (device ", d, "'s arena)"));
        }
        exe->arena_bases_.push_back(arena.get());
        exe->arenas_.push_back(std::move(arena));
    }

    const int nodes = static_cast<int>(graph.nodes.size());
    exe->successors_.resize(nodes);
    exe->dep_counts_.resize(nodes);
    exe->sources_.resize(devices);
    for (int n = 0; n < nodes; ++n) {
        std::vector<int> deps = graph.nodes[n].deps;
        std::sort(deps.begin(), deps.end());
        deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
        exe->dep_counts_[n] = static_cast<int>(deps.size());
        for (int dep : deps) {
            exe->successors_[dep].push_back(n);
        }
        if (deps.empty()) {
            exe->sources_[graph.nodes[n].device].push_back({exe.get(), n});
        }
    }
    exe->unfinished_deps_ = std::make_unique<std::atomic<int>[]>(nodes);
    exe->moved_ = std::make_unique<std::atomic<int64_t>[]>(static_cast<size_t>(devices) * devices);
    for (int i = 0; i < devices * devices; ++i) {
        exe->moved_[i].store(0, std::memory_order_relaxed);
    }
    return exe;
}

absl::Status CpuExecutable::check_transfer(BufferId buffer, size_t host_bytes) const {
    if (buffer < 0 || buffer >= static_cast<BufferId>(graph_.buffers.size())) {
        return absl::InvalidArgumentError(absl::StrCat("buffer b", buffer,
                                                       " does not exist (the graph has ",
                                                       graph_.buffers.size(), " buffers)"));
    }
    const int64_t bytes = graph_.buffers[buffer].bytes();
    if (static_cast<int64_t>(host_bytes) != bytes) {
        return absl::InvalidArgumentError(absl::StrCat(physical::buffer_label(graph_, buffer),
                                                       " holds ", bytes,
                                                       " bytes; the host data has ", host_bytes));
    }
    return absl::OkStatus();
}

std::byte* CpuExecutable::address(BufferId buffer) const {
    const physical::Buffer& b = graph_.buffers[buffer];
    return (b.resident ? resident_bases_ : arena_bases_)[b.device] + b.offset;
}

absl::Status CpuExecutable::write_buffer(BufferId buffer, absl::Span<const std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_transfer(buffer, data.size()));
    if (graph_.buffers[buffer].resident) {
        return absl::InvalidArgumentError(
            absl::StrCat(physical::buffer_label(graph_, buffer),
                         " is resident: it is written through its resident memory"));
    }
    if (!data.empty()) {
        std::memcpy(address(buffer), data.data(), data.size());
    }
    return absl::OkStatus();
}

absl::Status CpuExecutable::read_buffer(BufferId buffer, absl::Span<std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_transfer(buffer, data.size()));
    if (!data.empty()) {
        std::memcpy(data.data(), address(buffer), data.size());
    }
    return absl::OkStatus();
}

absl::Status CpuExecutable::run() {
    const int nodes = static_cast<int>(graph_.nodes.size());
    if (nodes == 0) {
        return absl::OkStatus();
    }
    // Workers see these stores: submit() publishes them through the queue's mutex, and every
    // later item is queued by a worker that saw them.
    for (int n = 0; n < nodes; ++n) {
        unfinished_deps_[n].store(dep_counts_[n], std::memory_order_relaxed);
    }
    unfinished_nodes_.store(nodes, std::memory_order_relaxed);
    failed_.store(false, std::memory_order_relaxed);
    {
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = false;
        error_ = absl::OkStatus();
    }
    for (int d = 0; d < devices_; ++d) {
        pool_->submit(d, sources_[d]);
    }
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [this] { return done_; });
    return error_;
}

void CpuExecutable::run_node(int node_idx) {
    const ExecNode& node = graph_.nodes[node_idx];
    if (node.kind == NodeKind::send || node.kind == NodeKind::recv) {
        start_message(node_idx);
        return;
    }
    if (!failed_.load(std::memory_order_acquire)) {
        absl::Status status = execute_node(graph_, node, arena_bases_, resident_bases_);
        if (!status.ok()) {
            record_failure(node_idx, status);
        } else if (node.kind == NodeKind::copy) {
            const int src = graph_.buffers[node.inputs[0]].device;
            moved_[src * devices_ + node.device].fetch_add(graph_.buffers[node.outputs[0]].bytes(),
                                                           std::memory_order_relaxed);
        }
    }
    finish(node_idx);
}

void CpuExecutable::start_message(int node_idx) {
    const ExecNode& node = graph_.nodes[node_idx];
    // Sent and received even after a failure: the peer's part waits for it.
    auto done = [this, node_idx](absl::Status status) {
        if (!status.ok()) {
            record_failure(node_idx, status);
        }
        finish(node_idx);
    };
    if (node.kind == NodeKind::send) {
        absl::Span<const std::byte> data;
        if (!node.inputs.empty()) {
            data = {address(node.inputs[0]),
                    static_cast<size_t>(graph_.buffers[node.inputs[0]].bytes())};
        }
        transport_->send(node.peer, node.tag, data, std::move(done));
    } else {
        absl::Span<std::byte> data;
        if (!node.outputs.empty()) {
            data = {address(node.outputs[0]),
                    static_cast<size_t>(graph_.buffers[node.outputs[0]].bytes())};
        }
        transport_->recv(node.peer, node.tag, data, std::move(done));
    }
}

void CpuExecutable::finish(int node_idx) {
    // Successors that became ready, batched per device so each queue is locked once.
    absl::InlinedVector<std::pair<int, WorkItem>, 8> ready;
    for (int successor : successors_[node_idx]) {
        if (unfinished_deps_[successor].fetch_sub(1, std::memory_order_acq_rel) == 1) {
            ready.push_back({graph_.nodes[successor].device, WorkItem{this, successor}});
        }
    }
    std::sort(ready.begin(), ready.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    absl::InlinedVector<WorkItem, 8> batch;
    for (size_t i = 0; i < ready.size(); ++i) {
        batch.push_back(ready[i].second);
        if (i + 1 == ready.size() || ready[i + 1].first != ready[i].first) {
            pool_->submit(ready[i].first, batch);
            batch.clear();
        }
    }
    if (unfinished_nodes_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        // Last node of the run. Notify under the lock: run() may return (and the executable
        // be destroyed) as soon as the lock is released, so nothing here touches `this` after.
        std::lock_guard<std::mutex> lock(mutex_);
        done_ = true;
        finished_.notify_all();
    }
}

void CpuExecutable::record_failure(int node_idx, const absl::Status& status) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (error_.ok()) {
            error_ =
                absl::Status(status.code(), absl::StrCat(physical::node_label(graph_, node_idx),
                                                         ": ", status.message()));
        }
    }
    failed_.store(true, std::memory_order_release);
}

std::vector<std::vector<int64_t>> CpuExecutable::bytes_moved() const {
    std::vector<std::vector<int64_t>> moved(devices_, std::vector<int64_t>(devices_, 0));
    for (int src = 0; src < devices_; ++src) {
        for (int dst = 0; dst < devices_; ++dst) {
            moved[src][dst] = moved_[src * devices_ + dst].load(std::memory_order_relaxed);
        }
    }
    return moved;
}

std::vector<int64_t> CpuExecutable::allocated_bytes() const {
    std::vector<int64_t> bytes(devices_, 0);
    if (!graph_.arena_bytes.empty()) {
        std::copy(graph_.arena_bytes.begin(), graph_.arena_bytes.end(), bytes.begin());
    }
    return bytes;
}

} // namespace einsummable::runtime::cpu
