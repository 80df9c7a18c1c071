#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/server_interceptor.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"
#include "server/engine.h"
#include "server/idle_watchdog.h"
#include "server/metrics.h"
#include "server/model_repository.h"

namespace einsummable::server {

struct ServiceOptions {
    // When non-empty, every call must carry `authorization: Bearer <token>`.
    std::string token;
    // Work calls (CallKind::work) served at once; more get RESOURCE_EXHAUSTED. < 1: no limit.
    int max_concurrent_requests = 64;
    // UploadTensor streams open at once; more get RESOURCE_EXHAUSTED. < 1: no limit.
    int max_concurrent_uploads = 8;
    // An upload stream that sends nothing for this long is cancelled.
    std::chrono::milliseconds upload_idle_timeout{30000};
    // An upload stream must average this many bytes a second once `upload_rate_grace` has
    // passed (IdleWatchdog::ProgressRule), or it is cut with DEADLINE_EXCEEDED naming the
    // weight; 0: no rate rule.
    int64_t upload_min_bytes_per_second = 0;
    std::chrono::milliseconds upload_rate_grace{30000};
};

// What a call costs the daemon, which decides the limit it counts against (docs/server.md,
// "Limits and timeouts").
enum class CallKind {
    // Liveness, readiness, metadata, server info, the model list: answered under any load,
    // never refused for capacity.
    probe,
    // Register, compile, execute, explain, unregister, KServe inference:
    // --max_concurrent_requests.
    work,
    // UploadTensor streams: --max_concurrent_uploads, the idle timeout and the minimum rate.
    upload,
};

// What every call of every service the daemon serves goes through: bearer token, the limit of
// its kind (shared by the services), exceptions caught, one metrics sample and one debug log
// line. An exception escaping the body becomes INTERNAL: a bad request never takes the daemon
// down. Status messages reach the client cut to kMaxStatusMessageBytes (call_text.h).
class CallRunner {
public:
    CallRunner(std::shared_ptr<Metrics> metrics, ServiceOptions options);

    // Runs `body` (returning absl::Status) as method `method` about `model` ("" if none).
    template <typename Body>
    grpc::Status run(const char* method, CallKind kind, grpc::ServerContext* context,
                     const std::string& model, Body&& body);

    // Told whether the daemon can take work: false while every work slot is taken, while
    // starting (set_starting) and from shut_down() on, true otherwise (the daemon sets gRPC
    // health's serving status with it). Called at once with the current state, then on every
    // change, never concurrently.
    void set_serving_listener(std::function<void(bool serving)> listener);
    // Whether the daemon is still starting: its model repository loads in the background
    // (docs/server.md "Model repository"). Meanwhile health is NOT_SERVING and KServe
    // ServerReady false (Triton's strict readiness), while calls are served as ever and each
    // model is ready as soon as it has loaded.
    void set_starting(bool starting);
    bool is_starting() const { return starting_flag_.load(); }
    // From now on the daemon takes no more work (SIGTERM, or the backend failed beyond
    // recovery): the listener hears false for good, and KServe's readiness turns false.
    void shut_down();
    bool is_shut_down() const { return stopped_.load(); }

    // Cancels upload streams that go quiet or send too slowly (ServiceOptions).
    IdleWatchdog& upload_watchdog() { return upload_watchdog_; }
    const ServiceOptions& options() const { return options_; }

private:
    absl::Status authenticate(const grpc::ServerContext& context) const;
    // Takes a slot of `kind`'s limit; release() gives it back.
    absl::Status admit(CallKind kind);
    void release(CallKind kind);
    void publish_serving(); // caller holds serving_mutex_
    grpc::Status finish(const char* method, grpc::ServerContext& context, const std::string& model,
                        const absl::Status& status, std::chrono::steady_clock::time_point start);

    std::shared_ptr<Metrics> metrics_;
    const ServiceOptions options_;
    std::atomic<int> active_work_{0};
    std::atomic<int> active_uploads_{0};
    IdleWatchdog upload_watchdog_;

    std::mutex serving_mutex_; // guards the listener and what it last heard
    std::function<void(bool)> serving_listener_;
    bool shut_down_ = false;
    std::atomic<bool> stopped_{false}; // shut_down_, for is_shut_down() without the mutex
    bool starting_ = false;
    std::atomic<bool> starting_flag_{false}; // starting_, for is_starting() without the mutex
    std::optional<bool> serving_published_;
};

// The gRPC face of the Engine: service Einsummable in proto/einsummable/v1/service.proto.
class EinsummableService final : public v1::Einsummable::Service {
public:
    // `repository` (--model_repository; null without) must outlive the service.
    EinsummableService(std::shared_ptr<Engine> engine, std::shared_ptr<CallRunner> runner,
                       ModelRepository* repository = nullptr);

    grpc::Status RegisterModel(grpc::ServerContext* context, const v1::RegisterModelRequest* req,
                               v1::RegisterModelResponse* resp) override;
    grpc::Status UploadTensor(grpc::ServerContext* context,
                              grpc::ServerReader<v1::UploadTensorChunk>* reader,
                              v1::UploadTensorResponse* resp) override;
    grpc::Status Compile(grpc::ServerContext* context, const v1::CompileRequest* req,
                         v1::CompileResponse* resp) override;
    grpc::Status Execute(grpc::ServerContext* context, const v1::ExecuteRequest* req,
                         v1::ExecuteResponse* resp) override;
    grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* req,
                         v1::ExplainResponse* resp) override;
    grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* req,
                            v1::ListModelsResponse* resp) override;
    grpc::Status UnregisterModel(grpc::ServerContext* context,
                                 const v1::UnregisterModelRequest* req,
                                 v1::UnregisterModelResponse* resp) override;
    grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest* req,
                               v1::GetServerInfoResponse* resp) override;
    grpc::Status RepositoryIndex(grpc::ServerContext* context,
                                 const v1::RepositoryIndexRequest* req,
                                 v1::RepositoryIndexResponse* resp) override;
    grpc::Status RepositoryModelLoad(grpc::ServerContext* context,
                                     const v1::RepositoryModelLoadRequest* req,
                                     v1::RepositoryModelLoadResponse* resp) override;
    grpc::Status RepositoryModelUnload(grpc::ServerContext* context,
                                       const v1::RepositoryModelUnloadRequest* req,
                                       v1::RepositoryModelUnloadResponse* resp) override;

private:
    // A Generate call (the strict streaming handler the constructor installs serves the
    // method): its tokens written through `write` (false once the client is gone).
    grpc::Status serve_generate(grpc::ServerContext* context, const v1::GenerateRequest& req,
                                const std::function<bool(const v1::GenerateResponse&)>& write);

    std::shared_ptr<Engine> engine_;
    std::shared_ptr<CallRunner> runner_;
    ModelRepository* repository_;
};

// The KServe v2 inference protocol (proto/kserve/grpc_predict_v2.proto) over the same Engine,
// for KServe and Triton clients; the mapping is kserve.h's.
class KServeService final : public inference::GRPCInferenceService::Service {
public:
    // `repository` (--model_repository; null without) must outlive the service.
    KServeService(std::shared_ptr<Engine> engine, std::shared_ptr<CallRunner> runner,
                  ModelRepository* repository = nullptr);

    // ServerReady answers `ready`: true from construction until set_ready(false) (at shutdown)
    // or the runner's shut_down(); ModelReady is false for every model from then on too.
    // ServerReady is also false while the runner is starting (CallRunner::set_starting); a
    // model's ModelReady is not: it follows what has loaded.
    void set_ready(bool ready) { ready_ = ready; }

    grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* req,
                            inference::ServerLiveResponse* resp) override;
    grpc::Status ServerReady(grpc::ServerContext* context, const inference::ServerReadyRequest* req,
                             inference::ServerReadyResponse* resp) override;
    grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* req,
                            inference::ModelReadyResponse* resp) override;
    grpc::Status ServerMetadata(grpc::ServerContext* context,
                                const inference::ServerMetadataRequest* req,
                                inference::ServerMetadataResponse* resp) override;
    grpc::Status ModelMetadata(grpc::ServerContext* context,
                               const inference::ModelMetadataRequest* req,
                               inference::ModelMetadataResponse* resp) override;
    grpc::Status ModelInfer(grpc::ServerContext* context, const inference::ModelInferRequest* req,
                            inference::ModelInferResponse* resp) override;
    // Triton's extension (perf_analyzer reads it): a probe, like ModelMetadata.
    grpc::Status ModelConfig(grpc::ServerContext* context, const inference::ModelConfigRequest* req,
                             inference::ModelConfigResponse* resp) override;
    // Triton's repository extension (kserve.h): the index a probe, load and unload work.
    grpc::Status RepositoryIndex(grpc::ServerContext* context,
                                 const inference::RepositoryIndexRequest* req,
                                 inference::RepositoryIndexResponse* resp) override;
    grpc::Status RepositoryModelLoad(grpc::ServerContext* context,
                                     const inference::RepositoryModelLoadRequest* req,
                                     inference::RepositoryModelLoadResponse* resp) override;
    grpc::Status RepositoryModelUnload(grpc::ServerContext* context,
                                       const inference::RepositoryModelUnloadRequest* req,
                                       inference::RepositoryModelUnloadResponse* resp) override;

private:
    std::shared_ptr<Engine> engine_;
    std::shared_ptr<CallRunner> runner_;
    ModelRepository* repository_;
    std::atomic<bool> ready_{true};
};

// absl and gRPC share the canonical status codes.
grpc::Status to_grpc_status(const absl::Status& status);

// OK when `token` is empty, or `metadata` carries exactly one `authorization: Bearer <token>`
// (compared in constant time); otherwise Unauthenticated saying what is wrong.
absl::Status check_bearer_token(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token);

// Puts every call of every service on the server behind the bearer token (`token`, non-empty),
// but gRPC health's: orchestrators' probes carry no token. The Einsummable and KServe services
// check it again in CallRunner, which counts and logs the call; this is what covers the
// services gRPC registers itself, server reflection above all (its descriptors describe the
// whole API), and any service added later. A call without the token is cancelled with
// UNAUTHENTICATED before its handler reads a message.
class BearerTokenInterceptorFactory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
public:
    explicit BearerTokenInterceptorFactory(std::string token) : token_(std::move(token)) {}
    grpc::experimental::Interceptor*
    CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override;

private:
    const std::string token_;
};

// DeadlineExceeded or Cancelled once the call should stop, else OK.
absl::Status call_state(const grpc::ServerContext& context);

// The engine's CancelCheck for a call: call_state, but asking gRPC whether the client cancelled
// (ServerContext::IsCancelled) only from `cancelled_every` after the check is made, and then at
// most every `cancelled_every`; the deadline, a comparison, is looked at every time.
// IsCancelled polls the call's completion queue (a lock and a futex call, ~30 µs on the 2-core
// development VM): asked by the CancelWatcher for every waiting request every 20 ms, 32 waiting
// requests cost the daemon 0.05 cores (bench/serving, "waiting"), and every Execute paid for it
// once before running.
CancelCheck call_cancel_check(const grpc::ServerContext& context,
                              std::chrono::milliseconds cancelled_every);

template <typename Body>
grpc::Status CallRunner::run(const char* method, CallKind kind, grpc::ServerContext* context,
                             const std::string& model, Body&& body) {
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    absl::Status status = authenticate(*context);
    const bool admitted = status.ok() && (status = admit(kind)).ok();
    if (admitted) {
        try {
            status = body();
        } catch (const std::exception& error) {
            status = absl::InternalError(absl::StrCat("internal error: ", error.what()));
        } catch (...) {
            status = absl::InternalError("internal error");
        }
        release(kind);
    }
    return finish(method, *context, model, status, start);
}

} // namespace einsummable::server
