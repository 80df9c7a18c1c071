#include "server/plan_cache.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"

namespace einsummable::server {

PlanCache::PlanCache(int64_t max_entries) : max_entries_(std::max<int64_t>(max_entries, 1)) {}

absl::StatusOr<PlanCache::Lookup>
PlanCache::get_or_create(const PlanKey& key, const Factory& factory, const CancelCheck& cancelled,
                         const std::function<bool()>& still_wanted) {
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
        if (pending != in_flight_.end()) {
            flight = pending->second;
        } else {
            flight = std::make_shared<InFlight>();
            in_flight_[key] = flight;
            leader = true;
        }
    }

    if (!leader) {
        std::unique_lock<std::mutex> lock(flight->mutex);
        while (!flight->done) {
            flight->done_cv.wait_for(lock, std::chrono::milliseconds(50));
            if (!flight->done && cancelled) {
                if (absl::Status status = cancelled(); !status.ok()) {
                    return status;
                }
            }
        }
        if (!flight->result.ok()) {
            return flight->result.status();
        }
        return Lookup{*flight->result, false};
    }

    absl::StatusOr<std::shared_ptr<CachedPlan>> result;
    try {
        result = factory();
    } catch (const std::exception& error) {
        result = absl::InternalError(absl::StrCat("plan creation failed: ", error.what()));
    } catch (...) {
        result = absl::InternalError("plan creation failed with an unknown exception");
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        in_flight_.erase(key);
        if (result.ok() && !flight->discard && (!still_wanted || still_wanted())) {
            lru_.push_front(key);
            entries_[key] = Entry{*result, lru_.begin()};
            while (static_cast<int64_t>(entries_.size()) > max_entries_) {
                entries_.erase(lru_.back());
                lru_.pop_back();
            }
        }
    }
    {
        std::lock_guard<std::mutex> lock(flight->mutex);
        flight->result = result;
        flight->done = true;
    }
    flight->done_cv.notify_all();
    if (!result.ok()) {
        return result.status();
    }
    return Lookup{*std::move(result), false};
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

} // namespace einsummable::server
