#include "server/grpc_service.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;

// Compares without an early exit, so the time taken does not tell how much of the token matched.
bool same_secret(absl::string_view a, absl::string_view b) {
    unsigned char diff = a.size() == b.size() ? 0 : 1;
    for (size_t i = 0; i < a.size(); ++i) {
        diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
    }
    return diff == 0 && !b.empty();
}

} // namespace

grpc::Status to_grpc_status(const absl::Status& status) {
    if (status.ok()) {
        return grpc::Status::OK;
    }
    return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                        std::string(status.message()));
}

absl::Status call_state(const grpc::ServerContext& context) {
    if (context.deadline() <= std::chrono::system_clock::now()) {
        return absl::DeadlineExceededError("the call's deadline passed");
    }
    if (context.IsCancelled()) {
        return absl::CancelledError("the call was cancelled");
    }
    return absl::OkStatus();
}

EinsummableService::EinsummableService(std::shared_ptr<Engine> engine,
                                       std::shared_ptr<Metrics> metrics, ServiceOptions options)
    : engine_(std::move(engine)), metrics_(std::move(metrics)), options_(std::move(options)) {}

absl::Status EinsummableService::authenticate(const grpc::ServerContext& context) const {
    if (options_.token.empty()) {
        return absl::OkStatus();
    }
    const auto& metadata = context.client_metadata();
    auto it = metadata.find("authorization");
    if (it == metadata.end()) {
        return absl::UnauthenticatedError("missing `authorization: Bearer <token>` metadata");
    }
    const absl::string_view value(it->second.data(), it->second.size());
    constexpr absl::string_view kBearer = "Bearer ";
    if (value.substr(0, kBearer.size()) != kBearer ||
        !same_secret(value.substr(kBearer.size()), options_.token)) {
        return absl::UnauthenticatedError("the bearer token is not valid");
    }
    return absl::OkStatus();
}

template <typename Body>
grpc::Status EinsummableService::serve(const char* method, grpc::ServerContext* context,
                                       const std::string& model, Body&& body) {
    const Clock::time_point start = Clock::now();
    if (metrics_) {
        metrics_->inflight_add(1);
    }
    const int active = ++active_;
    absl::Status status;
    if (options_.max_concurrent_requests > 0 && active > options_.max_concurrent_requests) {
        status = absl::ResourceExhaustedError(
            absl::StrCat("the server is serving its maximum of ", options_.max_concurrent_requests,
                         " concurrent requests (--max_concurrent_requests); retry later"));
    } else if (status = authenticate(*context); status.ok()) {
        try {
            status = body();
        } catch (const std::exception& error) {
            spdlog::error("{}: exception: {}", method, error.what());
            status = absl::InternalError(absl::StrCat("internal error: ", error.what()));
        } catch (...) {
            spdlog::error("{}: unknown exception", method);
            status = absl::InternalError("internal error");
        }
    }
    --active_;
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (metrics_) {
        metrics_->inflight_add(-1);
        metrics_->request(method, status.code(), seconds);
    }
    if (status.ok()) {
        spdlog::debug("{} model={} peer={} OK {:.3f} ms", method, model, context->peer(),
                      seconds * 1e3);
    } else {
        spdlog::debug("{} model={} peer={} {} {:.3f} ms: {}", method, model, context->peer(),
                      absl::StatusCodeToString(status.code()), seconds * 1e3,
                      std::string(status.message()));
    }
    return to_grpc_status(status);
}

grpc::Status EinsummableService::RegisterModel(grpc::ServerContext* context,
                                               const v1::RegisterModelRequest* req,
                                               v1::RegisterModelResponse* resp) {
    return serve("RegisterModel", context, req->model(), [&]() -> absl::Status {
        absl::StatusOr<v1::RegisterModelResponse> result = engine_->register_model(*req);
        if (!result.ok()) {
            return result.status();
        }
        *resp = *std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::UploadTensor(grpc::ServerContext* context,
                                              grpc::ServerReader<v1::UploadTensorChunk>* reader,
                                              v1::UploadTensorResponse* resp) {
    std::string model;
    return serve("UploadTensor", context, model, [&]() -> absl::Status {
        v1::UploadTensorChunk chunk;
        if (!reader->Read(&chunk)) {
            return absl::InvalidArgumentError("the upload stream carried no chunk");
        }
        model = chunk.model();
        absl::StatusOr<std::unique_ptr<WeightUpload>> upload = engine_->begin_upload(chunk);
        if (!upload.ok()) {
            return upload.status();
        }
        const std::string name = chunk.name();
        int64_t chunk_idx = 0;
        do {
            if (chunk_idx > 0 && ((!chunk.model().empty() && chunk.model() != model) ||
                                  (!chunk.name().empty() && chunk.name() != name))) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "chunk ", chunk_idx, " of the upload of '", name, "' names '", chunk.model(),
                    "'/'", chunk.name(), "'; only the first chunk carries the header"));
            }
            const std::string& data = chunk.data();
            absl::Status status =
                (*upload)->append({reinterpret_cast<const std::byte*>(data.data()), data.size()});
            if (!status.ok()) {
                return status;
            }
            ++chunk_idx;
        } while (reader->Read(&chunk));
        // A stream that ended because the client went away is not a finished upload.
        if (absl::Status state = call_state(*context); !state.ok()) {
            return state;
        }
        if (absl::Status status = (*upload)->commit(); !status.ok()) {
            return status;
        }
        spdlog::info("weight '{}' of model '{}' uploaded: {} bytes in {} chunks", name, model,
                     (*upload)->received_bytes(), chunk_idx);
        resp->set_model(model);
        resp->set_name(name);
        resp->set_bytes((*upload)->received_bytes());
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::Compile(grpc::ServerContext* context,
                                         const v1::CompileRequest* req, v1::CompileResponse* resp) {
    return serve("Compile", context, req->model(), [&]() -> absl::Status {
        absl::StatusOr<v1::CompileResponse> result =
            engine_->compile(*req, [context] { return call_state(*context); });
        if (!result.ok()) {
            return result.status();
        }
        *resp = *std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::Execute(grpc::ServerContext* context,
                                         const v1::ExecuteRequest* req, v1::ExecuteResponse* resp) {
    return serve("Execute", context, req->model(), [&]() -> absl::Status {
        absl::StatusOr<v1::ExecuteResponse> result =
            engine_->execute(*req, [context] { return call_state(*context); });
        if (!result.ok()) {
            return result.status();
        }
        *resp = *std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::Explain(grpc::ServerContext* context,
                                         const v1::ExplainRequest* req, v1::ExplainResponse* resp) {
    return serve("Explain", context, req->model(), [&]() -> absl::Status {
        absl::StatusOr<v1::ExplainResponse> result =
            engine_->explain(*req, [context] { return call_state(*context); });
        if (!result.ok()) {
            return result.status();
        }
        *resp = *std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::ListModels(grpc::ServerContext* context,
                                            const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* resp) {
    return serve("ListModels", context, "", [&]() -> absl::Status {
        *resp = engine_->list_models();
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::UnregisterModel(grpc::ServerContext* context,
                                                 const v1::UnregisterModelRequest* req,
                                                 v1::UnregisterModelResponse*) {
    return serve("UnregisterModel", context, req->model(),
                 [&]() -> absl::Status { return engine_->unregister_model(*req); });
}

grpc::Status EinsummableService::GetServerInfo(grpc::ServerContext* context,
                                               const v1::GetServerInfoRequest*,
                                               v1::GetServerInfoResponse* resp) {
    return serve("GetServerInfo", context, "", [&]() -> absl::Status {
        *resp = engine_->server_info();
        return absl::OkStatus();
    });
}

} // namespace einsummable::server
