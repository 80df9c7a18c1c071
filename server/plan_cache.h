#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "compiler/support/cancellation.h"
#include "runtime/plan.h"
#include "server/compile_pool.h"
#include "server/plan_store.h"

namespace einsummable::server {

// A compiled plan as the server holds it: the runtime plan plus what a request needs to run it
// safely next to others.
struct CachedPlan {
    PlanKey key;
    // Null only in tests of the cache itself.
    std::unique_ptr<runtime::Plan> plan;
    bool loaded_from_store = false; // rebuilt from the plan store, not compiled
    double compile_seconds = 0.0;   // compile or store load

    // An Execute holds one of the plan's instances (runtime::Plan::acquire) across weight
    // reloads, input loads, execute and offloads, so the outputs it reads are those of its own
    // inputs; requests on other instances run meanwhile.
    // Guards bytes_moved_reported: the bytes moved already reported to the metrics.
    std::mutex report_mutex;
    std::vector<std::vector<int64_t>> bytes_moved_reported;
};

// Compiled plans by PlanKey (thread-safe): a bounded LRU with single-flight creation. When many
// requests miss one key at once, one creation runs (on the CompilePool when there is one) and
// every request waits for its result; a failure is handed to every waiter and not cached (the
// next request tries again). A waiter stops waiting when its own CancelCheck fails (deadline,
// cancellation); when the last waiter of a creation has gone, the creation's Cancellation is
// set, so the compile stops and frees its thread — while one caller still waits, it goes on. A
// request that misses a key whose creation is being cancelled starts a new one. An evicted or
// erased plan stays alive while a request holds it (shared_ptr).
class PlanCache {
public:
    // Creates the plan; polls `cancellation` (runtime::CompileOptions::cancellation) and returns
    // a Cancelled status once it is set.
    using Factory = std::function<absl::StatusOr<std::shared_ptr<CachedPlan>>(
        const std::shared_ptr<const support::Cancellation>& cancellation)>;
    // Polled while waiting for a creation; a non-OK status stops the wait (deadline exceeded,
    // cancelled).
    using CancelCheck = std::function<absl::Status()>;

    struct Lookup {
        std::shared_ptr<CachedPlan> plan;
        // Found ready in the cache. False for the requests that waited for a creation.
        bool hit = false;
    };

    // max_entries < 1 is taken as 1. Without a pool, creations run on the thread of the request
    // that missed first (which then cannot leave before it ends; the unit tests' mode).
    explicit PlanCache(int64_t max_entries, CompilePool* pool = nullptr,
                       std::shared_ptr<Metrics> metrics = nullptr);
    // Cancels the creations still in flight (the pool, destroyed after, then sees them stop).
    ~PlanCache();

    // `factory` and `still_wanted` may run after this call returned (its caller gave up while
    // others still wait): they must own what they use. `still_wanted`, when given, is asked
    // under the cache's lock before a created plan is inserted; false hands the plan to the
    // waiters without caching it (its model was unregistered meanwhile).
    absl::StatusOr<Lookup> get_or_create(const PlanKey& key, Factory factory,
                                         const CancelCheck& cancelled = nullptr,
                                         std::function<bool()> still_wanted = nullptr);

    // Sets the Cancellation of every creation in flight (the daemon is stopping).
    void cancel_all();

    // Drops every plan of `model` (UnregisterModel); a creation in flight for it completes for
    // its waiters but is not cached.
    void erase_model(absl::string_view model);

    // Marks `key`'s plan, if cached, as just used (the front of the LRU order): a plan that is
    // read without being looked up (a bucket's plan other lengths are rebuilt from) stays.
    void touch(const PlanKey& key);
    // Keeps `key`'s plan, if cached, until its model's plans are erased: eviction takes the
    // least recently used plan that is not pinned; when every other plan is pinned, a new plan
    // is handed to its waiters and not kept. For a model's bucket plans (WarmUp), which the plans
    // of other lengths are rebuilt from; a warm-up stops before every entry is pinned.
    void pin(const PlanKey& key);

    int64_t size() const;
    // Plans pinned (pin) and still cached.
    int64_t pinned() const;
    int64_t count_for_model(absl::string_view model) const;
    // The cached plans, most recently used first.
    std::vector<std::shared_ptr<CachedPlan>> entries() const;
    int64_t max_entries() const { return max_entries_; }
    // The keys of the cached plans and of those being created (whose plan files the plan store
    // must not evict).
    std::vector<PlanKey> keys() const;

private:
    struct InFlight {
        std::mutex mutex; // guards done, result and waiters
        std::condition_variable done_cv;
        bool done = false;
        absl::StatusOr<std::shared_ptr<CachedPlan>> result;
        int waiters = 0;      // requests waiting for the result
        bool discard = false; // guarded by PlanCache::mutex_
        const std::shared_ptr<support::Cancellation> cancellation =
            std::make_shared<support::Cancellation>();
    };
    struct Entry {
        std::shared_ptr<CachedPlan> plan;
        std::list<PlanKey>::iterator lru_position;
        bool pinned = false; // pin(): evicted last
    };
    // Evicts the least recently used unpinned plans while more than max_entries_ are held.
    void evict_locked();

    // Runs the factory and publishes its result (inserting it when it is still wanted).
    void create(const PlanKey& key, const std::shared_ptr<InFlight>& flight, const Factory& factory,
                const std::function<bool()>& still_wanted);

    const int64_t max_entries_;
    CompilePool* const pool_;
    const std::shared_ptr<Metrics> metrics_;
    mutable std::mutex mutex_; // guards everything below
    std::map<PlanKey, Entry> entries_;
    std::list<PlanKey> lru_; // most recently used first
    std::map<PlanKey, std::shared_ptr<InFlight>> in_flight_;
};

} // namespace einsummable::server
