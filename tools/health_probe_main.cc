// einsummable-health-probe: asks einsummabled's gRPC health service whether it is SERVING
// (docs/server.md "Other services"). The Docker image's HEALTHCHECK runs it.
//
//   einsummable-health-probe [--address=HOST:PORT] [--timeout_ms=3000] [--service=NAME]
//                            [--tls_ca=FILE [--tls_server_name=NAME]]
//
// Exit status, as Docker's HEALTHCHECK reads it: 0 when the answer is SERVING; 1 for anything
// else: another answer (NOT_SERVING while every work slot is taken or the daemon drains), no
// answer (connection refused, timeout, TLS failure) or a bad argument (Docker reserves 2). One
// line on stdout says which, so `docker inspect` shows why a container is unhealthy.
//
// --address defaults to the daemon's own $FLAGS_listen (the image configures the daemon through
// FLAGS_* variables, deploy/docker/Dockerfile) with a wildcard host (0.0.0.0, [::]) turned into
// loopback, else 127.0.0.1:50051. The health service asks for no bearer token; with TLS on,
// --tls_ca names the PEM root the daemon's certificate chains to. Tested by
// tests/deploy/test_health_probe.py.

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace {

struct ProbeOptions {
    std::string address;
    int timeout_ms = 3000;
    std::string service; // "" = the server as a whole
    std::string tls_ca;
    std::string tls_server_name;
};

// The daemon's --listen as a client can dial it: a wildcard host becomes the loopback address
// of the same family.
std::string dialable(const std::string& listen) {
    for (const auto& [wildcard, loopback] :
         {std::pair<std::string, std::string>{"0.0.0.0:", "127.0.0.1:"}, {"[::]:", "[::1]:"}}) {
        if (listen.rfind(wildcard, 0) == 0) {
            return loopback + listen.substr(wildcard.size());
        }
    }
    return listen;
}

std::optional<std::string> read_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        return std::nullopt;
    }
    std::ostringstream content;
    content << file.rdbuf();
    return content.str();
}

// nullopt (after printing why) for a bad argument.
std::optional<ProbeOptions> parse_arguments(int argc, char** argv) {
    ProbeOptions options;
    const char* listen = std::getenv("FLAGS_listen");
    options.address =
        listen != nullptr && *listen != '\0' ? dialable(listen) : std::string("127.0.0.1:50051");
    for (int idx = 1; idx < argc; ++idx) {
        const std::string arg = argv[idx];
        const size_t eq = arg.find('=');
        const std::string name = arg.substr(0, eq);
        const std::string value = eq == std::string::npos ? "" : arg.substr(eq + 1);
        if (eq == std::string::npos) {
            std::cout << "einsummable-health-probe: '" << arg << "': expected --name=value\n";
            return std::nullopt;
        }
        if (name == "--address") {
            options.address = value;
        } else if (name == "--timeout_ms") {
            char* end = nullptr;
            const long timeout = std::strtol(value.c_str(), &end, 10);
            if (value.empty() || *end != '\0' || timeout <= 0 || timeout > 600000) {
                std::cout << "einsummable-health-probe: --timeout_ms=" << value
                          << ": expected milliseconds from 1 to 600000\n";
                return std::nullopt;
            }
            options.timeout_ms = static_cast<int>(timeout);
        } else if (name == "--service") {
            options.service = value;
        } else if (name == "--tls_ca") {
            options.tls_ca = value;
        } else if (name == "--tls_server_name") {
            options.tls_server_name = value;
        } else {
            std::cout << "einsummable-health-probe: unknown flag '" << arg
                      << "' (--address, --timeout_ms, --service, --tls_ca, --tls_server_name)\n";
            return std::nullopt;
        }
    }
    if (!options.tls_server_name.empty() && options.tls_ca.empty()) {
        std::cout << "einsummable-health-probe: --tls_server_name needs --tls_ca\n";
        return std::nullopt;
    }
    return options;
}

int probe(const ProbeOptions& options) {
    std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
    grpc::ChannelArguments arguments;
    if (!options.tls_ca.empty()) {
        std::optional<std::string> root = read_file(options.tls_ca);
        if (!root) {
            std::cout << "einsummable-health-probe: --tls_ca=" << options.tls_ca
                      << ": cannot read the file\n";
            return 1;
        }
        grpc::SslCredentialsOptions ssl;
        ssl.pem_root_certs = *root;
        credentials = grpc::SslCredentials(ssl);
        if (!options.tls_server_name.empty()) {
            arguments.SetSslTargetNameOverride(options.tls_server_name);
        }
    }
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateCustomChannel(options.address, credentials, arguments);
    std::unique_ptr<grpc::health::v1::Health::Stub> stub =
        grpc::health::v1::Health::NewStub(channel);

    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::milliseconds(options.timeout_ms));
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(options.service);
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status status = stub->Check(&context, request, &response);
    if (!status.ok()) {
        std::cout << "no answer from " << options.address << ": "
                  << absl::StatusCodeToString(static_cast<absl::StatusCode>(status.error_code()))
                  << " " << status.error_message() << "\n";
        return 1;
    }
    const std::string serving_status =
        grpc::health::v1::HealthCheckResponse::ServingStatus_Name(response.status());
    std::cout << serving_status << " (" << options.address << ")\n";
    return response.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

} // namespace

int main(int argc, char** argv) {
    const std::optional<ProbeOptions> options = parse_arguments(argc, argv);
    if (!options) {
        return 1;
    }
    return probe(*options);
}
