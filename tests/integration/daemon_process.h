#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

namespace einsummable::integration {

// A loopback port free right now (bound to 0, read back, closed): for the metrics endpoint,
// whose port the daemon does not report.
int free_port();

// A fresh directory under the test's temporary directory, removed with everything in it when the
// returned object goes.
class TempDir {
public:
    explicit TempDir(const std::string& prefix);
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;
    ~TempDir();
    const std::string& path() const { return path_; }

private:
    std::string path_;
};

// The real einsummabled, started as a child process with --listen=127.0.0.1:0 (a --listen in
// the flags wins). start() reads the first stdout line, "listening on 127.0.0.1:PORT" (or
// "listening on unix:PATH"), for the address; stderr (the log) goes to a file. The destructor kills
// a daemon still running and removes the log.
class DaemonProcess {
public:
    DaemonProcess() = default;
    DaemonProcess(const DaemonProcess&) = delete;
    DaemonProcess& operator=(const DaemonProcess&) = delete;
    ~DaemonProcess();

    // Empty on success, else what went wrong (with the log's tail).
    std::string start(const std::vector<std::string>& flags,
                      std::chrono::seconds timeout = std::chrono::seconds(60));
    // Runs the daemon with `flags` and waits for it to exit: its exit status, stderr in `log`.
    static int run_to_exit(const std::vector<std::string>& flags, std::string* log);

    void signal(int signal_number) const;
    // The exit status (WEXITSTATUS), -signal for a signal, nullopt on timeout.
    std::optional<int> wait(std::chrono::milliseconds timeout);

    int port() const { return port_; }
    // What the first line said it listens on: "127.0.0.1:PORT", or "unix:PATH".
    const std::string& address() const { return address_; }
    pid_t pid() const { return pid_; }
    std::string log() const;

private:
    pid_t pid_ = -1;
    int port_ = 0;
    std::string address_;
    int stdout_fd_ = -1;
    std::unique_ptr<TempDir> log_dir_;
    std::string log_path_;
};

// GET http://127.0.0.1:port/path: the body, or empty when the request failed.
std::string http_get(int port, const std::string& path);

struct HttpResponse {
    int status = 0;      // 0: no response (connection refused, closed or timed out)
    std::string headers; // the header lines as received
    std::string body;
};

// `method` `path` over a fresh HTTP/1.1 connection to `host` (an IPv4 or IPv6 address, IPv6 with
// or without brackets) and `port`, asking the server to close it after the response; a
// non-empty `body` goes with a Content-Length. Waits at most 60 s for the response.
HttpResponse http_request(const std::string& host, int port, const std::string& method,
                          const std::string& path, const std::string& body = "");

} // namespace einsummable::integration
