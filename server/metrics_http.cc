#include "server/metrics_http.h"

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <exception>
#include <utility>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

// The Prometheus text exposition format, version 0.0.4 (what Prometheus asks for first).
constexpr char kExpositionType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr char kTextType[] = "text/plain; charset=utf-8";

// The address to bind: a literal as it is, a host name through the resolver.
struct ListenAddress {
    sockaddr_storage storage{};
    bool ipv6 = false;
    std::string text; // "127.0.0.1:9464", "[::1]:9464"
};

absl::StatusOr<ListenAddress> resolve(const std::string& given, int port) {
    std::string host = given;
    if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
        host = host.substr(1, host.size() - 2);
    }
    if (host.empty()) {
        return absl::InvalidArgumentError(
            "empty host: give an address (0.0.0.0 or :: for every address) or a host name");
    }
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    addrinfo* found = nullptr;
    int error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    if (error == EAI_NONAME) {
        hints.ai_flags = 0;
        error = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    }
    if (error != 0) {
        std::string hint;
        if (host.find(':') != std::string::npos) {
            hint = " (a host has no port; an IPv6 address is written ::1 or [::1])";
        }
        return absl::InvalidArgumentError(
            absl::StrCat(given, ": not an IPv4 or IPv6 address, nor a host name that resolves: ",
                         gai_strerror(error), hint));
    }
    const addrinfo* chosen = nullptr;
    for (int family : {AF_INET, AF_INET6}) {
        for (const addrinfo* info = found; info != nullptr && chosen == nullptr;
             info = info->ai_next) {
            if (info->ai_family == family) {
                chosen = info;
            }
        }
    }
    if (chosen == nullptr) {
        freeaddrinfo(found);
        return absl::InvalidArgumentError(absl::StrCat(given, ": no IPv4 or IPv6 address"));
    }
    ListenAddress address;
    std::memcpy(&address.storage, chosen->ai_addr, chosen->ai_addrlen);
    freeaddrinfo(found);
    char text[INET6_ADDRSTRLEN] = {};
    if (address.storage.ss_family == AF_INET6) {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&address.storage);
        in6->sin6_port = htons(static_cast<uint16_t>(port));
        inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
        address.ipv6 = true;
        address.text = absl::StrCat("[", text, "]");
    } else {
        auto* in4 = reinterpret_cast<sockaddr_in*>(&address.storage);
        in4->sin_port = htons(static_cast<uint16_t>(port));
        inet_ntop(AF_INET, &in4->sin_addr, text, sizeof(text));
        address.text = text;
    }
    return address;
}

// Queues `body` with `status`; false (MHD_NO: close the connection) if that cannot be done.
MHD_Result respond(MHD_Connection* connection, unsigned status, const std::string& body,
                   const char* content_type, const char* allow = nullptr) {
    MHD_Response* response = MHD_create_response_from_buffer(
        body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
    if (response == nullptr) {
        return MHD_NO;
    }
    MHD_Result queued =
        MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
    if (queued == MHD_YES && allow != nullptr) {
        queued = MHD_add_response_header(response, MHD_HTTP_HEADER_ALLOW, allow);
    }
    if (queued == MHD_YES) {
        queued = MHD_queue_response(connection, status, response);
    }
    MHD_destroy_response(response);
    return queued;
}

} // namespace

struct MetricsHttpCallbacks {
    // Answers every request on its first call (the headers are in; a body, if any, is not read:
    // libmicrohttpd discards it and closes the connection after the answer). Runs on the
    // server's thread; nothing may throw into the C library.
    static MHD_Result on_request(void* self, MHD_Connection* connection, const char* url,
                                 const char* method, const char* /*version*/,
                                 const char* /*upload_data*/, size_t* /*upload_data_size*/,
                                 void** /*request_state*/) {
        auto* server = static_cast<MetricsHttpServer*>(self);
        try {
            if (std::strcmp(url, "/metrics") != 0) {
                return respond(connection, MHD_HTTP_NOT_FOUND,
                               "not found: this endpoint serves /metrics only\n", kTextType);
            }
            if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
                std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
                return respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED,
                               "method not allowed: /metrics takes GET and HEAD\n", kTextType,
                               "GET, HEAD");
            }
            std::string body;
            try {
                body = server->exposition_();
            } catch (const std::exception& error) {
                spdlog::error("/metrics: collecting the metrics failed: {}", error.what());
                return respond(connection, MHD_HTTP_INTERNAL_SERVER_ERROR,
                               "collecting the metrics failed\n", kTextType);
            }
            // For HEAD, libmicrohttpd sends the headers (Content-Length included) only.
            return respond(connection, MHD_HTTP_OK, body, kExpositionType);
        } catch (...) {
            return MHD_NO; // out of memory: drop the connection, keep serving
        }
    }

    static void on_log(void* self, const char* format, va_list arguments) {
        auto* server = static_cast<MetricsHttpServer*>(self);
        char buffer[512];
        std::vsnprintf(buffer, sizeof(buffer), format, arguments);
        std::string message;
        try {
            message = buffer;
            while (!message.empty() && (message.back() == '\n' || message.back() == '.')) {
                message.pop_back();
            }
            std::lock_guard<std::mutex> lock(server->log_mutex_);
            if (server->starting_) {
                if (!server->start_messages_.empty()) {
                    server->start_messages_ += "; ";
                }
                server->start_messages_ += message;
                return;
            }
        } catch (...) {
            return;
        }
        spdlog::debug("metrics endpoint: {}", message);
    }
};

MetricsHttpServer::MetricsHttpServer(Exposition exposition) : exposition_(std::move(exposition)) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::start(const Options& options,
                                                                            Exposition exposition) {
    if (options.port < 0 || options.port > 65535) {
        return absl::InvalidArgumentError(
            absl::StrCat("port ", options.port, ": expected 0 (any free port) to 65535"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(ListenAddress address, resolve(options.host, options.port));
    std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(std::move(exposition)));
    // One internal thread polls every connection (epoll where there is one). Dual stack for
    // IPv6: a specific IPv6 address takes only itself either way, :: takes IPv4 as well (as
    // gRPC's [::] does). The inter-thread channel makes stopping immediate.
    unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (address.ipv6) {
        flags |= MHD_USE_DUAL_STACK;
    }
    // The varargs must have exactly the types libmicrohttpd reads.
    server->daemon_ = MHD_start_daemon(
        flags, static_cast<uint16_t>(options.port), nullptr, nullptr,
        &MetricsHttpCallbacks::on_request, server.get(), MHD_OPTION_EXTERNAL_LOGGER,
        static_cast<MHD_LogCallback>(&MetricsHttpCallbacks::on_log),
        static_cast<void*>(server.get()), MHD_OPTION_SOCK_ADDR,
        reinterpret_cast<const sockaddr*>(&address.storage), MHD_OPTION_CONNECTION_LIMIT,
        static_cast<unsigned>(options.connection_limit), MHD_OPTION_CONNECTION_TIMEOUT,
        static_cast<unsigned>(options.connection_timeout_seconds), MHD_OPTION_THREAD_STACK_SIZE,
        static_cast<size_t>(kThreadStackBytes), MHD_OPTION_END);
    std::string messages;
    {
        std::lock_guard<std::mutex> lock(server->log_mutex_);
        server->starting_ = false;
        messages = std::move(server->start_messages_);
    }
    const std::string where = absl::StrCat(address.text, ":", options.port);
    if (server->daemon_ == nullptr) {
        return absl::UnavailableError(
            absl::StrCat("cannot listen on ", where, ": ",
                         messages.empty() ? "libmicrohttpd could not start" : messages));
    }
    server->port_ = options.port;
    if (const MHD_DaemonInfo* info =
            MHD_get_daemon_info(server->daemon_, MHD_DAEMON_INFO_BIND_PORT);
        info != nullptr && info->port != 0) {
        server->port_ = info->port;
    }
    server->address_ = absl::StrCat(address.text, ":", server->port_);
    return server;
}

MetricsHttpServer::~MetricsHttpServer() {
    if (daemon_ != nullptr) {
        MHD_stop_daemon(daemon_);
    }
}

} // namespace einsummable::server
