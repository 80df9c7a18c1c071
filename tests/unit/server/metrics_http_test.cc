// server/metrics_http.h: the /metrics endpoint over raw HTTP on a loopback port: the exposition
// for GET and HEAD, 404 and 405 for anything else without harm to the next scrape, IPv6, start-up
// errors that name the address, and the bounds (connection limit, idle timeout, a slow client
// not holding up the others).
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics_http.h"
#include "tests/integration/ipv6_loopback.h"

namespace einsummable::server {
namespace {

using integration::has_ipv6_loopback;
using ::testing::HasSubstr;

constexpr char kExposition[] = "# TYPE test_total counter\ntest_total 3\n";
// Far above anything a loopback exchange takes, even on a loaded machine under sanitizers.
constexpr int kWaitMs = 30000;

// A connected TCP socket to `host` (an IPv4 or IPv6 literal) and `port`, with a receive
// timeout so that a server that never answers fails the test instead of hanging it; -1 when
// connect fails.
int connect_to(const std::string& host, int port) {
    sockaddr_storage storage{};
    socklen_t length = 0;
    int family = AF_INET;
    if (host.find(':') != std::string::npos) {
        family = AF_INET6;
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(static_cast<uint16_t>(port));
        inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr);
        length = sizeof(sockaddr_in6);
    } else {
        auto* in4 = reinterpret_cast<sockaddr_in*>(&storage);
        in4->sin_family = AF_INET;
        in4->sin_port = htons(static_cast<uint16_t>(port));
        inet_pton(AF_INET, host.c_str(), &in4->sin_addr);
        length = sizeof(sockaddr_in);
    }
    const int fd = socket(family, SOCK_STREAM, 0);
    if (fd < 0) {
        return -1;
    }
    timeval timeout{kWaitMs / 1000, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

bool send_all(int fd, const std::string& data) {
    size_t sent = 0;
    while (sent < data.size()) {
        const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            return false;
        }
        sent += static_cast<size_t>(n);
    }
    return true;
}

// Everything the server sends until it closes the connection (or the receive timeout).
std::string read_to_close(int fd) {
    std::string received;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = recv(fd, buffer, sizeof(buffer), 0)) > 0) {
        received.append(buffer, static_cast<size_t>(n));
    }
    return received;
}

struct Response {
    int status = 0;                             // 0: no response
    std::map<std::string, std::string> headers; // names lower-cased
    std::string body;

    // The value of header `name` (lower case), empty when absent.
    std::string header(const std::string& name) const {
        const auto found = headers.find(name);
        return found == headers.end() ? "" : found->second;
    }
};

Response parse(const std::string& raw) {
    Response response;
    const size_t end = raw.find("\r\n\r\n");
    if (end == std::string::npos) {
        return response;
    }
    std::vector<std::string> lines = absl::StrSplit(raw.substr(0, end), "\r\n");
    std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
    if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &response.status)) {
        return response;
    }
    for (size_t i = 1; i < lines.size(); ++i) {
        const size_t colon = lines[i].find(':');
        if (colon != std::string::npos) {
            response.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
                std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
        }
    }
    response.body = raw.substr(end + 4);
    return response;
}

// `method` `path` over a fresh connection that the request asks to close; `body` sent as the
// request's body.
Response request(const std::string& host, int port, const std::string& method,
                 const std::string& path, const std::string& body = "") {
    const int fd = connect_to(host, port);
    if (fd < 0) {
        return {};
    }
    std::string text =
        absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: test\r\n", "Connection: close\r\n");
    if (!body.empty()) {
        absl::StrAppend(&text, "Content-Type: text/plain\r\nContent-Length: ", body.size(), "\r\n");
    }
    absl::StrAppend(&text, "\r\n", body);
    const bool sent = send_all(fd, text);
    const std::string raw = sent ? read_to_close(fd) : "";
    close(fd);
    return parse(raw);
}

// Whether the server closes `fd` (recv returns 0 or a reset) within kWaitMs.
bool closed_by_server(int fd) {
    pollfd polled{fd, POLLIN, 0};
    if (poll(&polled, 1, kWaitMs) <= 0) {
        return false;
    }
    char byte = 0;
    return recv(fd, &byte, 1, 0) <= 0;
}

std::unique_ptr<MetricsHttpServer> start_or_fail(
    MetricsHttpServer::Options options,
    MetricsHttpServer::Exposition exposition = [] { return std::string(kExposition); }) {
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::start(options, std::move(exposition));
    EXPECT_TRUE(server.ok()) << server.status();
    return server.ok() ? *std::move(server) : nullptr;
}

void expect_scrape_works(const std::string& host, int port) {
    const Response response = request(host, port, "GET", "/metrics");
    EXPECT_EQ(response.status, 200);
    EXPECT_EQ(response.body, kExposition);
}

TEST(MetricsHttpServerTest, GetServesTheExpositionAndHeadItsHeaders) {
    auto server = start_or_fail({});
    ASSERT_NE(server, nullptr);
    ASSERT_GT(server->port(), 0);
    EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));

    const Response get = request("127.0.0.1", server->port(), "GET", "/metrics");
    EXPECT_EQ(get.status, 200);
    EXPECT_EQ(get.header("content-type"), "text/plain; version=0.0.4; charset=utf-8");
    EXPECT_EQ(get.body, kExposition);
    // A query string is not part of the path.
    EXPECT_EQ(request("127.0.0.1", server->port(), "GET", "/metrics?x=1").status, 200);

    const Response head = request("127.0.0.1", server->port(), "HEAD", "/metrics");
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.header("content-length"), absl::StrCat(std::strlen(kExposition)));
    EXPECT_EQ(head.body, "");
}

TEST(MetricsHttpServerTest, OtherPathsAre404AndTheNextScrapeWorks) {
    auto server = start_or_fail({});
    ASSERT_NE(server, nullptr);
    for (const std::string path : {"/", "/favicon.ico", "/metrics/", "/metricsx", "/index.html"}) {
        for (const std::string method : {"GET", "POST"}) {
            const Response response = request("127.0.0.1", server->port(), method, path);
            EXPECT_EQ(response.status, 404) << method << " " << path;
            EXPECT_THAT(response.body, HasSubstr("/metrics")) << path;
            EXPECT_EQ(response.header("content-type"), "text/plain; charset=utf-8");
        }
        expect_scrape_works("127.0.0.1", server->port());
    }
}

TEST(MetricsHttpServerTest, OtherMethodsOnMetricsAre405WithAllow) {
    auto server = start_or_fail({});
    ASSERT_NE(server, nullptr);
    for (const std::string method : {"POST", "OPTIONS", "PUT", "DELETE", "PATCH"}) {
        const Response response = request("127.0.0.1", server->port(), method, "/metrics",
                                          method == "OPTIONS" ? "" : "a body to discard");
        EXPECT_EQ(response.status, 405) << method;
        EXPECT_EQ(response.header("allow"), "GET, HEAD") << method;
        EXPECT_THAT(response.body, HasSubstr("GET and HEAD"));
        expect_scrape_works("127.0.0.1", server->port());
    }
}

TEST(MetricsHttpServerTest, AFailingExpositionIs500AndTheServerKeepsServing) {
    std::atomic<bool> fail{true};
    auto server = start_or_fail({}, [&fail] {
        if (fail.exchange(false)) {
            throw std::runtime_error("collector broke");
        }
        return std::string(kExposition);
    });
    ASSERT_NE(server, nullptr);
    EXPECT_EQ(request("127.0.0.1", server->port(), "GET", "/metrics").status, 500);
    expect_scrape_works("127.0.0.1", server->port());
}

TEST(MetricsHttpServerTest, ServesOnIpv6Loopback) {
    if (!has_ipv6_loopback()) {
        GTEST_SKIP() << "this host has no IPv6 loopback (::1)";
    }
    for (const std::string host : {"::1", "[::1]"}) {
        MetricsHttpServer::Options options;
        options.host = host;
        auto server = start_or_fail(options);
        ASSERT_NE(server, nullptr) << host;
        EXPECT_EQ(server->address(), absl::StrCat("[::1]:", server->port()));
        expect_scrape_works("::1", server->port());
        EXPECT_EQ(request("::1", server->port(), "GET", "/").status, 404);
    }
}

TEST(MetricsHttpServerTest, AHostNameBindsItsAddress) {
    MetricsHttpServer::Options options;
    options.host = "localhost";
    auto server = start_or_fail(options);
    ASSERT_NE(server, nullptr);
    // IPv4 first where the name has both.
    EXPECT_EQ(server->address(), absl::StrCat("127.0.0.1:", server->port()));
    expect_scrape_works("127.0.0.1", server->port());
}

TEST(MetricsHttpServerTest, StartErrorsNameTheAddress) {
    auto exposition = [] { return std::string(kExposition); };
    MetricsHttpServer::Options options;
    options.host = "no-such-host.invalid";
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> server =
        MetricsHttpServer::start(options, exposition);
    ASSERT_FALSE(server.ok());
    EXPECT_THAT(server.status().message(), HasSubstr("no-such-host.invalid"));

    options.host = "127.0.0.1:9464";
    server = MetricsHttpServer::start(options, exposition);
    ASSERT_FALSE(server.ok());
    EXPECT_THAT(server.status().message(), HasSubstr("a host has no port"));

    options.host = "";
    server = MetricsHttpServer::start(options, exposition);
    ASSERT_FALSE(server.ok());
    EXPECT_THAT(server.status().message(), HasSubstr("empty host"));

    options.host = "127.0.0.1";
    options.port = 70000;
    EXPECT_FALSE(MetricsHttpServer::start(options, exposition).ok());

    // A port another server holds.
    auto first = start_or_fail({});
    ASSERT_NE(first, nullptr);
    options.port = first->port();
    server = MetricsHttpServer::start(options, exposition);
    ASSERT_FALSE(server.ok());
    EXPECT_EQ(server.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(server.status().message(), HasSubstr(absl::StrCat("127.0.0.1:", first->port())));
    EXPECT_THAT(server.status().message(), HasSubstr("in use"));
    expect_scrape_works("127.0.0.1", first->port());
}

TEST(MetricsHttpServerTest, StoppingClosesThePort) {
    auto server = start_or_fail({});
    ASSERT_NE(server, nullptr);
    const int port = server->port();
    expect_scrape_works("127.0.0.1", port);
    server.reset();
    const int fd = connect_to("127.0.0.1", port);
    EXPECT_LT(fd, 0);
    if (fd >= 0) {
        close(fd);
    }
}

// A client that sends half a request and stops holds a connection, not the server: others are
// served meanwhile, and the idle timeout closes it.
TEST(MetricsHttpServerTest, ASlowClientIsTimedOutAndDoesNotHoldUpOthers) {
    MetricsHttpServer::Options options;
    options.connection_timeout_seconds = 1;
    auto server = start_or_fail(options);
    ASSERT_NE(server, nullptr);
    const int slow = connect_to("127.0.0.1", server->port());
    ASSERT_GE(slow, 0);
    ASSERT_TRUE(send_all(slow, "GET /metr"));
    expect_scrape_works("127.0.0.1", server->port());
    EXPECT_TRUE(closed_by_server(slow)) << "the idle connection was not closed";
    close(slow);
    expect_scrape_works("127.0.0.1", server->port());
}

// Beyond connection_limit connections wait (in the kernel's backlog) until one of those being
// served closes.
TEST(MetricsHttpServerTest, ConnectionsBeyondTheLimitWaitForAFreeSlot) {
    MetricsHttpServer::Options options;
    options.connection_limit = 2;
    options.connection_timeout_seconds = 600; // the held connections stay until closed here
    auto server = start_or_fail(options);
    ASSERT_NE(server, nullptr);
    const int first = connect_to("127.0.0.1", server->port());
    const int second = connect_to("127.0.0.1", server->port());
    ASSERT_GE(first, 0);
    ASSERT_GE(second, 0);
    const std::string scrape = "GET /metrics HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
    const int third = connect_to("127.0.0.1", server->port());
    ASSERT_GE(third, 0); // the kernel completes the handshake; the server has not accepted it
    ASSERT_TRUE(send_all(third, scrape));
    // Unanswered while both slots are taken (an answer takes milliseconds; a slow machine could
    // only make this pass wrongly, never fail wrongly).
    pollfd polled{third, POLLIN, 0};
    EXPECT_EQ(poll(&polled, 1, 1000), 0) << "a third connection was served beyond the limit";
    close(first);
    EXPECT_EQ(parse(read_to_close(third)).body, kExposition);
    close(third);
    ASSERT_TRUE(send_all(second, scrape));
    EXPECT_EQ(parse(read_to_close(second)).body, kExposition);
    close(second);
}

} // namespace
} // namespace einsummable::server
