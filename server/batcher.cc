#include "server/batcher.h"

#include <algorithm>
#include <optional>
#include <stop_token>
#include <utility>

namespace einsummable::server {

Batcher::Batcher(std::shared_ptr<CancelWatcher> watcher,
                 std::shared_ptr<const support::Clock> clock)
    : watcher_(std::move(watcher)), clock_(std::move(clock)) {}

bool Batcher::ready(const Group& group, TimePoint now) {
    if (group.open.empty()) {
        return false;
    }
    if (static_cast<int>(group.open.size()) >= group.settings.max_size) {
        return true;
    }
    return now >= group.deadline && group.running < group.concurrency;
}

size_t Batcher::batch_size(const Group& group) {
    const size_t max_size = static_cast<size_t>(group.settings.max_size);
    const size_t open = group.open.size();
    if (open >= max_size) {
        return max_size;
    }
    size_t size = open;
    for (int preferred : group.settings.preferred) {
        if (static_cast<size_t>(preferred) <= open) {
            size = static_cast<size_t>(preferred); // the largest that the open requests reach
        }
    }
    return size;
}

void Batcher::wake_leader(const Group& group) {
    if (!group.open.empty()) {
        group.open.front()->wake.notify_one();
    }
}

void Batcher::erase_if_idle(const std::string& key, const std::shared_ptr<Group>& group) {
    if (!group->open.empty() || group->running > 0) {
        return;
    }
    auto it = groups_.find(key);
    if (it != groups_.end() && it->second == group) {
        groups_.erase(it);
    }
}

absl::StatusOr<v1::ExecuteResponse> Batcher::submit(const std::string& key,
                                                    const Settings& settings,
                                                    std::shared_ptr<Item> item, const RunBatch& run,
                                                    const CancelCheck& cancelled) {
    // Made the first time this request must wait; destroyed after `lock` is released (the
    // stop's callback takes mutex_, and a callback running on the watcher's thread holds off
    // its destruction).
    std::unique_ptr<CancelWatcher::Watch> watch;
    auto wake_me = [this, &item] {
        std::lock_guard<std::mutex> lock(mutex_);
        item->wake.notify_one();
    };
    std::optional<std::stop_callback<decltype(wake_me)>> on_stop;
    std::unique_lock<std::mutex> lock(mutex_);
    std::shared_ptr<Group>& slot = groups_[key];
    if (slot == nullptr) {
        slot = std::make_shared<Group>();
        slot->settings = settings;
        slot->settings.max_size = std::max(1, settings.max_size);
    }
    const std::shared_ptr<Group> group = slot;
    item->enqueued = clock_->now();
    if (group->open.empty()) {
        group->deadline = item->enqueued + group->settings.delay;
    }
    group->open.push_back(item); // this thread looks at readiness itself, below

    while (!item->done) {
        const TimePoint now = clock_->now();
        if (!item->started && ready(*group, now)) {
            const size_t size = batch_size(*group);
            const auto end = group->open.begin() + static_cast<std::ptrdiff_t>(size);
            if (std::find(group->open.begin(), end, item) == end) {
                // The batch is ready without this request (a full batch ahead of it, or a
                // preferred size reached before it). Its leader, a member, runs it, so this
                // thread stays free to lead the rest on another instance.
                wake_leader(*group);
            } else {
                // This thread runs the open batch (its first `size` requests, this one among
                // them); the rest stay open, their delay counted from the first of them.
                std::vector<std::shared_ptr<Item>> batch(group->open.begin(),
                                                         group->open.begin() + size);
                group->open.erase(group->open.begin(), group->open.begin() + size);
                if (!group->open.empty()) {
                    group->deadline = group->open.front()->enqueued + group->settings.delay;
                    wake_leader(*group); // another instance may take the rest now
                }
                for (const std::shared_ptr<Item>& member : batch) {
                    member->started = true;
                    member->queue_seconds =
                        std::chrono::duration<double>(now - member->enqueued).count();
                }
                ++group->running;
                lock.unlock();
                const int concurrency = run(batch);
                lock.lock();
                for (const std::shared_ptr<Item>& member : batch) {
                    if (!member->result.has_value()) {
                        member->result =
                            absl::InternalError("the batch gave this request no answer");
                    }
                    member->done = true;
                    member->wake.notify_one();
                }
                --group->running;
                group->concurrency = std::max(1, concurrency);
                wake_leader(*group); // an instance is free for the open batch
                continue;
            }
        }
        // A request that may wait is watched (only then, so that one that runs at once costs
        // the watcher nothing). Made without the lock: the stop's callback takes it, and runs
        // at once if the stop was already requested. Then everything is looked at again.
        if (cancelled && !watch && !item->started) {
            lock.unlock();
            watch = watcher_->watch(cancelled);
            on_stop.emplace(watch->token(), wake_me);
            lock.lock();
            continue;
        }
        // A request cancelled or past its deadline leaves before its batch starts; once it
        // started, the batch reads the request's inputs, so it waits for the batch's end.
        if (!item->started && watch && watch->token().stop_requested()) {
            group->open.erase(std::find(group->open.begin(), group->open.end(), item));
            if (!group->open.empty()) {
                group->deadline = group->open.front()->enqueued + group->settings.delay;
                wake_leader(*group); // it may lead now
            }
            erase_if_idle(key, group);
            return watch->status();
        }
        // The open batch's leader waits for its deadline, if still ahead; once it has passed,
        // the batch waits for a free instance, and the batch that frees one wakes the leader
        // (waiting for a deadline in the past would spin). Otherwise a request sleeps until it
        // is woken: its answer came, it leads now, or the watcher stopped its wait.
        const bool leads = !item->started && !group->open.empty() && group->open.front() == item;
        if (leads && group->deadline > now) {
            clock_->wait_until(item->wake, lock, group->deadline);
        } else {
            item->wake.wait(lock);
        }
    }
    erase_if_idle(key, group);
    return *std::move(item->result);
}

int64_t Batcher::groups() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(groups_.size());
}

int64_t Batcher::open_requests(const std::string& key) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = groups_.find(key);
    return it == groups_.end() ? 0 : static_cast<int64_t>(it->second->open.size());
}

} // namespace einsummable::server
