#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "einsummable/v1/service.pb.h"
#include "server/metrics.h"
#include "server/model.h"

namespace einsummable::server {

// The background compiles of token buckets' plans (v1::TokenBuckets::skip_warm_up, docs/server.md
// "Warm-up"): after a model with buckets is registered, one thread asks for each bucket's plan
// (its single sequence at the bucket's size, the default options), smallest bucket first across
// every model warming, one at a time. The compiles themselves run where every compile runs (the
// engine's CompilePool, under --compile_threads), so a warm-up holds no request slot and never
// more than one compile thread; a request behind it in the pool's queue waits for one compile at
// most. While a model warms, a request whose bucket is not ready runs on the smallest ready
// bucket that holds it (serving_bucket). Unregistering a model drops its pending buckets and
// cancels the compile in flight; a ResourceExhausted compile (over a limit, the plan cache full)
// stops the model's warm-up, since larger buckets need more; any other failure marks that bucket
// failed and goes on. Thread-safe.
class WarmUp {
public:
    using CancelCheck = std::function<absl::Status()>;
    // Makes (or finds) `model`'s plan of `bucket`; returns the check's status once `cancelled`
    // fails.
    using CompileBucket = std::function<absl::Status(const std::shared_ptr<const Model>& model,
                                                     int64_t bucket, const CancelCheck& cancelled)>;

    // `metrics` may be null. The thread starts at once and waits for models.
    WarmUp(CompileBucket compile, std::shared_ptr<Metrics> metrics);
    WarmUp(const WarmUp&) = delete;
    WarmUp& operator=(const WarmUp&) = delete;
    // stop().
    ~WarmUp();

    // Whether `model` warms up: it has buckets, does not skip the warm-up, and its batching
    // dimension is its only symbol (so a bucket's size binds every symbol).
    static bool wanted(const Model& model);
    // Queues every bucket of `model` when wanted(model); nothing otherwise.
    void add(std::shared_ptr<const Model> model);
    // `model_id`'s model was unregistered: its pending buckets are dropped and the compile in
    // flight for it, if any, is cancelled (its cancel check fails). Returns at once.
    void remove(uint64_t model_id);
    // The bucket a request of `model` whose own bucket is `bucket` runs at: `bucket` itself
    // unless the model is warming and `bucket`'s plan is not ready yet, then the smallest ready
    // bucket above it; nullopt when there is none (the request waits for `bucket`'s plan).
    std::optional<int64_t> serving_bucket(const Model& model, int64_t bucket) const;
    // Its state as ListModels gives it (WARM_UP_NONE for a model that is not warming).
    v1::WarmUp info(uint64_t model_id) const;
    // Bucket plans pending over every model (the one compiling included).
    int64_t pending() const;
    // Drops every pending bucket, cancels the compile in flight and joins the thread.
    // Idempotent.
    void stop();

private:
    struct Entry {
        std::shared_ptr<const Model> model;
        uint64_t order = 0;           // registration order, for ties between models
        std::vector<int64_t> pending; // ascending
        std::vector<int64_t> ready;   // ascending
        std::vector<int64_t> failed;
        std::optional<int64_t> compiling;
        std::string message;
        bool stopped = false;
        bool removed = false; // unregistered while compiling: erased when it returns
    };

    void work();
    // The entry whose next bucket is the smallest (ties: the first registered); null when none.
    Entry* next_locked();
    void publish_locked(const Entry& entry) const;
    // Records what compiling `bucket` of `entry` returned.
    void finish_locked(Entry& entry, int64_t bucket, const absl::Status& status);

    const CompileBucket compile_;
    const std::shared_ptr<Metrics> metrics_;
    mutable std::mutex mutex_; // guards everything below
    std::condition_variable work_cv_;
    std::map<uint64_t, Entry> entries_; // by Model::id()
    uint64_t next_order_ = 0;
    bool stopping_ = false;
    std::thread thread_;
};

} // namespace einsummable::server
