#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace einsummable::server {

// The daemon's /metrics endpoint: a small HTTP server (GNU libmicrohttpd) that answers
// GET and HEAD /metrics with the Prometheus text exposition, 404 for any other path and 405
// (Allow: GET, HEAD) for any other method on /metrics, all with short plain-text bodies.
//
// It replaces prometheus-cpp's Exposer, whose civetweb (Debian's build) starts its threads with
// a fixed 100 KB stack, from which glibc carves the process's static TLS: with the libraries the
// daemon links, its error pages overflowed what was left and one request for / killed the
// daemon; and that civetweb is built without IPv6. Here one thread serves every connection
// (non-blocking, so a slow client holds a connection slot, not the thread), with a stack of
// kThreadStackBytes, a bounded number of connections and an idle timeout. docs/server.md,
// "Metrics".
class MetricsHttpServer {
public:
    struct Options {
        // An IPv4 address (127.0.0.1, 0.0.0.0), an IPv6 address with or without brackets
        // (::1, [::1], :: which takes IPv4 as well), or a host name, resolved once at start:
        // its first IPv4 address, else its first IPv6 address.
        std::string host = "127.0.0.1";
        int port = 0; // 0: any free port (port() says which)
        // Connections served at once; more wait in the kernel's listen backlog until one of
        // them closes.
        unsigned connection_limit = 64;
        // A connection that sends or reads nothing for this long is closed.
        unsigned connection_timeout_seconds = 15;
    };

    // Called on the server's thread for every GET or HEAD /metrics: the body. An exception is
    // answered with 500.
    using Exposition = std::function<std::string()>;

    // The stack of the server's thread: glibc takes every linked library's static TLS out of
    // it, so it is far above what serving needs (a few KB) and does not depend on ulimit -s.
    // Address space only: the pages the thread never touches cost no memory.
    static constexpr size_t kThreadStackBytes = size_t{8} << 20;

    // Listening when it returns. Errors say what could not be done with which address
    // (unresolvable host, bind refused: "address in use", "cannot assign requested address");
    // the caller adds the flags they came from.
    static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> start(const Options& options,
                                                                    Exposition exposition);

    MetricsHttpServer(const MetricsHttpServer&) = delete;
    MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;
    // Stops the thread and closes every connection; returns when no callback runs any more.
    ~MetricsHttpServer();

    // The port bound (the one asked for, or the free one chosen for 0).
    int port() const { return port_; }
    // Where it listens: "127.0.0.1:9464", "[::1]:9464" (the resolved address of a host name).
    const std::string& address() const { return address_; }

private:
    explicit MetricsHttpServer(Exposition exposition);

    // libmicrohttpd's callbacks (metrics_http.cc) reach the members below.
    friend struct MetricsHttpCallbacks;

    Exposition exposition_;
    MHD_Daemon* daemon_ = nullptr;
    int port_ = 0;
    std::string address_;
    // What libmicrohttpd logged while starting: the reason a start failed. Later messages go to
    // the log at debug level (one per refused or timed-out connection would flood it).
    std::mutex log_mutex_;
    bool starting_ = true;
    std::string start_messages_;
};

} // namespace einsummable::server
