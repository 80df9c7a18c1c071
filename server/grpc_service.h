#pragma once

#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"
#include "server/engine.h"
#include "server/metrics.h"

namespace einsummable::server {

struct ServiceOptions {
    // When non-empty, every call must carry `authorization: Bearer <token>`.
    std::string token;
    // Calls served at once; more get RESOURCE_EXHAUSTED. < 1: no limit.
    int max_concurrent_requests = 64;
};

// What every call of every service the daemon serves goes through: bearer token, concurrency
// limit (shared by the services), exceptions caught, one metrics sample and one debug log line.
// An exception escaping the body becomes INTERNAL: a bad request never takes the daemon down.
class CallRunner {
public:
    CallRunner(std::shared_ptr<Metrics> metrics, ServiceOptions options);

    // Runs `body` (returning absl::Status) as method `method` about `model` ("" if none).
    template <typename Body>
    grpc::Status run(const char* method, grpc::ServerContext* context, const std::string& model,
                     Body&& body);

private:
    absl::Status authenticate(const grpc::ServerContext& context) const;
    // Before and after the body.
    absl::Status admit(grpc::ServerContext& context);
    grpc::Status finish(const char* method, grpc::ServerContext& context, const std::string& model,
                        const absl::Status& status, std::chrono::steady_clock::time_point start);

    std::shared_ptr<Metrics> metrics_;
    const ServiceOptions options_;
    std::atomic<int> active_{0};
};

// The gRPC face of the Engine: service Einsummable in proto/einsummable/v1/service.proto.
class EinsummableService final : public v1::Einsummable::Service {
public:
    EinsummableService(std::shared_ptr<Engine> engine, std::shared_ptr<CallRunner> runner);

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

private:
    std::shared_ptr<Engine> engine_;
    std::shared_ptr<CallRunner> runner_;
};

// The KServe v2 inference protocol (proto/kserve/grpc_predict_v2.proto) over the same Engine,
// for KServe and Triton clients; the mapping is kserve.h's.
class KServeService final : public inference::GRPCInferenceService::Service {
public:
    KServeService(std::shared_ptr<Engine> engine, std::shared_ptr<CallRunner> runner);

    // ServerReady answers `ready`: true from construction until set_ready(false) (at shutdown).
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

private:
    std::shared_ptr<Engine> engine_;
    std::shared_ptr<CallRunner> runner_;
    std::atomic<bool> ready_{true};
};

// absl and gRPC share the canonical status codes.
grpc::Status to_grpc_status(const absl::Status& status);

// DeadlineExceeded or Cancelled once the call should stop, else OK.
absl::Status call_state(const grpc::ServerContext& context);

template <typename Body>
grpc::Status CallRunner::run(const char* method, grpc::ServerContext* context,
                             const std::string& model, Body&& body) {
    const std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    absl::Status status = admit(*context);
    if (status.ok()) {
        try {
            status = body();
        } catch (const std::exception& error) {
            status = absl::InternalError(absl::StrCat("internal error: ", error.what()));
        } catch (...) {
            status = absl::InternalError("internal error");
        }
    }
    return finish(method, *context, model, status, start);
}

} // namespace einsummable::server
