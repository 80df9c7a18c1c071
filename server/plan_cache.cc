#include "server/plan_cache.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::server {

PlanCache::PlanCache(int64_t max_entries, CompilePool* pool, std::shared_ptr<Metrics> metrics)
    : max_entries_(std::max<int64_t>(max_entries, 1)), pool_(pool), metrics_(std::move(metrics)) {}

PlanCache::~PlanCache() {
    cancel_all();
}

void PlanCache::cancel_all() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [key, flight] : in_flight_) {
        flight->cancellation->cancel();
    }
}

absl::StatusOr<PlanCache::Lookup> PlanCache::get_or_create(const PlanKey& key, Factory factory,
                                                           const CancelCheck& cancelled,
                                                           std::function<bool()> still_wanted) {
    std::shared_ptr<InFlight> flight;
    bool leader = false;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto found = entries_.find(key);
        if (found != entries_.end()) {
            lru_.splice(lru_.begin(), lru_, found->second.lru_position);
            return Lookup{found->second.plan, true};
        }
        auto pending = in_flight_.find(key);
        // A creation whose waiters all left is stopping: it will not produce a plan.
        if (pending != in_flight_.end() && !pending->second->cancellation->cancelled()) {
            flight = pending->second;
        } else {
            flight = std::make_shared<InFlight>();
            in_flight_[key] = flight;
            leader = true;
        }
        std::lock_guard<std::mutex> flight_lock(flight->mutex);
        ++flight->waiters;
    }

    if (leader) {
        if (pool_ != nullptr) {
            pool_->submit([this, key, flight, factory = std::move(factory),
                           still_wanted = std::move(still_wanted)] {
                create(key, flight, factory, still_wanted);
            });
        } else {
            create(key, flight, factory, still_wanted);
        }
    }

    std::unique_lock<std::mutex> lock(flight->mutex);
    while (!flight->done) {
        flight->done_cv.wait_for(lock, std::chrono::milliseconds(50));
        if (flight->done || !cancelled) {
            continue;
        }
        if (absl::Status status = cancelled(); !status.ok()) {
            // The last waiter to leave stops the creation. Under the cache's lock (taken first,
            // as get_or_create does), so no request joins the creation as it is cancelled.
            lock.unlock();
            std::lock_guard<std::mutex> cache_lock(mutex_);
            std::lock_guard<std::mutex> flight_lock(flight->mutex);
            if (--flight->waiters == 0 && !flight->done) {
                flight->cancellation->cancel();
            }
            return status;
        }
    }
    --flight->waiters;
    if (!flight->result.ok()) {
        return flight->result.status();
    }
    return Lookup{*flight->result, false};
}

void PlanCache::create(const PlanKey& key, const std::shared_ptr<InFlight>& flight,
                       const Factory& factory, const std::function<bool()>& still_wanted) {
    absl::StatusOr<std::shared_ptr<CachedPlan>> result;
    if (flight->cancellation->cancelled()) {
        result = absl::CancelledError("the compile was cancelled before it started: every "
                                      "request waiting for it was cancelled or passed its "
                                      "deadline");
    } else {
        try {
            result = factory(flight->cancellation);
        } catch (const std::exception& error) {
            result = absl::InternalError(absl::StrCat("plan creation failed: ", error.what()));
        } catch (...) {
            result = absl::InternalError("plan creation failed with an unknown exception");
        }
    }
    if (metrics_ && absl::IsCancelled(result.status()) && flight->cancellation->cancelled()) {
        metrics_->compile_cancelled();
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto own = in_flight_.find(key);
        if (own != in_flight_.end() && own->second == flight) {
            in_flight_.erase(own);
        }
        // A creation whose waiters all left may still finish (a step that does not poll, such
        // as the backend's prepare): nobody asked to keep it, so it is not cached.
        if (result.ok() && !flight->discard && !flight->cancellation->cancelled() &&
            (!still_wanted || still_wanted())) {
            // A plan of the key may have been cached meanwhile by a creation that started after
            // this one was being cancelled: keep the first.
            if (entries_.find(key) == entries_.end()) {
                lru_.push_front(key);
                entries_[key] = Entry{*result, lru_.begin()};
                evict_locked();
            }
        }
    }
    {
        std::lock_guard<std::mutex> lock(flight->mutex);
        flight->result = std::move(result);
        flight->done = true;
    }
    flight->done_cv.notify_all();
}

void PlanCache::erase_model(absl::string_view model) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->first.model == model) {
            lru_.erase(it->second.lru_position);
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    for (auto& [key, flight] : in_flight_) {
        if (key.model == model) {
            flight->discard = true;
        }
    }
}

void PlanCache::evict_locked() {
    auto position = lru_.end();
    while (static_cast<int64_t>(entries_.size()) > max_entries_ && position != lru_.begin()) {
        --position;
        auto entry = entries_.find(*position);
        if (entry->second.pinned) {
            continue;
        }
        entries_.erase(entry);
        position = lru_.erase(position);
    }
}

void PlanCache::pin(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
        it->second.pinned = true;
    }
}

void PlanCache::touch(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = entries_.find(key);
    if (it != entries_.end()) {
        lru_.splice(lru_.begin(), lru_, it->second.lru_position);
    }
}

int64_t PlanCache::pinned() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t pinned = 0;
    for (const auto& [key, entry] : entries_) {
        pinned += entry.pinned ? 1 : 0;
    }
    return pinned;
}

int64_t PlanCache::size() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(entries_.size());
}

int64_t PlanCache::count_for_model(absl::string_view model) const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t count = 0;
    for (const auto& [key, entry] : entries_) {
        count += key.model == model ? 1 : 0;
    }
    return count;
}

std::vector<std::shared_ptr<CachedPlan>> PlanCache::entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::shared_ptr<CachedPlan>> out;
    for (const PlanKey& key : lru_) {
        out.push_back(entries_.at(key).plan);
    }
    return out;
}

std::vector<PlanKey> PlanCache::keys() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<PlanKey> keys(lru_.begin(), lru_.end());
    for (const auto& [key, flight] : in_flight_) {
        keys.push_back(key);
    }
    return keys;
}

} // namespace einsummable::server
