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

} // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      requests_(prometheus::BuildCounter()
                    .Name("einsummable_requests_total")
                    .Help("RPCs finished, by method and status code")
                    .Register(*registry_)),
      request_seconds_(prometheus::BuildHistogram()
                           .Name("einsummable_request_duration_seconds")
                           .Help("RPC latency in seconds, by method")
                           .Register(*registry_)),
      inflight_(prometheus::BuildGauge()
                    .Name("einsummable_inflight_requests")
                    .Help("RPCs being served")
                    .Register(*registry_)
                    .Add({})),
      compile_seconds_(prometheus::BuildHistogram()
                           .Name("einsummable_compile_duration_seconds")
                           .Help("Plan compilations (optimiser, synthesis, lowering, prepare) "
                                 "in seconds; plans loaded from the plan store are not counted")
                           .Register(*registry_)
                           .Add({}, kCompileBuckets)),
      compile_queue_length_(prometheus::BuildGauge()
                                .Name("einsummable_compile_queue_length")
                                .Help("Compiles waiting for a thread of the compile pool")
                                .Register(*registry_)
                                .Add({})),
      compiles_running_(prometheus::BuildGauge()
                            .Name("einsummable_compiles_running")
                            .Help("Compiles running on the compile pool (at most "
                                  "--compile_threads)")
                            .Register(*registry_)
                            .Add({})),
      executions_running_(prometheus::BuildGauge()
                              .Name("einsummable_executions_running")
                              .Help("Executes holding a plan instance: at most "
                                    "--instances_per_plan per plan run at once")
                              .Register(*registry_)
                              .Add({})),
      compile_queue_wait_seconds_(prometheus::BuildHistogram()
                                      .Name("einsummable_compile_queue_wait_seconds")
                                      .Help("Time compiles waited in the queue for a thread of "
                                            "the compile pool, in seconds")
                                      .Register(*registry_)
                                      .Add({}, kCompileBuckets)),
      compiles_cancelled_(prometheus::BuildCounter()
                              .Name("einsummable_compiles_cancelled_total")
                              .Help("Compiles stopped (or never started) because every request "
                                    "waiting for them was cancelled or passed its deadline")
                              .Register(*registry_)
                              .Add({})),
      cache_hits_(prometheus::BuildCounter()
                      .Name("einsummable_plan_cache_hits_total")
                      .Help("Plan lookups served from memory")
                      .Register(*registry_)
                      .Add({})),
      cache_misses_(prometheus::BuildCounter()
                        .Name("einsummable_plan_cache_misses_total")
                        .Help("Plan lookups that loaded a stored plan, compiled one or waited "
                              "for a concurrent compile")
                        .Register(*registry_)
                        .Add({})),
      cache_entries_(prometheus::BuildGauge()
                         .Name("einsummable_plan_cache_entries")
                         .Help("Plans held in memory")
                         .Register(*registry_)
                         .Add({})),
      execute_seconds_(prometheus::BuildHistogram()
                           .Name("einsummable_execute_duration_seconds")
                           .Help("Measured plan executions in seconds (inputs loaded, run, "
                                 "outputs offloaded), by model")
                           .Register(*registry_)),
      predicted_exchange_(prometheus::BuildGauge()
                              .Name("einsummable_predicted_exchange_seconds")
                              .Help("Simulated exchange time in seconds of the model's plan "
                                    "executed last (compare with the measured execute time)")
                              .Register(*registry_)),
      bytes_moved_(prometheus::BuildCounter()
                       .Name("einsummable_bytes_moved_total")
                       .Help("Bytes copied between devices by executions, by device pair")
                       .Register(*registry_)),
      device_memory_(prometheus::BuildGauge()
                         .Name("einsummable_device_memory_bytes")
                         .Help("Peak bytes of the static memory plans of the plans held in "
                               "memory, summed per device")
                         .Register(*registry_)),
      device_memory_capacity_(prometheus::BuildGauge()
                                  .Name("einsummable_device_memory_capacity_bytes")
                                  .Help("Bytes each device may hold for plans and weights "
                                        "(exported only where a capacity is known)")
                                  .Register(*registry_)),
      upload_bytes_in_flight_(prometheus::BuildGauge()
                                  .Name("einsummable_upload_bytes_in_flight")
                                  .Help("Bytes held by uploads in progress (at most "
                                        "--max_upload_bytes_in_flight)")
                                  .Register(*registry_)
                                  .Add({})),
      models_(prometheus::BuildGauge()
                  .Name("einsummable_models")
                  .Help("Models registered (at most --max_models)")
                  .Register(*registry_)
                  .Add({})),
      model_bytes_(prometheus::BuildGauge()
                       .Name("einsummable_model_bytes")
                       .Help("Bytes of the registered models: serialized graphs plus the sizes "
                             "of their weights (at most --max_model_bytes)")
                       .Register(*registry_)
                       .Add({})),
      plan_store_files_(prometheus::BuildGauge()
                            .Name("einsummable_plan_store_files")
                            .Help("Plan files in --plan_cache_dir")
                            .Register(*registry_)
                            .Add({})),
      plan_store_bytes_(prometheus::BuildGauge()
                            .Name("einsummable_plan_store_bytes")
                            .Help("Bytes of the plan files in --plan_cache_dir (at most "
                                  "--plan_cache_max_bytes, plus plans in use)")
                            .Register(*registry_)
                            .Add({})),
      plan_store_evictions_(prometheus::BuildCounter()
                                .Name("einsummable_plan_store_evictions_total")
                                .Help("Plan files removed, least recently used first, to keep "
                                      "--plan_cache_dir under --plan_cache_max_bytes")
                                .Register(*registry_)
                                .Add({})),
      batch_size_(prometheus::BuildHistogram()
                      .Name("einsummable_batch_size")
                      .Help("Requests per execution of a model with batching (idle requests "
                            "that complete a batch to a preferred size not counted), by model")
                      .Register(*registry_)),
      batch_queue_seconds_(prometheus::BuildHistogram()
                               .Name("einsummable_batch_queue_seconds")
                               .Help("Time requests to a model with batching waited for their "
                                     "batch to start, in seconds, by model")
                               .Register(*registry_)) {}

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
    model_series_.erase(it);
}

} // namespace einsummable::server
