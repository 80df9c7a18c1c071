#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "einsummable/v1/service.pb.h"
#include "runtime/backend.h"
#include "server/backend_failure.h"
#include "server/batcher.h"
#include "server/cancel_watcher.h"
#include "server/compile_pool.h"
#include "server/engine_settings.h"
#include "server/generation_pool.h"
#include "server/metrics.h"
#include "server/model_store.h"
#include "server/plan_cache.h"
#include "server/plan_persistence.h"
#include "server/request_shapes.h"
#include "server/warm_up.h"
#include "server/weight_residency.h"

namespace einsummable::server {

// What the engine is built with: the settings the daemon's flags give (EngineSettings), and
// what start-up found out about the machine.
struct EngineOptions : EngineSettings {
    std::string version; // EINSUMMABLE_VERSION; part of every PlanKey
    // The machine the exchange programs are synthesised for; runtime::default_topology(backend
    // devices) when unset.
    std::optional<exprog::Topology> topology;
    // What GetServerInfo and explain say about the machine (runtime/backend_choice.h): why this
    // backend, its GPUs (CUDA), and where the topology came from.
    std::string backend_reason;
    std::string gpus;
    std::string topology_reason;
    // Bytes one device may hold for a plan (runtime::CompileOptions::device_memory_bytes; the
    // daemon's --device_memory, the topology's memory or the driver's): plans that do not fit
    // are planned again with the model's weights sharded, or refused with RESOURCE_EXHAUSTED.
    // Part of every PlanKey where set. 0 = unlimited.
    int64_t device_memory_bytes = 0;
    std::string device_memory_reason; // where device_memory_bytes came from, for explain
};

// Returns a non-OK status (DeadlineExceeded, Cancelled) when the request should stop: gRPC's
// ServerContext in the daemon, nothing in tests.
using CancelCheck = std::function<absl::Status()>;

// The service's operations over its protobuf messages, without gRPC (the gRPC service in
// grpc_service.h and the KServe v2 adapter in kserve.h call these): models and weights
// (ModelStore), plans (PlanCache, compiled on a miss, persisted through PlanPersistence),
// executions, metrics. Thread-safe. Errors are absl::Status with the codes service.proto lists
// and messages naming the model, tensor, operator or dimension at fault.
//
// A request is shaped and checked first (RequestShapes, request_shapes.h), then finds or makes
// its plan (PlanKey, plan_key.h; engine_plans.cc), the model's weights placed on the devices
// once for all its plans (WeightResidency, weight_residency.h), and runs on one of the plan's
// instances (engine_execute.cc), alone or, for a model with batching, packed with others
// (Batcher, batcher.h; BatchLayout, batch_layout.h). Once the backend fails beyond recovery
// nothing more runs (BackendFailure, backend_failure.h).
class Engine {
public:
    // `metrics` may be null.
    Engine(EngineOptions options, std::shared_ptr<runtime::Backend> backend,
           std::unique_ptr<PlanPersistence> persistence, std::shared_ptr<Metrics> metrics);
    // Stops the compiles in flight and waits for the compile pool's threads.
    ~Engine();

    absl::StatusOr<v1::RegisterModelResponse> register_model(const v1::RegisterModelRequest& req);
    // From the first chunk of an UploadTensor stream (its header).
    absl::StatusOr<std::unique_ptr<WeightUpload>> begin_upload(const v1::UploadTensorChunk& first);
    absl::StatusOr<v1::CompileResponse> compile(const v1::CompileRequest& req,
                                                const CancelCheck& cancelled = nullptr);
    absl::StatusOr<v1::ExecuteResponse> execute(const v1::ExecuteRequest& req,
                                                const CancelCheck& cancelled = nullptr);
    absl::StatusOr<v1::ExplainResponse> explain(const v1::ExplainRequest& req,
                                                const CancelCheck& cancelled = nullptr);
    v1::ListModelsResponse list_models() const;
    // NotFound naming the model.
    absl::StatusOr<std::shared_ptr<const Model>> find_model(absl::string_view name) const;
    absl::Status unregister_model(const v1::UnregisterModelRequest& req);
    // A model of the model repository (server/model_repository.h) registered with all its
    // weights in one step, so that no request sees it without them, in place of the model
    // registered under its name with id `replaces` (0: the name must be free); AlreadyExists
    // when another model holds the name, e.g. one registered over RegisterModel. The model
    // replaced is unregistered in the same step: its plans leave the plan cache as
    // UnregisterModel's do, and requests that found it finish on it. The model registered.
    // `version`: the version directory's number (Model::version()).
    using WeightValues = std::vector<std::pair<std::string, WeightBytes>>;
    absl::StatusOr<std::shared_ptr<const Model>> load_model(const v1::RegisterModelRequest& req,
                                                            const WeightValues& weights,
                                                            uint64_t replaces, int64_t version = 0);
    v1::GetServerInfoResponse server_info() const;
    // The backend, its devices and the topology, with why (explain's first lines).
    std::string machine_text() const;

    const EngineOptions& options() const { return options_; }
    const std::shared_ptr<runtime::Backend>& backend() const { return backend_; }
    // The generation pools of the models (Generate on key/value caches, generation_pool.h).
    GenerationPools& generation_pools() { return generation_pools_; }
    // The models' shared resident weights (WeightResidency), or null with --share_weights=false.
    WeightResidency* shared_weights() { return options_.share_weights ? &residency_ : nullptr; }
    // einsummable_device_memory_bytes again (a generation pool made or grown a plan).
    void refresh_memory_metrics() { update_cache_metrics(); }
    // `model` built for a generation step (GenerationPool): its batch symbol bound to `tokens`
    // packed as `sequence_ends`, the request's `options` over the model's
    // (RequestShapes::shape_with). FailedPrecondition for a model without batching or with
    // symbols besides its batch dimension.
    absl::StatusOr<RequestShape> generation_shape(const std::shared_ptr<const Model>& model,
                                                  int64_t tokens, const v1::CompileOptions& options,
                                                  std::vector<int64_t> sequence_ends) const;
    // Null when the engine was made without metrics.
    Metrics* metrics() const { return metrics_.get(); }
    const PlanPersistence& persistence() const { return *persistence_; }
    const PlanCache& plan_cache() const { return cache_; }
    // Plans actually compiled (not loaded from the store) since start-up.
    int64_t compiles() const;

    // When the backend fails beyond recovery (runtime::Backend::unrecoverable_error: on CUDA a
    // sticky error, docs/cuda.md "Errors"), the engine runs nothing more: the request whose
    // call failed, and every request after it that needs the devices (compile, execute,
    // explain), fail with UNAVAILABLE saying so and that the server restarts. `listener` hears
    // the backend's error once, on the thread of the request that found it, before that
    // request returns (at once if it has already happened); the daemon stops serving in it and
    // exits non-zero (docs/server.md "Unrecoverable device errors").
    void set_unrecoverable_listener(std::function<void(const absl::Status& error)> listener);
    // The backend's unrecoverable error once the engine has seen it; OK before.
    absl::Status unrecoverable_error() const;
    // Asks the backend whether it has failed beyond recovery although no call has failed yet
    // (the cluster backend: a rank that left its heartbeat unanswered while idle): if so the
    // failure is noted and the listener hears of it, as after a failed call. Returns
    // unrecoverable_error().
    absl::Status check_backend();

private:
    struct ReadyPlan {
        std::shared_ptr<const Model> model;
        std::shared_ptr<CachedPlan> plan;
        bool cache_hit = false;
    };

    // Model lookup, then RequestShapes::shape; `inputs` (Execute's) bind symbols too.
    absl::StatusOr<RequestShape> request_shape(
        const std::string& model_name, const google::protobuf::Map<std::string, int64_t>& dims,
        const v1::CompileOptions& options, const google::protobuf::RepeatedField<int64_t>& ends,
        const WireInputs& inputs = WireInputs());

    // Plans (engine_plans.cc).
    // The shape's plan, found or made (the model's weights placed on the way). A compile for a
    // warm-up (not `request_path`) is not counted as a compile on the request path.
    absl::StatusOr<ReadyPlan> plan_for(RequestShape shape, const CancelCheck& cancelled,
                                       bool request_path = true);
    // Where the plan of `key` reads `model`'s weights (setting key.weights) and the compile
    // options that follow: laid out by this plan, in place from the model's layout, or its own
    // copies (WeightResidency).
    absl::StatusOr<WeightResidency::Choice> place_weights(const Model& model, PlanKey& key,
                                                          runtime::CompileOptions& options,
                                                          const CancelCheck& cancelled);
    // On a CompilePool thread; `options.cancellation` is the creation's (PlanCache): the plan
    // restored from the plan store, else compiled (and saved there).
    absl::StatusOr<std::shared_ptr<CachedPlan>> create_plan(const PlanKey& key, ir::Graph graph,
                                                            const runtime::CompileOptions& options,
                                                            const Model& model, bool request_path);

    // Executions (engine_execute.cc).
    // One execution on one of the plan's instances: weights refreshed, `load`, run, `offload`;
    // then the metrics. The run's seconds.
    using LeaseStep = std::function<absl::Status(runtime::Plan::Lease&)>;
    absl::StatusOr<double> run_on_instance(const ReadyPlan& ready, const LeaseStep& load,
                                           const LeaseStep& offload, const CancelCheck& cancelled);
    // One of the plan's instances, waiting for it in arrival order (runtime::Plan::acquire);
    // the wait ends early, with the check's status, once `cancelled` (null: never) fails.
    absl::StatusOr<runtime::Plan::Lease> acquire_instance(runtime::Plan& plan,
                                                          const CancelCheck& cancelled);
    // The plan's bytes moved since the last report, and the execution's metrics.
    void report_execution(const ReadyPlan& ready, double run_seconds);
    // Execute for a model with batching: through the batcher, with the checked request.
    absl::StatusOr<v1::ExecuteResponse> execute_batched(const v1::ExecuteRequest& req,
                                                        RequestShape shape,
                                                        std::vector<std::string> outputs,
                                                        const CancelCheck& cancelled);
    // Execute for a model with token buckets (engine_buckets.cc): the request padded to its
    // bucket, its padding a sequence of its own, run through execute_batched, and its outputs
    // cut back to its own rows. Requests at a bucket's size or above the largest run as they are.
    absl::StatusOr<v1::ExecuteResponse> execute_bucketed(const v1::ExecuteRequest& req,
                                                         RequestShape shape,
                                                         std::vector<std::string> outputs,
                                                         const CancelCheck& cancelled);
    // The plan of `model`'s bucket: its single sequence at `bucket` tokens, the default options
    // (WarmUp::CompileBucket), made or found, and pinned in the plan cache (PlanCache::pin). For
    // the warm-up (not `request_path`) it refuses with ResourceExhausted once the plan cache's
    // every entry is a pinned plan. When
    // that plan laid the model's weights out ("defines"), whose record the plans reading them
    // resident cannot be rebuilt from, it makes the bucket's plan of two sequences too, the one
    // they are rebuilt from.
    absl::Status bucket_plan(const std::shared_ptr<const Model>& model, int64_t bucket,
                             const CancelCheck& cancelled, bool request_path);
    // A plan of another length of the same bucket that `key`'s plan can be rebuilt from
    // (runtime::Plan::restore): the same key but for its sequence ends; null when none is cached.
    std::shared_ptr<CachedPlan> bucket_sibling(const PlanKey& key) const;
    // `key`'s plan rebuilt from its bucket_sibling's record, without the optimiser or the
    // synthesis (engine_plans.cc); null when there is none or it does not fit.
    std::shared_ptr<CachedPlan> rebuild_from_bucket(const PlanKey& key,
                                                    const runtime::CompileOptions& options,
                                                    const Model& model);
    // Batcher::RunBatch for requests of shape `one`: the batch at its slots, or, when that does
    // not fit (ResourceExhausted), each request alone. The plan's instances.
    int run_batch(const RequestShape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch);
    // The batch as one execution of `slots` requests (the last request repeated in the idle
    // ones, BatchLayout), each item's result set; the error when it cannot run (no result set).
    absl::Status run_slots(const RequestShape& one,
                           std::vector<std::shared_ptr<Batcher::Item>>& batch, int slots,
                           int* concurrency);
    // Writes the model's current weights where the plan reads them when their generation
    // changed: the resident memory once for every plan, the lease's own copies for the rest.
    absl::Status refresh_weights(const Model& model, const runtime::Plan& plan,
                                 runtime::Plan::Lease& lease);

    void update_cache_metrics();
    // Device bytes per device: every cached plan's arenas and every model's resident memory.
    std::vector<int64_t> device_memory() const;

    const EngineOptions options_;
    const exprog::Topology topology_;
    std::shared_ptr<runtime::Backend> backend_;
    std::unique_ptr<PlanPersistence> persistence_;
    std::shared_ptr<Metrics> metrics_;
    const RequestShapes shapes_;
    BackendFailure failure_;
    ModelStore models_;
    // Before cache_, which submits to it; stopped in ~Engine, before the members go.
    std::unique_ptr<CompilePool> compile_pool_;
    PlanCache cache_;
    // Exchange programs synthesised by any compile, for every later one (options_.
    // exchange_cache_bytes): identical layers, models and shapes search once.
    std::shared_ptr<physical::SynthesisCache> exchange_cache_;
    // Looks at the cancellation of the requests that wait for a plan instance or a batch, so
    // that they sleep until their turn. Before batcher_, which uses it.
    std::shared_ptr<CancelWatcher> cancel_watcher_;
    Batcher batcher_;
    WeightResidency residency_;
    GenerationPools generation_pools_;
    mutable std::mutex stats_mutex_;
    int64_t compiles_ = 0;
    // Compiles bucket plans in the background (through plan_for, so on the compile pool); last,
    // and stopped first in ~Engine, since it uses everything above.
    std::unique_ptr<WarmUp> warm_up_;
};

} // namespace einsummable::server
