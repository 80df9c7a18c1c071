#include "tests/integration/daemon_process.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

namespace einsummable::integration {
namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

// `extra_args`: append EINSUMMABLE_DAEMON_ARGS (daemons that serve; not those that must refuse
// their flags).
pid_t spawn(const std::vector<std::string>& flags, int stdout_fd, const std::string& log_path,
            bool extra_args) {
    // The CPU backend unless a test asks for another, so that the tests mean the same on a
    // machine with a GPU (where auto picks CUDA); EINSUMMABLE_DAEMON_ARGS (e.g. scripts/gpu-check's
    // "--backend=cuda --devices=0,0,0,0") comes last and wins.
    // $EINSUMMABLE_DAEMON (as for the Python tests) runs another build's daemon, e.g. the one
    // scripts/gpu-check --packed unpacked on a GPU machine.
    const char* daemon = std::getenv("EINSUMMABLE_DAEMON");
    std::vector<std::string> args = {daemon != nullptr && *daemon ? daemon : EINSUMMABLED_PATH,
                                     "--backend=cpu"};
    args.insert(args.end(), flags.begin(), flags.end());
    if (const char* extra = std::getenv("EINSUMMABLE_DAEMON_ARGS");
        extra_args && extra != nullptr) {
        std::istringstream words(extra);
        for (std::string word; words >> word;) {
            args.push_back(word);
        }
    }
    std::vector<char*> argv;
    for (std::string& arg : args) {
        argv.push_back(arg.data());
    }
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(log_fd, STDERR_FILENO);
        dup2(stdout_fd >= 0 ? stdout_fd : log_fd, STDOUT_FILENO);
        execv(argv[0], argv.data());
        _exit(127);
    }
    return pid;
}

} // namespace

int free_port() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t length = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
    close(fd);
    return ntohs(addr.sin_port);
}

TempDir::TempDir(const std::string& prefix) {
    std::string pattern = ::testing::TempDir() + "/" + prefix + "XXXXXX";
    char* dir = mkdtemp(pattern.data());
    path_ = dir == nullptr ? std::string() : std::string(dir);
}

TempDir::~TempDir() {
    if (!path_.empty()) {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
}

DaemonProcess::~DaemonProcess() {
    if (pid_ > 0) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
    }
    if (stdout_fd_ >= 0) {
        close(stdout_fd_);
    }
}

std::string DaemonProcess::start(const std::vector<std::string>& flags,
                                 std::chrono::seconds timeout) {
    log_dir_ = std::make_unique<TempDir>("einsummabled_log_");
    log_path_ = log_dir_->path() + "/stderr.log";
    int pipe_fds[2];
    if (pipe(pipe_fds) != 0) {
        return "pipe failed";
    }
    std::vector<std::string> all = {"--listen=127.0.0.1:0"};
    all.insert(all.end(), flags.begin(), flags.end());
    pid_ = spawn(all, pipe_fds[1], log_path_, /*extra_args=*/true);
    close(pipe_fds[1]);
    stdout_fd_ = pipe_fds[0];

    // The first line: "listening on 127.0.0.1:PORT".
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (line.find('\n') == std::string::npos) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            deadline - std::chrono::steady_clock::now());
        if (left.count() <= 0) {
            return "no 'listening on' line in time; log:\n" + log();
        }
        pollfd fd{stdout_fd_, POLLIN, 0};
        if (poll(&fd, 1, static_cast<int>(left.count())) <= 0) {
            continue;
        }
        char buffer[256];
        const ssize_t n = read(stdout_fd_, buffer, sizeof(buffer));
        if (n <= 0) {
            return "the daemon closed stdout before 'listening on'; log:\n" + log();
        }
        line.append(buffer, static_cast<size_t>(n));
    }
    const std::string prefix = "listening on ";
    if (line.rfind(prefix, 0) != 0) {
        return "unexpected first line: " + line;
    }
    address_ = line.substr(prefix.size(), line.find('\n') - prefix.size());
    // A Unix socket has no port; a TCP address must have one.
    if (address_.rfind("unix:", 0) == 0) {
        return "";
    }
    if (const size_t colon = address_.rfind(':'); colon != std::string::npos) {
        port_ = std::atoi(address_.c_str() + colon + 1);
    }
    return port_ > 0 ? "" : "no port in: " + line;
}

int DaemonProcess::run_to_exit(const std::vector<std::string>& flags, std::string* log) {
    const TempDir log_dir("einsummabled_log_");
    const std::string log_path = log_dir.path() + "/stderr.log";
    const pid_t pid = spawn(flags, -1, log_path, /*extra_args=*/false);
    int status = 0;
    waitpid(pid, &status, 0);
    *log = read_file(log_path);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

void DaemonProcess::signal(int signal_number) const {
    if (pid_ > 0) {
        kill(pid_, signal_number);
    }
}

std::optional<int> DaemonProcess::wait(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (pid_ > 0) {
        int status = 0;
        const pid_t done = waitpid(pid_, &status, WNOHANG);
        if (done == pid_) {
            pid_ = -1;
            return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
        }
        if (std::chrono::steady_clock::now() > deadline) {
            return std::nullopt;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
}

std::string DaemonProcess::log() const {
    return read_file(log_path_);
}

std::string http_get(int port, const std::string& path) {
    return http_request("127.0.0.1", port, "GET", path).body;
}

HttpResponse http_request(const std::string& host, int port, const std::string& method,
                          const std::string& path, const std::string& body) {
    std::string literal = host;
    if (literal.size() > 2 && literal.front() == '[' && literal.back() == ']') {
        literal = literal.substr(1, literal.size() - 2);
    }
    sockaddr_storage storage{};
    socklen_t length = 0;
    if (auto* in6 = reinterpret_cast<sockaddr_in6*>(&storage);
        inet_pton(AF_INET6, literal.c_str(), &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(static_cast<uint16_t>(port));
        length = sizeof(sockaddr_in6);
    } else if (auto* in4 = reinterpret_cast<sockaddr_in*>(&storage);
               inet_pton(AF_INET, literal.c_str(), &in4->sin_addr) == 1) {
        in4->sin_family = AF_INET;
        in4->sin_port = htons(static_cast<uint16_t>(port));
        length = sizeof(sockaddr_in);
    } else {
        return {};
    }
    const int fd = socket(storage.ss_family, SOCK_STREAM, 0);
    if (fd < 0) {
        return {};
    }
    // A server that never answers fails the test instead of hanging it.
    timeval timeout{60, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (connect(fd, reinterpret_cast<sockaddr*>(&storage), length) != 0) {
        close(fd);
        return {};
    }
    std::string request =
        method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n";
    if (!body.empty()) {
        request +=
            "Content-Type: text/plain\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
    }
    request += "\r\n" + body;
    size_t sent = 0;
    while (sent < request.size()) {
        const ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
        if (n <= 0) {
            close(fd);
            return {};
        }
        sent += static_cast<size_t>(n);
    }
    std::string response;
    char buffer[4096];
    ssize_t n = 0;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) {
        response.append(buffer, static_cast<size_t>(n));
    }
    close(fd);
    // "HTTP/1.1 404 Not Found\r\nheaders\r\n\r\nbody"
    const size_t end = response.find("\r\n\r\n");
    const size_t space = response.find(' ');
    HttpResponse result;
    if (end == std::string::npos || space == std::string::npos || space > end ||
        response.rfind("HTTP/", 0) != 0) {
        return result;
    }
    result.status = std::atoi(response.c_str() + space + 1);
    const size_t first_line_end = response.find("\r\n");
    result.headers = response.substr(first_line_end + 2, end - first_line_end);
    result.body = response.substr(end + 4);
    return result;
}

} // namespace einsummable::integration
