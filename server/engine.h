#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/exprog/topology.h"
#include "einsummable/v1/service.pb.h"
#include "runtime/backend.h"
#include "server/compile_pool.h"
#include "server/metrics.h"
#include "server/model_store.h"
#include "server/plan_cache.h"
#include "server/plan_persistence.h"

namespace einsummable::server {

struct EngineOptions {
    std::string version; // EINSUMMABLE_VERSION; part of every PlanKey
    // The machine the exchange programs are synthesised for; runtime::default_topology(backend
    // devices) when unset.
    std::optional<exprog::Topology> topology;
    // What GetServerInfo and explain say about the machine (runtime/backend_choice.h): why this
    // backend, its GPUs (CUDA), and where the topology came from.
    std::string backend_reason;
    std::string gpus;
    std::string topology_reason;
    int64_t plan_cache_entries = 64;
    int64_t max_tensor_bytes = int64_t{1} << 32;
    int64_t max_message_bytes = int64_t{1} << 30; // an Execute's outputs must fit in one reply
    int max_graph_operators = 10000;
    int64_t max_sequence_ends = 65536;    // ModelStoreLimits::max_sequence_ends
    int64_t max_operator_devices = 65536; // operators × devices of one compile (ready_plan)
    // Bytes all UploadTensor streams in progress may hold together (ModelStoreLimits).
    int64_t max_upload_bytes_in_flight = int64_t{4} << 30;
    int synthesis_iterations = 600; // runtime::CompileOptions::synthesis_iterations
    // Plans compiled at once (CompilePool); 0 = the machine's cores.
    int compile_threads = 0;
    // Testing only (--execute_delay_ms_for_testing): sleep this long inside every execute,
    // after the plan is ready, so a test can act while the request is in flight.
    int execute_delay_ms = 0;
};

// Returns a non-OK status (DeadlineExceeded, Cancelled) when the request should stop: gRPC's
// ServerContext in the daemon, nothing in tests.
using CancelCheck = std::function<absl::Status()>;

// The service's operations over its protobuf messages, without gRPC (the gRPC service in
// grpc_service.h and the KServe v2 adapter in kserve.h call these): models and weights
// (ModelStore), plans (PlanCache, compiled on a miss, persisted through PlanPersistence),
// executions, metrics. Thread-safe. Errors are absl::Status with the codes service.proto lists
// and messages naming the model, tensor, operator or dimension at fault.
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

private:
    struct ReadyPlan {
        std::shared_ptr<const Model> model;
        std::shared_ptr<CachedPlan> plan;
        bool cache_hit = false;
    };

    // Model lookup, options and dims checked, graph built and bounded, plan found or made.
    absl::StatusOr<ReadyPlan>
    ready_plan(const std::string& model_name,
               const google::protobuf::Map<std::string, int64_t>& dims,
               const v1::CompileOptions& options, const CancelCheck& cancelled,
               const std::function<absl::Status(const Model&, const ir::Graph&)>& before_compile);
    // On a CompilePool thread; `options.cancellation` is the creation's (PlanCache).
    absl::StatusOr<std::shared_ptr<CachedPlan>> create_plan(const PlanKey& key, ir::Graph graph,
                                                            const runtime::CompileOptions& options,
                                                            const Model& model);
    // Loads the model's current weights into the plan when its generation changed. Caller
    // holds plan.run_mutex.
    absl::Status refresh_weights(const Model& model, CachedPlan& plan);
    void update_cache_metrics();

    const EngineOptions options_;
    const exprog::Topology topology_;
    std::shared_ptr<runtime::Backend> backend_;
    std::unique_ptr<PlanPersistence> persistence_;
    std::shared_ptr<Metrics> metrics_;
    ModelStore models_;
    // Before cache_, which submits to it; stopped in ~Engine, before the members go.
    std::unique_ptr<CompilePool> compile_pool_;
    PlanCache cache_;
    mutable std::mutex stats_mutex_;
    int64_t compiles_ = 0;
};

} // namespace einsummable::server
