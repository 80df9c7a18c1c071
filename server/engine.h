#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "einsummable/v1/service.pb.h"
#include "runtime/backend.h"
#include "server/batcher.h"
#include "server/cancel_watcher.h"
#include "server/compile_pool.h"
#include "server/engine_settings.h"
#include "server/metrics.h"
#include "server/model_store.h"
#include "server/plan_cache.h"
#include "server/plan_persistence.h"

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
// Resident weights (docs/server.md, "How weights are placed"): a model's weights live on the
// devices once. The model's first plan — compiled while the model's other first requests
// wait — lays them out as it reads them (PlanKey::weights "defines"); every later plan on as
// many devices reads that layout in place ("resident:<fingerprint>"), the planner paying for
// any other tiling it wants; a plan on another device count keeps its own copies ("own"). An
// uploaded weight is written once into the resident memory, before the next run of any plan.
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
    v1::GetServerInfoResponse server_info() const;
    // The backend, its devices and the topology, with why (explain's first lines).
    std::string machine_text() const;

    const EngineOptions& options() const { return options_; }
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

private:
    struct ReadyPlan {
        std::shared_ptr<const Model> model;
        std::shared_ptr<CachedPlan> plan;
        bool cache_hit = false;
    };

    // One model's resident weights: none, being laid out by its first plan, or ready.
    struct Residency {
        std::mutex mutex;
        std::condition_variable changed;
        bool defining = false; // guarded by mutex; a first plan is being made
        std::shared_ptr<runtime::ResidentWeights> weights; // guarded by mutex
        // Guarded by mutex, once ready: PlanKey::to_string of the plan that laid them out.
        std::string defining_key;
        bool store_checked = false; // guarded by mutex; the plan store was asked for a layout
        std::mutex write_mutex;     // held while weights are written into the resident memory
    };

    // What a request runs: its model, options, bindings and sequence ends checked, and the
    // graph built and bounded; no plan yet.
    struct Shape {
        std::shared_ptr<const Model> model;
        runtime::CompileOptions options;
        graphdef::Bindings bindings;
        // A model with batching: the sequences' ends along its batch dimension (PlanKey); empty
        // for other models.
        std::vector<int64_t> sequence_ends;
        ir::Graph graph;
    };
    // The request's sequence_ends, checked against the model and its bindings: one sequence
    // when none are given for a model with batching; none for other models (which may not give
    // any).
    absl::StatusOr<std::vector<int64_t>>
    request_sequence_ends(const Model& model, const graphdef::Bindings& bindings,
                          const google::protobuf::RepeatedField<int64_t>& wire) const;
    // Model lookup, then shape_for.
    absl::StatusOr<Shape> request_shape(const std::string& model_name,
                                        const google::protobuf::Map<std::string, int64_t>& dims,
                                        const v1::CompileOptions& options,
                                        const google::protobuf::RepeatedField<int64_t>& ends);
    // Options checked, graph built with `sequence_ends` and bounded (bindings are checked).
    absl::StatusOr<Shape> shape_for(std::shared_ptr<const Model> model, graphdef::Bindings bindings,
                                    const v1::CompileOptions& options,
                                    std::vector<int64_t> sequence_ends);
    // The shape's plan, found or made (the model's weights placed on the way).
    absl::StatusOr<ReadyPlan> plan_for(Shape shape, const CancelCheck& cancelled);
    // Execute's checks against the graph of its shape: weights uploaded, inputs, outputs and
    // the reply's size. The outputs to return, in order.
    absl::StatusOr<std::vector<std::string>>
    check_execute(const v1::ExecuteRequest& req, const Model& model, const ir::Graph& graph) const;
    // One execution on one of the plan's instances: weights refreshed, `load`, run, `offload`;
    // then the metrics. The run's seconds.
    using LeaseStep = std::function<absl::Status(runtime::Plan::Lease&)>;
    absl::StatusOr<double> run_on_instance(const ReadyPlan& ready, const LeaseStep& load,
                                           const LeaseStep& offload, const CancelCheck& cancelled);
    // One of the plan's instances, waiting for it in arrival order (runtime::Plan::acquire);
    // the wait ends early, with the check's status, once `cancelled` (null: never) fails.
    absl::StatusOr<runtime::Plan::Lease> acquire_instance(runtime::Plan& plan,
                                                          const CancelCheck& cancelled);
    // Execute for a model with batching: through the batcher, with the checked request.
    absl::StatusOr<v1::ExecuteResponse> execute_batched(const v1::ExecuteRequest& req, Shape shape,
                                                        std::vector<std::string> outputs,
                                                        const CancelCheck& cancelled);
    // Batcher::RunBatch for requests of shape `one`: the batch at its slots, or, when that does
    // not fit (ResourceExhausted), each request alone. The plan's instances.
    int run_batch(const Shape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch);
    // The batch as one execution of `slots` requests (the last request repeated in the idle
    // ones), each item's result set; the error when it cannot run (no result set).
    absl::Status run_slots(const Shape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch,
                           int slots, int* concurrency);
    // On a CompilePool thread; `options.cancellation` is the creation's (PlanCache).
    absl::StatusOr<std::shared_ptr<CachedPlan>> create_plan(const PlanKey& key, ir::Graph graph,
                                                            const runtime::CompileOptions& options,
                                                            const Model& model);
    // The model's residency (created on first use; a replaced model gets a new one).
    std::shared_ptr<Residency> residency(const Model& model);
    // How a plan reads its model's weights (the compile options follow from it).
    struct WeightsChoice {
        bool defining = false; // it lays them out: the caller must end_defining()
        // The resident weights it reads: pinned to their layout, or (again) as the plan that
        // laid them out, made or restored again.
        std::shared_ptr<runtime::ResidentWeights> resident;
        bool again = false;
    };
    // Sets key.weights, waiting (polling `cancelled`) while another request lays the model's
    // weights out. The first time, looks for a layout the plan store kept (a restart).
    absl::StatusOr<WeightsChoice> choose_weights(const Model& model, Residency& residency,
                                                 PlanKey& key, const CancelCheck& cancelled);
    // The plan store's name for a model's weights layout: its name, graph and the version.
    std::string layout_identity(const std::string& model,
                                const std::string& graph_fingerprint) const;
    void end_defining(Residency& residency, const PlanKey& key,
                      const std::shared_ptr<CachedPlan>& plan);
    // Writes the model's current weights where the plan reads them when their generation
    // changed: the resident memory once for every plan, the lease's own copies for the rest.
    absl::Status refresh_weights(const Model& model, const runtime::Plan& plan,
                                 runtime::Plan::Lease& lease);
    // `failure` of a call into the backend, or, once the backend reports an unrecoverable error
    // (noted, the listener told), UNAVAILABLE with `failure`'s message saying so.
    absl::Status unless_unrecoverable(const absl::Status& failure);
    // UNAVAILABLE once the backend has failed beyond recovery (naming its error); OK before.
    absl::Status refuse_if_unrecoverable();
    void note_unrecoverable(const absl::Status& error);
    void update_cache_metrics();
    // Device bytes per device: every cached plan's arenas and every model's resident memory.
    std::vector<int64_t> device_memory() const;

    const EngineOptions options_;
    const exprog::Topology topology_;
    std::shared_ptr<runtime::Backend> backend_;
    std::unique_ptr<PlanPersistence> persistence_;
    std::shared_ptr<Metrics> metrics_;
    ModelStore models_;
    // Before cache_, which submits to it; stopped in ~Engine, before the members go.
    std::unique_ptr<CompilePool> compile_pool_;
    PlanCache cache_;
    // Looks at the cancellation of the requests that wait for a plan instance or a batch, so
    // that they sleep until their turn. Before batcher_, which uses it.
    std::shared_ptr<CancelWatcher> cancel_watcher_;
    Batcher batcher_;
    mutable std::mutex residency_mutex_;
    std::map<std::string, std::pair<uint64_t, std::shared_ptr<Residency>>> residency_; // by name
    mutable std::mutex stats_mutex_;
    int64_t compiles_ = 0;
    mutable std::mutex unrecoverable_mutex_;
    absl::Status unrecoverable_; // guarded by unrecoverable_mutex_
    std::function<void(const absl::Status&)> unrecoverable_listener_; // the same
};

} // namespace einsummable::server
