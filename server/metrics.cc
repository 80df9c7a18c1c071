#include "server/metrics.h"

#include <sstream>

#include "prometheus/text_serializer.h"

namespace einsummable::server {
namespace {

// Request latencies: a millisecond to two minutes.
const prometheus::Histogram::BucketBoundaries kRequestBuckets = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
// Compiles: ten milliseconds to ten minutes.
const prometheus::Histogram::BucketBoundaries kCompileBuckets = {
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600};
// Executes: a hundred microseconds to a minute.
const prometheus::Histogram::BucketBoundaries kExecuteBuckets = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
// Batch sizes: powers of two up to BatchSpec::kMaxSize.
const prometheus::Histogram::BucketBoundaries kBatchSizeBuckets = {1,  2,   4,   8,   16,  32,
                                                                   64, 128, 256, 512, 1024};
// Batch queueing: ten microseconds to ten seconds (BatchSpec::kMaxQueueDelayUs).
const prometheus::Histogram::BucketBoundaries kQueueBuckets = {
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
    0.01,    0.025,    0.05,    0.1,    0.25,    0.5,    1,     2.5,    10};

// The metrics' definitions: a name, a help text, and for an unlabelled histogram its buckets.
// Families are labelled (their series added as labels appear); the others are one series.
prometheus::Counter& counter(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Gauge& gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Histogram& histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help,
                                 const prometheus::Histogram::BucketBoundaries& buckets) {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

prometheus::Family<prometheus::Counter>&
counter_family(prometheus::Registry& registry, const std::string& name, const std::string& help) {
    return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Gauge>&
gauge_family(prometheus::Registry& registry, const std::string& name, const std::string& help) {
    return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Family<prometheus::Histogram>&
histogram_family(prometheus::Registry& registry, const std::string& name, const std::string& help) {
    return prometheus::BuildHistogram().Name(name).Help(help).Register(registry);
}

} // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(counter_family(*registry_, "einsummable_requests_total",
                               "RPCs finished, by method and status code")),
      request_seconds_(histogram_family(*registry_, "einsummable_request_duration_seconds",
                                        "RPC latency in seconds, by method")),
      inflight_(gauge(*registry_, "einsummable_inflight_requests", "RPCs being served")),
      compile_seconds_(histogram(*registry_, "einsummable_compile_duration_seconds",
                                 "Plan compilations (optimiser, synthesis, lowering, prepare) in "
                                 "seconds; plans loaded from the plan store are not counted",
                                 kCompileBuckets)),
      compile_queue_length_(gauge(*registry_, "einsummable_compile_queue_length",
                                  "Compiles waiting for a thread of the compile pool")),
      compiles_running_(gauge(*registry_, "einsummable_compiles_running",
                              "Compiles running on the compile pool (at most --compile_threads)")),
      executions_running_(gauge(
          *registry_, "einsummable_executions_running",
          "Executes holding a plan instance: at most --instances_per_plan per plan run at once")),
      compile_queue_wait_seconds_(histogram(
          *registry_, "einsummable_compile_queue_wait_seconds",
          "Time compiles waited in the queue for a thread of the compile pool, in seconds",
          kCompileBuckets)),
      compiles_cancelled_(counter(*registry_, "einsummable_compiles_cancelled_total",
                                  "Compiles stopped (or never started) because every request "
                                  "waiting for them was cancelled or passed its deadline")),
      cache_hits_(counter(*registry_, "einsummable_plan_cache_hits_total",
                          "Plan lookups served from memory")),
      cache_misses_(counter(*registry_, "einsummable_plan_cache_misses_total",
                            "Plan lookups that loaded a stored plan, compiled one or waited for a "
                            "concurrent compile")),
      cache_entries_(gauge(*registry_, "einsummable_plan_cache_entries", "Plans held in memory")),
      exchange_cache_hits_(counter(*registry_, "einsummable_exchange_cache_hits_total",
                                   "Exchange programs a compile took from the exchange cache "
                                   "instead of synthesising them")),
      exchange_cache_misses_(counter(*registry_, "einsummable_exchange_cache_misses_total",
                                     "Exchange programs synthesised (not in the exchange cache)")),
      exchange_cache_evictions_(
          counter(*registry_, "einsummable_exchange_cache_evictions_total",
                  "Exchange programs dropped, least recently used first, to keep the exchange "
                  "cache under its byte bound")),
      exchange_cache_entries_(gauge(*registry_, "einsummable_exchange_cache_entries",
                                    "Exchange programs held in the exchange cache")),
      exchange_cache_bytes_(gauge(*registry_, "einsummable_exchange_cache_bytes",
                                  "Estimated bytes of the exchange cache's programs")),
      execute_seconds_(histogram_family(
          *registry_, "einsummable_execute_duration_seconds",
          "Measured plan executions in seconds (inputs loaded, run, outputs offloaded), by model")),
      predicted_exchange_(gauge_family(*registry_, "einsummable_predicted_exchange_seconds",
                                       "Simulated exchange time in seconds of the model's plan "
                                       "executed last (compare with the measured execute time)")),
      bytes_moved_(counter_family(*registry_, "einsummable_bytes_moved_total",
                                  "Bytes copied between devices by executions, by device pair")),
      device_memory_(gauge_family(
          *registry_, "einsummable_device_memory_bytes",
          "Peak bytes of the static memory plans of the plans held in memory, summed per device")),
      device_memory_capacity_(gauge_family(*registry_, "einsummable_device_memory_capacity_bytes",
                                           "Bytes each device may hold for plans and weights "
                                           "(exported only where a capacity is known)")),
      upload_bytes_in_flight_(
          gauge(*registry_, "einsummable_upload_bytes_in_flight",
                "Bytes held by uploads in progress (at most --max_upload_bytes_in_flight)")),
      models_(gauge(*registry_, "einsummable_models", "Models registered (at most --max_models)")),
      model_bytes_(gauge(*registry_, "einsummable_model_bytes",
                         "Bytes of the registered models: serialized graphs plus the sizes of "
                         "their weights (at most --max_model_bytes)")),
      plan_store_files_(
          gauge(*registry_, "einsummable_plan_store_files", "Plan files in --plan_cache_dir")),
      plan_store_bytes_(gauge(*registry_, "einsummable_plan_store_bytes",
                              "Bytes of the plan files in --plan_cache_dir (at most "
                              "--plan_cache_max_bytes, plus plans in use)")),
      plan_store_evictions_(counter(*registry_, "einsummable_plan_store_evictions_total",
                                    "Plan files removed, least recently used first, to keep "
                                    "--plan_cache_dir under --plan_cache_max_bytes")),
      bucket_tokens_(counter_family(*registry_, "einsummable_bucket_tokens_total",
                                    "Tokens of Executes to models with token buckets, by model")),
      bucket_padding_tokens_(
          counter_family(*registry_, "einsummable_bucket_padding_tokens_total",
                         "Padding tokens those Executes ran with up to their bucket, by model")),
      request_path_compiles_(counter(*registry_, "einsummable_request_path_compiles_total",
                                     "Plans compiled (optimiser and synthesis) while a request "
                                     "waited for them")),
      bucket_plan_rebuilds_(counter(*registry_, "einsummable_bucket_plan_rebuilds_total",
                                    "Plans of a token bucket rebuilt from the plan of another "
                                    "length of the bucket, without the optimiser or synthesis")),
      warm_up_buckets_(gauge_family(*registry_, "einsummable_warm_up_buckets",
                                    "Bucket plans of a model's warm-up, by model and state: "
                                    "pending (the one compiling included), ready, failed")),
      batch_size_(
          histogram_family(*registry_, "einsummable_batch_size",
                           "Requests per execution of a model with batching (idle requests that "
                           "complete a batch to a preferred size not counted), by model")),
      batch_queue_seconds_(histogram_family(*registry_, "einsummable_batch_queue_seconds",
                                            "Time requests to a model with batching waited for "
                                            "their batch to start, in seconds, by model")),
      generated_tokens_(counter_family(*registry_, "einsummable_generated_tokens_total",
                                       "Tokens Generate streamed, by model")),
      first_token_seconds_(histogram_family(
          *registry_, "einsummable_time_to_first_token_seconds",
          "Time from a Generate request's start to its first token, in seconds, by model")),
      inter_token_seconds_(histogram_family(
          *registry_, "einsummable_inter_token_seconds",
          "Time between consecutive tokens of a generation, in seconds, by model")),
      generation_slots_(gauge_family(*registry_, "einsummable_generation_slots",
                                     "A model's generation slots (each a sequence's key/value "
                                     "caches on the devices), by model and state: in_use, free")),
      generation_pages_(gauge_family(*registry_, "einsummable_generation_pages",
                                     "A model's key/value cache pages (each page_size tokens of "
                                     "every attention layer's keys and values), by model and "
                                     "state: in_use (reserved by a generation), free")),
      decode_batch_size_(histogram_family(
          *registry_, "einsummable_decode_batch_size",
          "Generations one decode step advanced together (continuous batching), by model")) {}

std::string Metrics::text() const {
    std::ostringstream out;
    prometheus::TextSerializer().Serialize(out, registry_->Collect());
    return out.str();
}

void Metrics::request(const std::string& method, absl::StatusCode code, double seconds) {
    requests_.Add({{"method", method}, {"code", absl::StatusCodeToString(code)}}).Increment();
    request_seconds_.Add({{"method", method}}, kRequestBuckets).Observe(seconds);
}

void Metrics::inflight_add(double delta) {
    inflight_.Increment(delta);
}

void Metrics::compile(double seconds) {
    compile_seconds_.Observe(seconds);
}

void Metrics::compile_queue_length(int64_t queued) {
    compile_queue_length_.Set(static_cast<double>(queued));
}

void Metrics::compiles_running(int64_t running) {
    compiles_running_.Set(static_cast<double>(running));
}

void Metrics::executions_running_add(double delta) {
    executions_running_.Increment(delta);
}

void Metrics::compile_queue_wait(double seconds) {
    compile_queue_wait_seconds_.Observe(seconds);
}

void Metrics::compile_cancelled() {
    compiles_cancelled_.Increment();
}

void Metrics::cache_hit() {
    cache_hits_.Increment();
}

void Metrics::cache_miss() {
    cache_misses_.Increment();
}

void Metrics::cache_entries(int64_t entries) {
    cache_entries_.Set(static_cast<double>(entries));
}

void Metrics::exchange_cache(int64_t hits, int64_t misses, int64_t evictions, int64_t entries,
                             int64_t bytes) {
    // The cache keeps running totals; the counters advance to them (never back).
    std::lock_guard<std::mutex> lock(exchange_cache_mutex_);
    auto advance = [](prometheus::Counter& counter, int64_t total) {
        const double delta = static_cast<double>(total) - counter.Value();
        if (delta > 0.0) {
            counter.Increment(delta);
        }
    };
    advance(exchange_cache_hits_, hits);
    advance(exchange_cache_misses_, misses);
    advance(exchange_cache_evictions_, evictions);
    exchange_cache_entries_.Set(static_cast<double>(entries));
    exchange_cache_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::execute(const std::string& model, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    prometheus::Histogram& histogram = execute_seconds_.Add({{"model", model}}, kExecuteBuckets);
    model_series_[model].execute = &histogram;
    histogram.Observe(seconds);
}

void Metrics::predicted_exchange(const std::string& model, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    prometheus::Gauge& gauge = predicted_exchange_.Add({{"model", model}});
    model_series_[model].predicted_exchange = &gauge;
    gauge.Set(seconds);
}

void Metrics::batch(const std::string& model, int requests,
                    const std::vector<double>& queue_seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelSeries& series = model_series_[model];
    series.batch_size = &batch_size_.Add({{"model", model}}, kBatchSizeBuckets);
    series.batch_queue = &batch_queue_seconds_.Add({{"model", model}}, kQueueBuckets);
    series.batch_size->Observe(requests);
    for (double seconds : queue_seconds) {
        series.batch_queue->Observe(seconds);
    }
}

void Metrics::generated_token(const std::string& model, int index, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelSeries& series = model_series_[model];
    series.generated_tokens = &generated_tokens_.Add({{"model", model}});
    series.generated_tokens->Increment();
    if (index == 0) {
        series.first_token = &first_token_seconds_.Add({{"model", model}}, kExecuteBuckets);
        series.first_token->Observe(seconds);
    } else {
        series.inter_token = &inter_token_seconds_.Add({{"model", model}}, kExecuteBuckets);
        series.inter_token->Observe(seconds);
    }
}

void Metrics::set_in_use_and_free(prometheus::Family<prometheus::Gauge>& family,
                                  std::vector<prometheus::Gauge*>& gauges, const std::string& model,
                                  int64_t in_use, int64_t free) {
    if (gauges.empty()) {
        for (const char* state : {"in_use", "free"}) {
            gauges.push_back(&family.Add({{"model", model}, {"state", state}}));
        }
    }
    gauges[0]->Set(static_cast<double>(in_use));
    gauges[1]->Set(static_cast<double>(free));
}

void Metrics::generation_slots(const std::string& model, int64_t in_use, int64_t free) {
    std::lock_guard<std::mutex> lock(mutex_);
    set_in_use_and_free(generation_slots_, model_series_[model].generation_slots, model, in_use,
                        free);
}

void Metrics::generation_pages(const std::string& model, int64_t in_use, int64_t free) {
    std::lock_guard<std::mutex> lock(mutex_);
    set_in_use_and_free(generation_pages_, model_series_[model].generation_pages, model, in_use,
                        free);
}

void Metrics::decode_step(const std::string& model, int64_t generations) {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelSeries& series = model_series_[model];
    if (series.decode_batch == nullptr) {
        series.decode_batch = &decode_batch_size_.Add({{"model", model}}, kBatchSizeBuckets);
    }
    series.decode_batch->Observe(static_cast<double>(generations));
}

void Metrics::bucket_tokens(const std::string& model, int64_t tokens, int64_t bucket) {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelSeries& series = model_series_[model];
    series.bucket_tokens = &bucket_tokens_.Add({{"model", model}});
    series.bucket_padding = &bucket_padding_tokens_.Add({{"model", model}});
    series.bucket_tokens->Increment(static_cast<double>(tokens));
    series.bucket_padding->Increment(static_cast<double>(bucket - tokens));
}

void Metrics::request_path_compile() {
    request_path_compiles_.Increment();
}

void Metrics::bucket_plan_rebuild() {
    bucket_plan_rebuilds_.Increment();
}

void Metrics::warm_up_buckets(const std::string& model, int64_t pending, int64_t ready,
                              int64_t failed) {
    std::lock_guard<std::mutex> lock(mutex_);
    ModelSeries& series = model_series_[model];
    if (series.warm_up.empty()) {
        for (const char* state : {"pending", "ready", "failed"}) {
            series.warm_up.push_back(&warm_up_buckets_.Add({{"model", model}, {"state", state}}));
        }
    }
    series.warm_up[0]->Set(static_cast<double>(pending));
    series.warm_up[1]->Set(static_cast<double>(ready));
    series.warm_up[2]->Set(static_cast<double>(failed));
}

void Metrics::bytes_moved(int src, int dst, int64_t bytes) {
    if (bytes <= 0) {
        return;
    }
    bytes_moved_.Add({{"src", std::to_string(src)}, {"dst", std::to_string(dst)}})
        .Increment(static_cast<double>(bytes));
}

void Metrics::device_memory(const std::vector<int64_t>& bytes_per_device) {
    for (size_t device = 0; device < bytes_per_device.size(); ++device) {
        device_memory_.Add({{"device", std::to_string(device)}})
            .Set(static_cast<double>(bytes_per_device[device]));
    }
}

void Metrics::device_memory_capacity(int devices, int64_t bytes_per_device) {
    for (int device = 0; device < devices; ++device) {
        device_memory_capacity_.Add({{"device", std::to_string(device)}})
            .Set(static_cast<double>(bytes_per_device));
    }
}

void Metrics::upload_bytes_in_flight_add(int64_t delta) {
    if (delta >= 0) {
        upload_bytes_in_flight_.Increment(static_cast<double>(delta));
    } else {
        upload_bytes_in_flight_.Decrement(static_cast<double>(-delta));
    }
}

void Metrics::models_add(int64_t models, int64_t bytes) {
    for (auto [gauge, delta] : {std::pair{&models_, models}, std::pair{&model_bytes_, bytes}}) {
        if (delta >= 0) {
            gauge->Increment(static_cast<double>(delta));
        } else {
            gauge->Decrement(static_cast<double>(-delta));
        }
    }
}

void Metrics::plan_store(int64_t files, int64_t bytes) {
    plan_store_files_.Set(static_cast<double>(files));
    plan_store_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::plan_store_evictions(int64_t files) {
    plan_store_evictions_.Increment(static_cast<double>(files));
}

void Metrics::erase_model(const std::string& model) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = model_series_.find(model);
    if (it == model_series_.end()) {
        return;
    }
    const ModelSeries& series = it->second;
    if (series.execute != nullptr) {
        execute_seconds_.Remove(series.execute);
    }
    if (series.predicted_exchange != nullptr) {
        predicted_exchange_.Remove(series.predicted_exchange);
    }
    if (series.batch_size != nullptr) {
        batch_size_.Remove(series.batch_size);
    }
    if (series.batch_queue != nullptr) {
        batch_queue_seconds_.Remove(series.batch_queue);
    }
    if (series.bucket_tokens != nullptr) {
        bucket_tokens_.Remove(series.bucket_tokens);
    }
    if (series.bucket_padding != nullptr) {
        bucket_padding_tokens_.Remove(series.bucket_padding);
    }
    for (prometheus::Gauge* gauge : series.warm_up) {
        warm_up_buckets_.Remove(gauge);
    }
    if (series.generated_tokens != nullptr) {
        generated_tokens_.Remove(series.generated_tokens);
    }
    if (series.first_token != nullptr) {
        first_token_seconds_.Remove(series.first_token);
    }
    if (series.inter_token != nullptr) {
        inter_token_seconds_.Remove(series.inter_token);
    }
    for (prometheus::Gauge* gauge : series.generation_slots) {
        generation_slots_.Remove(gauge);
    }
    for (prometheus::Gauge* gauge : series.generation_pages) {
        generation_pages_.Remove(gauge);
    }
    if (series.decode_batch != nullptr) {
        decode_batch_size_.Remove(series.decode_batch);
    }
    model_series_.erase(it);
}

} // namespace einsummable::server
