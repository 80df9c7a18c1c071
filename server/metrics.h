#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace einsummable::server {

// The daemon's Prometheus metrics (docs/server.md, "Metrics"): `einsummable_` prefix, base
// units (seconds, bytes), counters end in _total. Thread-safe. The daemon serves text() on
// /metrics (server/metrics_http.h); tests read it too.
class Metrics {
public:
    Metrics();

    std::shared_ptr<prometheus::Registry> registry() const { return registry_; }
    // The registry in the text exposition format.
    std::string text() const;

    // One finished RPC: einsummable_requests_total{method,code} and
    // einsummable_request_duration_seconds{method}. code is the status code's canonical name
    // ("OK", "INVALID_ARGUMENT", ...).
    void request(const std::string& method, absl::StatusCode code, double seconds);
    void inflight_add(double delta);

    void compile(double seconds);
    // The compile pool (server/compile_pool.h): compiles waiting for a thread, running, the
    // time each waited, and those stopped because every caller left.
    void compile_queue_length(int64_t queued);
    void compiles_running(int64_t running);
    void compile_queue_wait(double seconds);
    void compile_cancelled();
    void cache_hit();
    void cache_miss();
    void cache_entries(int64_t entries);
    // The exchange-program cache (physical::SynthesisCache::Stats), its running totals:
    // einsummable_exchange_cache_{hits,misses,evictions}_total, _entries and _bytes.
    void exchange_cache(int64_t hits, int64_t misses, int64_t evictions, int64_t entries,
                        int64_t bytes);

    void execute(const std::string& model, double seconds);
    // Executes holding a plan instance (running, or waiting in the delay for testing).
    void executions_running_add(double delta);
    void predicted_exchange(const std::string& model, double seconds);
    // One execution of a batch (server/batcher.h): einsummable_batch_size{model} observes its
    // requests, einsummable_batch_queue_seconds{model} how long each of them waited.
    void batch(const std::string& model, int requests, const std::vector<double>& queue_seconds);
    void bytes_moved(int src, int dst, int64_t bytes);
    // An Execute of a model with token buckets: einsummable_bucket_tokens_total{model} counts
    // its `tokens`, einsummable_bucket_padding_tokens_total{model} the `bucket - tokens` it was
    // padded with (padded fraction: padding / (tokens + padding)).
    void bucket_tokens(const std::string& model, int64_t tokens, int64_t bucket);
    // One token Generate streamed (server/generation.h): einsummable_generated_tokens_total
    // {model}; `seconds` is the time to it from the request's start for the first (index 0,
    // einsummable_time_to_first_token_seconds{model}), from the token before for the others
    // (einsummable_inter_token_seconds{model}).
    void generated_token(const std::string& model, int index, double seconds);
    // A model's generation slots (server/generation_pool.h): einsummable_generation_slots
    // {model, state} — in_use (a generation running) and free.
    void generation_slots(const std::string& model, int64_t in_use, int64_t free);
    // A model's key/value cache pages: einsummable_generation_pages{model, state} — in_use
    // (reserved by a generation) and free.
    void generation_pages(const std::string& model, int64_t in_use, int64_t free);
    // One decode step of a model's generations: einsummable_decode_batch_size{model}, the
    // generations it advanced together (continuous batching).
    void decode_step(const std::string& model, int64_t generations);
    // einsummable_request_path_compiles_total: compiles a request waited for (every compile
    // that is not loaded from the plan store or rebuilt from another bucket length's plan).
    void request_path_compile();
    // einsummable_bucket_plan_rebuilds_total: plans of a bucket rebuilt from the plan of
    // another length of it (runtime::Plan::restore), without the optimiser or the synthesis.
    void bucket_plan_rebuild();
    // A model's warm-up (server/warm_up.h): einsummable_warm_up_buckets{model,state} holds how
    // many of its bucket plans are pending (to compile, the one compiling included), ready
    // (compiled) and failed.
    void warm_up_buckets(const std::string& model, int64_t pending, int64_t ready, int64_t failed);
    // einsummable_device_memory_bytes{device}: the resident plans' peak bytes per device.
    void device_memory(const std::vector<int64_t>& bytes_per_device);
    // einsummable_device_memory_capacity_bytes{device}: the bytes a device may hold
    // (--device_memory, the topology's or the driver's), set once at start where one is known,
    // so dashboards and alerts compare einsummable_device_memory_bytes with it.
    void device_memory_capacity(int devices, int64_t bytes_per_device);
    // Drops the model-labelled series of an unregistered model.
    void erase_model(const std::string& model);
    // einsummable_upload_bytes_in_flight: bytes held by uploads in progress (UploadBudget).
    void upload_bytes_in_flight_add(int64_t delta);
    // einsummable_models, einsummable_model_bytes: the models registered and their bytes
    // (Model::bytes), changed by the deltas given.
    void models_add(int64_t models, int64_t bytes);
    // einsummable_plan_store_files, einsummable_plan_store_bytes: the plan store's files;
    // einsummable_plan_store_evictions_total: files its byte cap removed (PlanStore::prune).
    void plan_store(int64_t files, int64_t bytes);
    void plan_store_evictions(int64_t files);

private:
    std::shared_ptr<prometheus::Registry> registry_;
    prometheus::Family<prometheus::Counter>& requests_;
    prometheus::Family<prometheus::Histogram>& request_seconds_;
    prometheus::Gauge& inflight_;
    prometheus::Histogram& compile_seconds_;
    prometheus::Gauge& compile_queue_length_;
    prometheus::Gauge& compiles_running_;
    prometheus::Gauge& executions_running_;
    prometheus::Histogram& compile_queue_wait_seconds_;
    prometheus::Counter& compiles_cancelled_;
    prometheus::Counter& cache_hits_;
    prometheus::Counter& cache_misses_;
    prometheus::Gauge& cache_entries_;
    prometheus::Counter& exchange_cache_hits_;
    prometheus::Counter& exchange_cache_misses_;
    prometheus::Counter& exchange_cache_evictions_;
    prometheus::Gauge& exchange_cache_entries_;
    prometheus::Gauge& exchange_cache_bytes_;
    std::mutex exchange_cache_mutex_; // compiles on several threads report totals
    prometheus::Family<prometheus::Histogram>& execute_seconds_;
    prometheus::Family<prometheus::Gauge>& predicted_exchange_;
    prometheus::Family<prometheus::Counter>& bytes_moved_;
    prometheus::Family<prometheus::Gauge>& device_memory_;
    prometheus::Family<prometheus::Gauge>& device_memory_capacity_;
    prometheus::Gauge& upload_bytes_in_flight_;
    prometheus::Gauge& models_;
    prometheus::Gauge& model_bytes_;
    prometheus::Gauge& plan_store_files_;
    prometheus::Gauge& plan_store_bytes_;
    prometheus::Counter& plan_store_evictions_;

    prometheus::Family<prometheus::Counter>& bucket_tokens_;
    prometheus::Family<prometheus::Counter>& bucket_padding_tokens_;
    prometheus::Counter& request_path_compiles_;
    prometheus::Counter& bucket_plan_rebuilds_;
    prometheus::Family<prometheus::Gauge>& warm_up_buckets_;
    prometheus::Family<prometheus::Histogram>& batch_size_;
    prometheus::Family<prometheus::Histogram>& batch_queue_seconds_;
    prometheus::Family<prometheus::Counter>& generated_tokens_;
    prometheus::Family<prometheus::Histogram>& first_token_seconds_;
    prometheus::Family<prometheus::Histogram>& inter_token_seconds_;
    prometheus::Family<prometheus::Gauge>& generation_slots_;
    prometheus::Family<prometheus::Gauge>& generation_pages_;
    prometheus::Family<prometheus::Histogram>& decode_batch_size_;
    // Sets the in_use and free gauges of `model` in `family`, made in `gauges` on first use
    // (mutex_ held).
    static void set_in_use_and_free(prometheus::Family<prometheus::Gauge>& family,
                                    std::vector<prometheus::Gauge*>& gauges,
                                    const std::string& model, int64_t in_use, int64_t free);

    std::mutex mutex_; // guards the per-model series below
    struct ModelSeries {
        prometheus::Histogram* execute = nullptr;
        prometheus::Gauge* predicted_exchange = nullptr;
        prometheus::Histogram* batch_size = nullptr;
        prometheus::Histogram* batch_queue = nullptr;
        prometheus::Counter* bucket_tokens = nullptr;
        prometheus::Counter* bucket_padding = nullptr;
        std::vector<prometheus::Gauge*> warm_up; // pending, ready, failed
        prometheus::Counter* generated_tokens = nullptr;
        prometheus::Histogram* first_token = nullptr;
        prometheus::Histogram* inter_token = nullptr;
        std::vector<prometheus::Gauge*> generation_slots; // in_use, free
        std::vector<prometheus::Gauge*> generation_pages; // in_use, free
        prometheus::Histogram* decode_batch = nullptr;
    };
    std::map<std::string, ModelSeries> model_series_;
};

} // namespace einsummable::server
