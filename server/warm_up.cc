#include "server/warm_up.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {

WarmUp::WarmUp(CompileBucket compile, std::shared_ptr<Metrics> metrics)
    : compile_(std::move(compile)), metrics_(std::move(metrics)) {
    thread_ = std::thread([this] { work(); });
}

WarmUp::~WarmUp() {
    stop();
}

bool WarmUp::wanted(const Model& model) {
    const std::optional<BatchSpec>& spec = model.batching();
    return spec && !spec->buckets.empty() && spec->warm_up && model.symbols().size() == 1 &&
           model.symbols().front() == spec->symbol;
}

void WarmUp::add(std::shared_ptr<const Model> model) {
    if (!wanted(*model)) {
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (stopping_) {
            return;
        }
        Entry& entry = entries_[model->id()];
        entry.pending = model->batching()->buckets;
        entry.order = next_order_++;
        entry.model = std::move(model);
        publish_locked(entry);
        spdlog::info("model '{}': warming up its token buckets {} in the background",
                     entry.model->name(), absl::StrJoin(entry.pending, ","));
    }
    work_cv_.notify_one();
}

void WarmUp::remove(uint64_t model_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(model_id);
    if (it == entries_.end()) {
        return;
    }
    if (it->second.compiling) {
        // The thread is in its compile: the cancel check fails from now on, and the thread
        // erases the entry when the compile returns.
        it->second.removed = true;
        it->second.pending.clear();
        return;
    }
    entries_.erase(it);
}

std::optional<int64_t> WarmUp::serving_bucket(const Model& model, int64_t bucket) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(model.id());
    if (it == entries_.end()) {
        return bucket;
    }
    const Entry& entry = it->second;
    const bool warming = !entry.stopped && (entry.compiling || !entry.pending.empty());
    if (!warming || std::binary_search(entry.ready.begin(), entry.ready.end(), bucket)) {
        return bucket;
    }
    auto larger = std::upper_bound(entry.ready.begin(), entry.ready.end(), bucket);
    if (larger == entry.ready.end()) {
        return std::nullopt;
    }
    return *larger;
}

v1::WarmUp WarmUp::info(uint64_t model_id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    v1::WarmUp info;
    auto it = entries_.find(model_id);
    if (it == entries_.end() || it->second.removed) {
        return info;
    }
    const Entry& entry = it->second;
    const bool running = entry.compiling || !entry.pending.empty();
    info.set_state(entry.stopped ? v1::WarmUp::WARM_UP_STOPPED
                   : running     ? v1::WarmUp::WARM_UP_RUNNING
                                 : v1::WarmUp::WARM_UP_DONE);
    for (int64_t bucket : entry.ready) {
        info.add_ready(bucket);
    }
    if (entry.compiling) {
        info.add_pending(*entry.compiling);
    }
    for (int64_t bucket : entry.pending) {
        info.add_pending(bucket);
    }
    for (int64_t bucket : entry.failed) {
        info.add_failed(bucket);
    }
    info.set_message(entry.message);
    return info;
}

int64_t WarmUp::pending() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t pending = 0;
    for (const auto& [id, entry] : entries_) {
        pending += static_cast<int64_t>(entry.pending.size()) + (entry.compiling ? 1 : 0);
    }
    return pending;
}

void WarmUp::stop() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        for (auto& [id, entry] : entries_) {
            entry.pending.clear();
        }
    }
    work_cv_.notify_all();
    if (thread_.joinable()) {
        thread_.join();
    }
}

WarmUp::Entry* WarmUp::next_locked() {
    Entry* next = nullptr;
    for (auto& [id, entry] : entries_) {
        if (entry.pending.empty() || entry.compiling) {
            continue;
        }
        if (next == nullptr || entry.pending.front() < next->pending.front() ||
            (entry.pending.front() == next->pending.front() && entry.order < next->order)) {
            next = &entry;
        }
    }
    return next;
}

void WarmUp::publish_locked(const Entry& entry) const {
    if (metrics_) {
        metrics_->warm_up_buckets(
            entry.model->name(),
            static_cast<int64_t>(entry.pending.size()) + (entry.compiling ? 1 : 0),
            static_cast<int64_t>(entry.ready.size()), static_cast<int64_t>(entry.failed.size()));
    }
}

void WarmUp::finish_locked(Entry& entry, int64_t bucket, const absl::Status& status) {
    const std::string& name = entry.model->name();
    if (status.ok()) {
        entry.ready.insert(std::upper_bound(entry.ready.begin(), entry.ready.end(), bucket),
                           bucket);
    } else if (absl::IsResourceExhausted(status)) {
        entry.failed.push_back(bucket);
        entry.message = absl::StrCat(
            "stopped at bucket ", bucket, ": ", status.message(),
            entry.pending.empty() ? ""
                                  : absl::StrCat("; buckets ", absl::StrJoin(entry.pending, ","),
                                                 " compile when a request needs them"));
        entry.pending.clear();
        entry.stopped = true;
        spdlog::warn("model '{}': warm-up {}", name, entry.message);
    } else {
        entry.failed.push_back(bucket);
        entry.message = absl::StrCat("bucket ", bucket, ": ", status.ToString());
        spdlog::warn("model '{}': warm-up compile of bucket {} failed: {}", name, bucket,
                     status.ToString());
    }
    if (!entry.stopped && entry.pending.empty()) {
        spdlog::info(
            "model '{}': warm-up done, buckets ready: {}{}", name, absl::StrJoin(entry.ready, ","),
            entry.failed.empty() ? ""
                                 : absl::StrCat(", failed: ", absl::StrJoin(entry.failed, ",")));
    }
    publish_locked(entry);
}

void WarmUp::work() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (true) {
        Entry* entry = nullptr;
        work_cv_.wait(lock, [&] { return stopping_ || (entry = next_locked()) != nullptr; });
        if (stopping_) {
            return;
        }
        const uint64_t id = entry->model->id();
        const int64_t bucket = entry->pending.front();
        entry->pending.erase(entry->pending.begin());
        entry->compiling = bucket;
        publish_locked(*entry);
        const std::shared_ptr<const Model> model = entry->model;
        lock.unlock();
        const absl::Status status = compile_(model, bucket, [this, id]() -> absl::Status {
            std::lock_guard<std::mutex> check_lock(mutex_);
            if (stopping_) {
                return absl::CancelledError("the server is stopping");
            }
            auto it = entries_.find(id);
            if (it == entries_.end() || it->second.removed) {
                return absl::CancelledError("the model was unregistered");
            }
            return absl::OkStatus();
        });
        lock.lock();
        auto it = entries_.find(id);
        if (it == entries_.end()) {
            continue;
        }
        it->second.compiling.reset();
        if (it->second.removed) {
            spdlog::info("model '{}': warm-up stopped, the model was unregistered", model->name());
            entries_.erase(it);
            continue;
        }
        if (stopping_) {
            return;
        }
        finish_locked(it->second, bucket, status);
    }
}

} // namespace einsummable::server
