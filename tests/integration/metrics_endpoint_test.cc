// The real einsummabled's /metrics endpoint (docs/server.md, "Metrics"; server/metrics_http.h):
// what a browser or a stray client sends (/, /favicon.ico, POST and OPTIONS on /metrics) gets
// 404 or 405 and the daemon goes on serving metrics and gRPC; --metrics_listen=::1 serves over
// IPv6 loopback; an endpoint that cannot be served stops the start with an error naming the
// flags.
#include <chrono>
#include <string>

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/integration/daemon_client.h"
#include "tests/integration/ipv6_loopback.h"

namespace einsummable {
namespace {

using namespace integration;
using ::testing::HasSubstr;

// A metric every daemon exports from the start.
constexpr char kAnyMetric[] = "einsummable_inflight_requests";

// The daemon is still running and answers gRPC.
void expect_alive_and_serving(DaemonProcess& daemon) {
    ASSERT_FALSE(daemon.wait(std::chrono::milliseconds(0)).has_value())
        << "the daemon exited; log:\n"
        << daemon.log();
    auto stub = stub_for(daemon.address());
    v1::GetServerInfoResponse info;
    grpc::ClientContext context;
    with_deadline(context, 30);
    const grpc::Status status = stub->GetServerInfo(&context, {}, &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
}

void stop(DaemonProcess& daemon) {
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
}

// Each of these once killed the daemon, when /metrics was served by civetweb (its error page
// overflowed its 100 KB thread stack).
TEST(MetricsEndpointTest, StrayRequestsGet404Or405AndTheDaemonKeepsServing) {
    DaemonProcess daemon;
    const int metrics_port = free_port();
    ASSERT_EQ(daemon.start({absl::StrCat("--metrics_port=", metrics_port)}), "");

    struct Case {
        std::string method;
        std::string path;
        std::string body;
        int status;
    };
    for (const Case& sent :
         {Case{"GET", "/", "", 404}, Case{"GET", "/favicon.ico", "", 404},
          Case{"POST", "/metrics", "x=1", 405}, Case{"OPTIONS", "/metrics", "", 405}}) {
        SCOPED_TRACE(sent.method + " " + sent.path);
        const HttpResponse response =
            http_request("127.0.0.1", metrics_port, sent.method, sent.path, sent.body);
        EXPECT_EQ(response.status, sent.status) << "log:\n" << daemon.log();
        if (sent.status == 405) {
            EXPECT_THAT(response.headers, HasSubstr("Allow: GET, HEAD\r\n"));
        }
        const HttpResponse scrape = http_request("127.0.0.1", metrics_port, "GET", "/metrics");
        EXPECT_EQ(scrape.status, 200);
        EXPECT_THAT(scrape.body, HasSubstr(kAnyMetric));
        ASSERT_NO_FATAL_FAILURE(expect_alive_and_serving(daemon));
    }
    EXPECT_THAT(daemon.log(),
                HasSubstr(absl::StrCat("metrics http://127.0.0.1:", metrics_port, "/metrics")));
    stop(daemon);
}

TEST(MetricsEndpointTest, ServesOverIpv6Loopback) {
    if (!has_ipv6_loopback()) {
        GTEST_SKIP() << "this host has no IPv6 loopback (::1): --metrics_listen=::1 not tested";
    }
    DaemonProcess daemon;
    const int metrics_port = free_port();
    ASSERT_EQ(daemon.start({"--metrics_listen=::1", absl::StrCat("--metrics_port=", metrics_port)}),
              "");
    const HttpResponse scrape = http_request("::1", metrics_port, "GET", "/metrics");
    EXPECT_EQ(scrape.status, 200) << daemon.log();
    EXPECT_THAT(scrape.body, HasSubstr(kAnyMetric));
    EXPECT_EQ(http_request("::1", metrics_port, "GET", "/").status, 404);
    EXPECT_THAT(daemon.log(),
                HasSubstr(absl::StrCat("metrics http://[::1]:", metrics_port, "/metrics")));
    ASSERT_NO_FATAL_FAILURE(expect_alive_and_serving(daemon));
    stop(daemon);
}

// What cannot be served stops the start (exit 2) with both flags and the reason.
TEST(MetricsEndpointTest, AnEndpointThatCannotBeServedIsAStartError) {
    // A port taken by a listening socket of this test.
    const int holder = socket(AF_INET, SOCK_STREAM, 0);
    ASSERT_GE(holder, 0);
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(bind(holder, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ASSERT_EQ(listen(holder, 1), 0);
    socklen_t length = sizeof(address);
    ASSERT_EQ(getsockname(holder, reinterpret_cast<sockaddr*>(&address), &length), 0);
    const int taken = ntohs(address.sin_port);

    std::string log;
    EXPECT_EQ(DaemonProcess::run_to_exit(
                  {"--listen=127.0.0.1:0", absl::StrCat("--metrics_port=", taken)}, &log),
              2)
        << log;
    EXPECT_THAT(log, HasSubstr(absl::StrCat("--metrics_listen=127.0.0.1 --metrics_port=", taken)));
    EXPECT_THAT(log, HasSubstr("in use"));
    close(holder);

    EXPECT_EQ(DaemonProcess::run_to_exit({"--listen=127.0.0.1:0", "--insecure",
                                          "--metrics_listen=no-such-host.invalid",
                                          absl::StrCat("--metrics_port=", free_port())},
                                         &log),
              2)
        << log;
    EXPECT_THAT(log, HasSubstr("--metrics_listen=no-such-host.invalid"));
}

} // namespace
} // namespace einsummable
