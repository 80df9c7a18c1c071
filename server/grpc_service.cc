#include "server/grpc_service.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/support/status_macros.h"
#include "grpc/grpc.h"
#include "proto/graph_def.h"
#include "server/call_text.h"
#include "server/generation.h"
#include "server/kserve.h"
#include "server/strict_unary.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often a waiting call asks gRPC whether its client cancelled it (call_cancel_check): a
// call whose client went away is let go within this; one whose deadline passed, within the
// CancelWatcher's period.
constexpr std::chrono::milliseconds kCancelledEvery{200};

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
                        truncate_message(status.message()));
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

CancelCheck call_cancel_check(const grpc::ServerContext& context,
                              std::chrono::milliseconds cancelled_every) {
    auto now_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
            .count();
    };
    // When IsCancelled was last asked, or the check made: a request that does not wait never
    // pays for it (the engine looks at its check before running it). Atomic: the call's thread
    // and the CancelWatcher's may ask.
    auto asked = std::make_shared<std::atomic<int64_t>>(now_ns());
    return [&context, every = std::chrono::nanoseconds(cancelled_every).count(), asked,
            now_ns]() -> absl::Status {
        if (context.deadline() <= std::chrono::system_clock::now()) {
            return absl::DeadlineExceededError("the call's deadline passed");
        }
        const int64_t now = now_ns();
        if (now - asked->load(std::memory_order_relaxed) < every) {
            return absl::OkStatus();
        }
        asked->store(now, std::memory_order_relaxed);
        if (context.IsCancelled()) {
            return absl::CancelledError("the call was cancelled");
        }
        return absl::OkStatus();
    };
}

CallRunner::CallRunner(std::shared_ptr<Metrics> metrics, ServiceOptions options)
    : metrics_(std::move(metrics)), options_(std::move(options)),
      upload_watchdog_(options_.upload_idle_timeout,
                       {options_.upload_min_bytes_per_second, options_.upload_rate_grace}) {}

absl::Status check_bearer_token(const std::multimap<grpc::string_ref, grpc::string_ref>& metadata,
                                const std::string& token) {
    if (token.empty()) {
        return absl::OkStatus();
    }
    const size_t headers = metadata.count("authorization");
    if (headers == 0) {
        return absl::UnauthenticatedError("missing `authorization: Bearer <token>` metadata");
    }
    // A proxy may check one header and the server another: accept exactly one.
    if (headers > 1) {
        return absl::UnauthenticatedError(absl::StrCat(
            "the call carries ", headers, " `authorization` headers; send exactly one"));
    }
    auto it = metadata.find("authorization");
    const absl::string_view value(it->second.data(), it->second.size());
    constexpr absl::string_view kBearer = "Bearer ";
    if (value.substr(0, kBearer.size()) != kBearer ||
        !same_secret(value.substr(kBearer.size()), token)) {
        return absl::UnauthenticatedError("the bearer token is not valid");
    }
    return absl::OkStatus();
}

namespace {

class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
public:
    BearerTokenInterceptor(grpc::experimental::ServerRpcInfo* info, const std::string& token)
        : info_(info), token_(token) {}

    void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
        if (methods->QueryInterceptionHookPoint(
                grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
            const absl::Status status =
                check_bearer_token(*methods->GetRecvInitialMetadata(), token_);
            if (!status.ok()) {
                // The status goes to the client as given (TryCancel would say CANCELLED). The
                // handler still runs, on a call already over: its reads fail at once and what
                // it returns is not sent.
                spdlog::debug("{} peer={}: {}", info_->method(),
                              printable(info_->server_context()->peer()),
                              std::string(status.message()));
                grpc_call_cancel_with_status(info_->server_context()->c_call(),
                                             GRPC_STATUS_UNAUTHENTICATED,
                                             std::string(status.message()).c_str(), nullptr);
            }
        }
        methods->Proceed();
    }

private:
    grpc::experimental::ServerRpcInfo* info_;
    const std::string& token_; // the factory's, which the server keeps until it goes
};

} // namespace

grpc::experimental::Interceptor*
BearerTokenInterceptorFactory::CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) {
    const absl::string_view method = info->method() != nullptr ? info->method() : "";
    if (token_.empty() || absl::StartsWith(method, "/grpc.health.v1.Health/")) {
        return nullptr;
    }
    return new BearerTokenInterceptor(info, token_);
}

absl::Status CallRunner::authenticate(const grpc::ServerContext& context) const {
    return check_bearer_token(context.client_metadata(), options_.token);
}

absl::Status CallRunner::admit(CallKind kind) {
    switch (kind) {
    case CallKind::probe:
        break;
    case CallKind::work: {
        const int limit = options_.max_concurrent_requests;
        if (limit > 0 && ++active_work_ > limit) {
            --active_work_;
            return absl::ResourceExhaustedError(
                absl::StrCat("the server is serving its maximum of ", limit,
                             " concurrent requests (--max_concurrent_requests); retry later"));
        }
        if (limit > 0 && active_work_.load() >= limit) {
            std::lock_guard<std::mutex> lock(serving_mutex_);
            publish_serving();
        }
        break;
    }
    case CallKind::upload: {
        const int limit = options_.max_concurrent_uploads;
        if (limit > 0 && ++active_uploads_ > limit) {
            --active_uploads_;
            return absl::ResourceExhaustedError(
                absl::StrCat("the server is receiving its maximum of ", limit,
                             " concurrent uploads (--max_concurrent_uploads); retry later"));
        }
        break;
    }
    }
    if (metrics_) {
        metrics_->inflight_add(1);
    }
    return absl::OkStatus();
}

void CallRunner::release(CallKind kind) {
    if (metrics_) {
        metrics_->inflight_add(-1);
    }
    if (kind == CallKind::work && options_.max_concurrent_requests > 0) {
        const int before = active_work_--;
        if (before >= options_.max_concurrent_requests) {
            std::lock_guard<std::mutex> lock(serving_mutex_);
            publish_serving();
        }
    } else if (kind == CallKind::upload && options_.max_concurrent_uploads > 0) {
        --active_uploads_;
    }
}

void CallRunner::set_serving_listener(std::function<void(bool serving)> listener) {
    std::lock_guard<std::mutex> lock(serving_mutex_);
    serving_listener_ = std::move(listener);
    serving_published_.reset();
    publish_serving();
}

void CallRunner::shut_down() {
    std::lock_guard<std::mutex> lock(serving_mutex_);
    shut_down_ = true;
    stopped_ = true;
    publish_serving();
}

void CallRunner::set_starting(bool starting) {
    std::lock_guard<std::mutex> lock(serving_mutex_);
    starting_ = starting;
    starting_flag_ = starting;
    publish_serving();
}

void CallRunner::publish_serving() {
    const int limit = options_.max_concurrent_requests;
    const bool serving = !shut_down_ && !starting_ && (limit < 1 || active_work_.load() < limit);
    if (serving_listener_ && serving_published_ != serving) {
        serving_published_ = serving;
        serving_listener_(serving);
    }
}

grpc::Status CallRunner::finish(const char* method, grpc::ServerContext& context,
                                const std::string& model, const absl::Status& status,
                                Clock::time_point start) {
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (metrics_) {
        metrics_->request(method, status.code(), seconds);
    }
    // Everything from the client is made printable: a name with a newline must not forge a line.
    const std::string safe_model = printable(model);
    const std::string safe_peer = printable(context.peer());
    if (status.ok()) {
        spdlog::debug("{} model={} peer={} OK {:.3f} ms", method, safe_model, safe_peer,
                      seconds * 1e3);
    } else if (status.code() == absl::StatusCode::kInternal) {
        spdlog::error("{} model={} peer={}: {}", method, safe_model, safe_peer,
                      printable(truncate_message(status.message())));
    } else {
        spdlog::debug("{} model={} peer={} {} {:.3f} ms: {}", method, safe_model, safe_peer,
                      absl::StatusCodeToString(status.code()), seconds * 1e3,
                      printable(truncate_message(status.message())));
    }
    return to_grpc_status(status);
}

EinsummableService::EinsummableService(std::shared_ptr<Engine> engine,
                                       std::shared_ptr<CallRunner> runner,
                                       ModelRepository* repository)
    : engine_(std::move(engine)), runner_(std::move(runner)), repository_(repository) {
    // Requests that do not parse (a string field that is not UTF-8) are INVALID_ARGUMENT
    // naming the field, not gRPC's INTERNAL with no message (strict_unary.h). UploadTensor, a
    // client stream, reads its chunks itself.
    auto strict = [this](const char* name, auto method) {
        auto handler = strict_unary(this, method);
        const int index = method_index(*handler, v1::Einsummable::service_full_name(), name);
        MarkMethodStreamed(index, handler.release());
    };
    strict("RegisterModel", &EinsummableService::RegisterModel);
    strict("Compile", &EinsummableService::Compile);
    strict("Execute", &EinsummableService::Execute);
    strict("Explain", &EinsummableService::Explain);
    strict("ListModels", &EinsummableService::ListModels);
    strict("UnregisterModel", &EinsummableService::UnregisterModel);
    strict("GetServerInfo", &EinsummableService::GetServerInfo);
    strict("RepositoryIndex", &EinsummableService::RepositoryIndex);
    strict("RepositoryModelLoad", &EinsummableService::RepositoryModelLoad);
    strict("RepositoryModelUnload", &EinsummableService::RepositoryModelUnload);
    // Generate streams its replies: the split-streamed form of the same strict parsing.
    auto generate_handler =
        std::make_unique<StrictServerStreamingHandler<v1::GenerateRequest, v1::GenerateResponse>>(
            [this](grpc::ServerContext* context, const v1::GenerateRequest& req,
                   const std::function<bool(const v1::GenerateResponse&)>& write) {
                return serve_generate(context, req, write);
            });
    const int generate_index =
        streaming_method_index(*generate_handler, v1::Einsummable::service_full_name(), "Generate");
    MarkMethodStreamed(generate_index, generate_handler.release());
}

grpc::Status EinsummableService::RegisterModel(grpc::ServerContext* context,
                                               const v1::RegisterModelRequest* req,
                                               v1::RegisterModelResponse* resp) {
    return runner_->run("RegisterModel", CallKind::work, context, req->model(),
                        [&]() -> absl::Status {
                            EINSUMMABLE_ASSIGN_OR_RETURN(v1::RegisterModelResponse result,
                                                         engine_->register_model(*req));
                            *resp = std::move(result);
                            return absl::OkStatus();
                        });
}

grpc::Status EinsummableService::UploadTensor(grpc::ServerContext* context,
                                              grpc::ServerReader<v1::UploadTensorChunk>* reader,
                                              v1::UploadTensorResponse* resp) {
    std::string model;
    return runner_->run("UploadTensor", CallKind::upload, context, model, [&]() -> absl::Status {
        // What a cut says about the upload: the weight once its first chunk has named it. Read
        // by the watchdog's thread, hence the lock.
        std::mutex stall_mutex;
        std::string what = "an upload that named no weight yet";
        absl::Status slow_status;
        // A stream that goes quiet is cancelled, so its blocked Read returns and the slot and
        // the bytes it holds are freed. One that keeps sending, but too little (a few bytes now
        // and then resets the idle timer), is cut by its rate with a status that says so; gRPC
        // sends that status to the client (TryCancel would send a bare CANCELLED).
        const std::unique_ptr<IdleWatchdog::Watch> watch =
            runner_->upload_watchdog().watch([&, context](const IdleWatchdog::Watch& stalled) {
                if (stalled.stall() != IdleWatchdog::Stall::slow) {
                    context->TryCancel();
                    return;
                }
                const IdleWatchdog::ProgressRule& rule = runner_->upload_watchdog().rule();
                const double grace = std::chrono::duration<double>(rule.grace).count();
                std::lock_guard<std::mutex> lock(stall_mutex);
                slow_status = absl::DeadlineExceededError(absl::StrFormat(
                    "%s sent %d bytes in %.1f s, too slow: an upload may take %g s "
                    "(--upload_rate_grace_seconds=%g) plus a second for every %d bytes it sends "
                    "(--upload_min_bytes_per_second=%d); it was cut",
                    what, stalled.received_bytes(), stalled.seconds(), grace, grace,
                    rule.min_bytes_per_second, rule.min_bytes_per_second));
                grpc_call_cancel_with_status(
                    context->c_call(), GRPC_STATUS_DEADLINE_EXCEEDED,
                    std::string(truncate_message(slow_status.message())).c_str(), nullptr);
            });
        auto stall_error = [&] {
            absl::Status status;
            if (watch->stall() == IdleWatchdog::Stall::slow) {
                std::lock_guard<std::mutex> lock(stall_mutex);
                status = slow_status;
            } else {
                status = absl::DeadlineExceededError(
                    absl::StrCat("the upload sent nothing for ",
                                 runner_->upload_watchdog().timeout().count() / 1000,
                                 " s (--upload_idle_timeout_seconds); it was cancelled"));
            }
            spdlog::info("UploadTensor model={} peer={}: {}", printable(model),
                         printable(context->peer()), printable(status.message()));
            return status;
        };
        v1::UploadTensorChunk chunk;
        if (!reader->Read(&chunk)) {
            watch->stop();
            if (watch->timed_out()) {
                return stall_error();
            }
            return absl::InvalidArgumentError("the upload stream carried no chunk");
        }
        model = chunk.model();
        const std::string name = chunk.name();
        {
            std::lock_guard<std::mutex> lock(stall_mutex);
            what = absl::StrCat("the upload of weight ", graphdef::quote_name(name), " of model ",
                                graphdef::quote_name(model));
        }
        absl::StatusOr<std::unique_ptr<WeightUpload>> upload = engine_->begin_upload(chunk);
        if (!upload.ok()) {
            return upload.status();
        }
        int64_t chunk_idx = 0;
        do {
            watch->touch(static_cast<int64_t>(chunk.data().size())); // a chunk arrived
            if (chunk_idx > 0 && ((!chunk.model().empty() && chunk.model() != model) ||
                                  (!chunk.name().empty() && chunk.name() != name))) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "chunk ", chunk_idx, " of the upload of '", name, "' names '", chunk.model(),
                    "'/'", chunk.name(), "'; only the first chunk carries the header"));
            }
            if (chunk_idx > 0 && chunk.has_crc32()) {
                return absl::InvalidArgumentError(
                    absl::StrCat("chunk ", chunk_idx, " of the upload of '", name,
                                 "' carries a crc32; only the first chunk carries the checksum"));
            }
            const std::string& data = chunk.data();
            EINSUMMABLE_RETURN_IF_ERROR((*upload)->append(
                {reinterpret_cast<const std::byte*>(data.data()), data.size()},
                chunk.has_offset() ? std::optional<int64_t>(chunk.offset()) : std::nullopt));
            ++chunk_idx;
        } while (reader->Read(&chunk));
        // The stream is over: from here on nothing cuts it, so a slow commit is not cancelled
        // after the weight is published. A stream that ended because it was cut, or because the
        // client went away, is not a finished upload.
        watch->stop();
        if (watch->timed_out()) {
            return stall_error();
        }
        EINSUMMABLE_RETURN_IF_ERROR(call_state(*context));
        EINSUMMABLE_RETURN_IF_ERROR((*upload)->commit());
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
    return runner_->run("Compile", CallKind::work, context, req->model(), [&]() -> absl::Status {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            v1::CompileResponse result,
            engine_->compile(*req, call_cancel_check(*context, kCancelledEvery)));
        *resp = std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::Execute(grpc::ServerContext* context,
                                         const v1::ExecuteRequest* req, v1::ExecuteResponse* resp) {
    return runner_->run("Execute", CallKind::work, context, req->model(), [&]() -> absl::Status {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            v1::ExecuteResponse result,
            engine_->execute(*req, call_cancel_check(*context, kCancelledEvery)));
        *resp = std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status
EinsummableService::serve_generate(grpc::ServerContext* context, const v1::GenerateRequest& req,
                                   const std::function<bool(const v1::GenerateResponse&)>& write) {
    return runner_->run("Generate", CallKind::work, context, req.model(), [&]() -> absl::Status {
        // Each token is written as it is chosen; a failed write means the client went away.
        return generate(*engine_, req, call_cancel_check(*context, kCancelledEvery), write);
    });
}

grpc::Status EinsummableService::Explain(grpc::ServerContext* context,
                                         const v1::ExplainRequest* req, v1::ExplainResponse* resp) {
    return runner_->run("Explain", CallKind::work, context, req->model(), [&]() -> absl::Status {
        EINSUMMABLE_ASSIGN_OR_RETURN(
            v1::ExplainResponse result,
            engine_->explain(*req, call_cancel_check(*context, kCancelledEvery)));
        *resp = std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::ListModels(grpc::ServerContext* context,
                                            const v1::ListModelsRequest*,
                                            v1::ListModelsResponse* resp) {
    return runner_->run("ListModels", CallKind::probe, context, "", [&]() -> absl::Status {
        *resp = engine_->list_models();
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::UnregisterModel(grpc::ServerContext* context,
                                                 const v1::UnregisterModelRequest* req,
                                                 v1::UnregisterModelResponse*) {
    return runner_->run("UnregisterModel", CallKind::work, context, req->model(),
                        [&]() -> absl::Status { return engine_->unregister_model(*req); });
}

grpc::Status EinsummableService::GetServerInfo(grpc::ServerContext* context,
                                               const v1::GetServerInfoRequest*,
                                               v1::GetServerInfoResponse* resp) {
    return runner_->run("GetServerInfo", CallKind::probe, context, "", [&]() -> absl::Status {
        *resp = engine_->server_info();
        return absl::OkStatus();
    });
}

KServeService::KServeService(std::shared_ptr<Engine> engine, std::shared_ptr<CallRunner> runner,
                             ModelRepository* repository)
    : engine_(std::move(engine)), runner_(std::move(runner)), repository_(repository) {
    // As EinsummableService's: a request that does not parse is INVALID_ARGUMENT naming the field.
    auto strict = [this](const char* name, auto method) {
        auto handler = strict_unary(this, method);
        const int index =
            method_index(*handler, inference::GRPCInferenceService::service_full_name(), name);
        MarkMethodStreamed(index, handler.release());
    };
    strict("ServerLive", &KServeService::ServerLive);
    strict("ServerReady", &KServeService::ServerReady);
    strict("ModelReady", &KServeService::ModelReady);
    strict("ServerMetadata", &KServeService::ServerMetadata);
    strict("ModelMetadata", &KServeService::ModelMetadata);
    strict("ModelInfer", &KServeService::ModelInfer);
    strict("ModelConfig", &KServeService::ModelConfig);
    strict("RepositoryIndex", &KServeService::RepositoryIndex);
    strict("RepositoryModelLoad", &KServeService::RepositoryModelLoad);
    strict("RepositoryModelUnload", &KServeService::RepositoryModelUnload);
}

grpc::Status KServeService::RepositoryIndex(grpc::ServerContext* context,
                                            const inference::RepositoryIndexRequest* req,
                                            inference::RepositoryIndexResponse* resp) {
    return runner_->run("RepositoryIndex", CallKind::probe, context, "", [&]() -> absl::Status {
        EINSUMMABLE_ASSIGN_OR_RETURN(inference::RepositoryIndexResponse result,
                                     kserve_repository_index(repository_, *req));
        *resp = std::move(result);
        return absl::OkStatus();
    });
}

grpc::Status KServeService::RepositoryModelLoad(grpc::ServerContext* context,
                                                const inference::RepositoryModelLoadRequest* req,
                                                inference::RepositoryModelLoadResponse*) {
    return runner_->run("RepositoryModelLoad", CallKind::work, context, req->model_name(),
                        [&]() { return kserve_repository_load(repository_, *req); });
}

grpc::Status
KServeService::RepositoryModelUnload(grpc::ServerContext* context,
                                     const inference::RepositoryModelUnloadRequest* req,
                                     inference::RepositoryModelUnloadResponse*) {
    return runner_->run("RepositoryModelUnload", CallKind::work, context, req->model_name(),
                        [&]() { return kserve_repository_unload(repository_, *req); });
}

grpc::Status KServeService::ServerLive(grpc::ServerContext* context,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* resp) {
    return runner_->run("ServerLive", CallKind::probe, context, "", [&]() -> absl::Status {
        resp->set_live(true);
        return absl::OkStatus();
    });
}

grpc::Status KServeService::ServerReady(grpc::ServerContext* context,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* resp) {
    return runner_->run("ServerReady", CallKind::probe, context, "", [&]() -> absl::Status {
        resp->set_ready(ready_ && !runner_->is_shut_down() && !runner_->is_starting());
        return absl::OkStatus();
    });
}

grpc::Status KServeService::ModelReady(grpc::ServerContext* context,
                                       const inference::ModelReadyRequest* req,
                                       inference::ModelReadyResponse* resp) {
    return runner_->run("ModelReady", CallKind::probe, context, req->name(), [&]() -> absl::Status {
        resp->set_ready(ready_ && !runner_->is_shut_down() && kserve_model_ready(*engine_, *req));
        return absl::OkStatus();
    });
}

grpc::Status KServeService::ServerMetadata(grpc::ServerContext* context,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* resp) {
    return runner_->run("ServerMetadata", CallKind::probe, context, "", [&]() -> absl::Status {
        *resp = kserve_server_metadata(*engine_);
        return absl::OkStatus();
    });
}

grpc::Status KServeService::ModelMetadata(grpc::ServerContext* context,
                                          const inference::ModelMetadataRequest* req,
                                          inference::ModelMetadataResponse* resp) {
    return runner_->run("ModelMetadata", CallKind::probe, context, req->name(),
                        [&]() -> absl::Status {
                            EINSUMMABLE_ASSIGN_OR_RETURN(inference::ModelMetadataResponse result,
                                                         kserve_model_metadata(*engine_, *req));
                            *resp = std::move(result);
                            return absl::OkStatus();
                        });
}

grpc::Status KServeService::ModelConfig(grpc::ServerContext* context,
                                        const inference::ModelConfigRequest* req,
                                        inference::ModelConfigResponse* resp) {
    return runner_->run("ModelConfig", CallKind::probe, context, req->name(),
                        [&]() -> absl::Status {
                            EINSUMMABLE_ASSIGN_OR_RETURN(inference::ModelConfigResponse result,
                                                         kserve_model_config(*engine_, *req));
                            *resp = std::move(result);
                            return absl::OkStatus();
                        });
}

grpc::Status KServeService::ModelInfer(grpc::ServerContext* context,
                                       const inference::ModelInferRequest* req,
                                       inference::ModelInferResponse* resp) {
    return runner_->run(
        "ModelInfer", CallKind::work, context, req->model_name(), [&]() -> absl::Status {
            EINSUMMABLE_ASSIGN_OR_RETURN(
                inference::ModelInferResponse result,
                kserve_model_infer(*engine_, *req, call_cancel_check(*context, kCancelledEvery)));
            *resp = std::move(result);
            return absl::OkStatus();
        });
}

namespace {

v1::RepositoryModelState repository_model_state(const RepositoryModel& model) {
    v1::RepositoryModelState state;
    state.set_model(model.name);
    state.set_version(model.version);
    state.set_state(repository_state_name(model.state));
    state.set_reason(model.reason);
    return state;
}

} // namespace

grpc::Status EinsummableService::RepositoryIndex(grpc::ServerContext* context,
                                                 const v1::RepositoryIndexRequest* req,
                                                 v1::RepositoryIndexResponse* resp) {
    return runner_->run("RepositoryIndex", CallKind::probe, context, "", [&]() -> absl::Status {
        if (repository_ == nullptr) {
            return no_repository_error("RepositoryIndex");
        }
        for (const RepositoryModel& model : repository_->index(req->ready_only())) {
            *resp->add_models() = repository_model_state(model);
        }
        return absl::OkStatus();
    });
}

grpc::Status EinsummableService::RepositoryModelLoad(grpc::ServerContext* context,
                                                     const v1::RepositoryModelLoadRequest* req,
                                                     v1::RepositoryModelLoadResponse* resp) {
    return runner_->run("RepositoryModelLoad", CallKind::work, context, req->model(),
                        [&]() -> absl::Status {
                            if (repository_ == nullptr) {
                                return no_repository_error("RepositoryModelLoad");
                            }
                            EINSUMMABLE_ASSIGN_OR_RETURN(RepositoryModel model,
                                                         repository_->load_model(req->model()));
                            *resp->mutable_model() = repository_model_state(model);
                            return absl::OkStatus();
                        });
}

grpc::Status EinsummableService::RepositoryModelUnload(grpc::ServerContext* context,
                                                       const v1::RepositoryModelUnloadRequest* req,
                                                       v1::RepositoryModelUnloadResponse*) {
    return runner_->run("RepositoryModelUnload", CallKind::work, context, req->model(),
                        [&]() -> absl::Status {
                            if (repository_ == nullptr) {
                                return no_repository_error("RepositoryModelUnload");
                            }
                            return repository_->unload_model(req->model());
                        });
}

} // namespace einsummable::server
