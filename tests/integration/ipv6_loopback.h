#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace einsummable::integration {

// Whether this host has an IPv6 loopback (::1) to bind to: the metrics endpoint's IPv6 tests
// (tests/unit/server/metrics_http_test.cc, tests/integration/metrics_endpoint_test.cc) skip
// with a message where it has none.
inline bool has_ipv6_loopback() {
    const int fd = socket(AF_INET6, SOCK_STREAM, 0);
    if (fd < 0) {
        return false;
    }
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_loopback;
    const bool bound = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
    close(fd);
    return bound;
}

} // namespace einsummable::integration
