#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/engine.h"
#include "server/metrics.h"

namespace einsummable::server {

struct ServiceOptions {
    // When non-empty, every call must carry `authorization: Bearer <token>`.
    std::string token;
    // Calls served at once; more get RESOURCE_EXHAUSTED. < 1: no limit.
    int max_concurrent_requests = 64;
};

// The gRPC face of the Engine (service Einsummable in proto/einsummable/v1/service.proto). Each
// call: bearer token, concurrency limit, deadline and cancellation checks, the engine's
// operation, one metrics sample and one debug log line. An exception escaping the engine becomes
// INTERNAL: a bad request never takes the daemon down.
class EinsummableService final : public v1::Einsummable::Service {
public:
    EinsummableService(std::shared_ptr<Engine> engine, std::shared_ptr<Metrics> metrics,
                       ServiceOptions options);

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
    template <typename Body>
    grpc::Status serve(const char* method, grpc::ServerContext* context, const std::string& model,
                       Body&& body);
    absl::Status authenticate(const grpc::ServerContext& context) const;

    std::shared_ptr<Engine> engine_;
    std::shared_ptr<Metrics> metrics_;
    const ServiceOptions options_;
    std::atomic<int> active_{0};
};

// absl and gRPC share the canonical status codes.
grpc::Status to_grpc_status(const absl::Status& status);

// DeadlineExceeded or Cancelled once the call should stop, else OK.
absl::Status call_state(const grpc::ServerContext& context);

} // namespace einsummable::server
