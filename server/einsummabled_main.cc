// einsummabled: the Einsummable inference server (docs/server.md).
//
// Serves the Einsummable gRPC service, the KServe v2 inference protocol (for KServe and Triton
// clients), the standard health and reflection services, and Prometheus metrics on /metrics
// (server/metrics_http.h). The first line on stdout is "listening on HOST:PORT" with the port
// actually bound (so --listen=127.0.0.1:0 can be used by tests); logs go to stderr.
// SIGTERM or SIGINT stops accepting calls, lets those in flight finish (up to
// --shutdown_grace_seconds) and exits 0. Exit status 2: bad flags or the server could not
// start. Exit status 3: the backend failed beyond recovery (a sticky CUDA error, docs/cuda.md
// "Errors"): health turned NOT_SERVING, the calls in flight failed UNAVAILABLE, and the
// daemon stopped for its supervisor (systemd's Restart=on-failure) to start it again.

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "runtime/backend_choice.h"
#if defined(EINSUMMABLE_WITH_MPI)
#include "runtime/cluster/cluster_backend.h"
#include "runtime/cluster/mpi_cluster.h"
#include "runtime/cluster/rank_worker.h"
#endif
#include "runtime/command_line.h"
#include "runtime/failing_backend.h"
#include "runtime/plan.h"
#include "server/config.h"
#include "server/engine.h"
#include "server/grpc_service.h"
#include "server/machine.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/model_repository.h"
#include "server/plan_persistence.h"
#include "spdlog/sinks/stdout_color_sinks.h"
#include "spdlog/spdlog.h"

#ifndef EINSUMMABLE_VERSION
#define EINSUMMABLE_VERSION "unknown"
#endif

namespace {
const einsummable::server::DaemonConfig kDefaults;
} // namespace

ABSL_FLAG(std::string, listen, kDefaults.listen,
          "gRPC address, HOST:PORT (port 0: any free port; the first stdout line says which)");
ABSL_FLAG(std::string, backend, kDefaults.backend,
          "auto | cpu | cuda (auto = cuda when this build has it and a GPU is visible)");
ABSL_FLAG(std::string, devices, kDefaults.devices,
          "the backend's devices: a count, or for cuda a list of GPU ordinals (0,0,0,0: four "
          "virtual devices on GPU 0); default 8 CPU virtual devices, or every visible GPU");
ABSL_FLAG(std::string, topology, kDefaults.topology,
          "machine topology for the exchange programs: a built-in name or a topology file; "
          "default: discovered on cuda, dgx-a100 up to 8 devices (a switch beyond) on cpu");
ABSL_FLAG(int, metrics_port, kDefaults.metrics_port, "Prometheus /metrics port; 0 disables it");
ABSL_FLAG(std::string, metrics_listen, kDefaults.metrics_listen,
          "address the metrics endpoint binds to: IPv4, IPv6 (::1 or [::1]) or a host name");
ABSL_FLAG(std::string, plan_cache_dir, kDefaults.plan_cache_dir,
          "directory compiled plans are persisted in; empty keeps them in memory only");
ABSL_FLAG(std::string, model_repository, kDefaults.model_repository,
          "directory of models loaded and served at start: DIR/<model>/<version>/graph.pbtxt and "
          "*.safetensors, DIR/<model>/config.pbtxt (docs/server.md \"Model repository\")");
ABSL_FLAG(int64_t, plan_cache_entries, kDefaults.plan_cache_entries,
          "plans held in memory (least recently used evicted first)");
ABSL_FLAG(int64_t, plan_cache_max_bytes, kDefaults.plan_cache_max_bytes,
          "total bytes of plan files in --plan_cache_dir (least recently used removed first, "
          "never a plan in memory); 0 = no cap");
ABSL_FLAG(int64_t, max_message_bytes, kDefaults.max_message_bytes,
          "largest gRPC message received or sent");
ABSL_FLAG(int64_t, max_tensor_bytes, kDefaults.max_tensor_bytes,
          "largest tensor (input, weight, intermediate or output) of any request");
ABSL_FLAG(int64_t, max_upload_bytes_in_flight, kDefaults.max_upload_bytes_in_flight,
          "bytes all uploads in progress may hold together; beyond it uploads get "
          "RESOURCE_EXHAUSTED, and a weight larger than it cannot be uploaded");
ABSL_FLAG(int, max_graph_operators, kDefaults.max_graph_operators,
          "largest number of operators in a registered graph");
ABSL_FLAG(int64_t, max_sequence_ends, kDefaults.max_sequence_ends,
          "largest number of entries in one operator's sequence_ends (attention, rope); a "
          "graph with more is refused at RegisterModel with RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_operator_devices, kDefaults.max_operator_devices,
          "largest operators x devices of one compile; more get RESOURCE_EXHAUSTED before "
          "compiling");
ABSL_FLAG(int, max_concurrent_requests, kDefaults.max_concurrent_requests,
          "work calls (register, compile, execute, explain, unregister, KServe inference) served "
          "at once; more get RESOURCE_EXHAUSTED. Liveness, readiness, metadata, server info and "
          "the model list are never refused");
ABSL_FLAG(int, max_concurrent_uploads, kDefaults.max_concurrent_uploads,
          "UploadTensor streams open at once; more get RESOURCE_EXHAUSTED");
ABSL_FLAG(int, upload_idle_timeout_seconds, kDefaults.upload_idle_timeout_seconds,
          "an UploadTensor stream that sends nothing for this long is cancelled");
ABSL_FLAG(int64_t, upload_min_bytes_per_second, kDefaults.upload_min_bytes_per_second,
          "an UploadTensor stream must average this many bytes a second once "
          "--upload_rate_grace_seconds have passed, or it is cut (DEADLINE_EXCEEDED); 0 = no "
          "minimum rate");
ABSL_FLAG(int, upload_rate_grace_seconds, kDefaults.upload_rate_grace_seconds,
          "how long an UploadTensor stream may take before --upload_min_bytes_per_second "
          "applies (each byte sent earns 1/rate seconds more)");
ABSL_FLAG(int, max_models, kDefaults.max_models,
          "models registered at once; RegisterModel beyond it gets RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_model_bytes, kDefaults.max_model_bytes,
          "bytes the registered models may take together (each: its serialized graph plus the "
          "sizes of all its weights, counted at RegisterModel); beyond it RESOURCE_EXHAUSTED");
ABSL_FLAG(int, compile_threads, kDefaults.compile_threads,
          "plans compiled at once; more wait in a queue (0: the machine's cores)");
ABSL_FLAG(int, instances_per_plan, kDefaults.instances_per_plan,
          "activation sets per compiled plan: requests to one plan run this many at once, "
          "sharing the model's resident weights (each costs the plan's arenas again); 0 = as "
          "many as the devices' spare memory holds (1 to 4), 2 where it is not known");
ABSL_FLAG(int64_t, max_queue_delay_us, kDefaults.max_queue_delay_us,
          "how long the first request of a batch waits for others, for models with batching "
          "that set no max_queue_delay_us of their own; 0: batches form only while every plan "
          "instance is busy");
ABSL_FLAG(bool, share_weights, kDefaults.share_weights,
          "place a model's weights on the devices once for all its plans; false: every plan "
          "holds its own copies (to measure what sharing saves)");
ABSL_FLAG(int64_t, generation_slots, kDefaults.generation_slots,
          "Generate on key/value caches: sequences per model whose caches the devices hold at "
          "once (continuous batching); 0: Generate recomputes the whole sequence every step");
ABSL_FLAG(int64_t, generation_capacity, kDefaults.generation_capacity,
          "the most tokens (prompt and generated) one generation holds: whole pages");
ABSL_FLAG(int64_t, generation_page_size, kDefaults.generation_page_size,
          "tokens per page of the key/value caches; a generation reserves the pages of its prompt "
          "and max_tokens when it starts and frees them when it ends");
ABSL_FLAG(int64_t, generation_cache_tokens, kDefaults.generation_cache_tokens,
          "tokens the key/value caches of a model's generations hold in all (rounded up to "
          "pages); a generation waits for pages when they are taken; 0: slots × capacity");
ABSL_FLAG(int64_t, generation_top_k, kDefaults.generation_top_k,
          "the k (logit, id) pairs per row a decode step picks on the devices: a generation "
          "sampling with top_k up to it reads them instead of its row of logits; 0: none");
ABSL_FLAG(std::string, device_memory, kDefaults.device_memory,
          "bytes each device may hold (80GB, 512MiB, or a count): plans whose weights and "
          "activations do not fit are planned again with the weights sharded, or refused; "
          "default: the --topology file's memory, on cuda the driver's (never above it)");
ABSL_FLAG(std::string, tls_cert, kDefaults.tls_cert, "PEM certificate chain; enables TLS");
ABSL_FLAG(std::string, tls_key, kDefaults.tls_key, "PEM private key for --tls_cert");
ABSL_FLAG(std::string, token_file, kDefaults.token_file,
          "file holding the bearer token every call must carry (authorization: Bearer <token>)");
ABSL_FLAG(bool, insecure, kDefaults.insecure,
          "allow an address other than loopback without TLS and a token");
ABSL_FLAG(int, shutdown_grace_seconds, kDefaults.shutdown_grace_seconds,
          "on SIGTERM, how long calls in flight may take to finish before they are cancelled");
ABSL_FLAG(int, rank_timeout_seconds, kDefaults.rank_timeout_seconds,
          "under an MPI launcher with several ranks: how long a rank may leave rank 0's heartbeat "
          "unanswered before it is taken for dead or hung (docs/cluster.md)");
ABSL_FLAG(std::string, cuda_rank_transport, kDefaults.cuda_rank_transport,
          "under an MPI launcher on the CUDA backend: how messages between ranks travel: nccl "
          "(GPU to GPU, one GPU per rank) or mpi (through host memory; ranks may share a GPU)");
ABSL_FLAG(int, synthesis_iterations, kDefaults.synthesis_iterations,
          "search iterations of the exchange-program synthesis per program");
ABSL_FLAG(std::string, log_level, "info", "trace | debug | info | warn | error");
ABSL_FLAG(int, execute_delay_ms_for_testing, kDefaults.execute_delay_ms,
          "testing only: sleep this long inside every Execute");
ABSL_FLAG(std::string, repository_load_gate_for_testing, "",
          "testing only: with --model_repository, the models load once this file exists (the "
          "port answers meanwhile, every model LOADING)");
ABSL_FLAG(int64_t, fail_backend_after_runs_for_testing,
          kDefaults.fail_backend_after_runs_for_testing,
          "testing only: after this many plan runs the backend fails beyond recovery, as after "
          "a sticky CUDA error (negative: never)");

namespace einsummable::server {
namespace {

DaemonConfig config_from_flags() {
    DaemonConfig config;
    config.listen = absl::GetFlag(FLAGS_listen);
    config.backend = absl::GetFlag(FLAGS_backend);
    config.devices = absl::GetFlag(FLAGS_devices);
    config.topology = absl::GetFlag(FLAGS_topology);
    config.metrics_port = absl::GetFlag(FLAGS_metrics_port);
    config.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
    config.plan_cache_dir = absl::GetFlag(FLAGS_plan_cache_dir);
    config.model_repository = absl::GetFlag(FLAGS_model_repository);
    config.plan_cache_entries = absl::GetFlag(FLAGS_plan_cache_entries);
    config.plan_cache_max_bytes = absl::GetFlag(FLAGS_plan_cache_max_bytes);
    config.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
    config.max_tensor_bytes = absl::GetFlag(FLAGS_max_tensor_bytes);
    config.max_upload_bytes_in_flight = absl::GetFlag(FLAGS_max_upload_bytes_in_flight);
    config.max_graph_operators = absl::GetFlag(FLAGS_max_graph_operators);
    config.max_sequence_ends = absl::GetFlag(FLAGS_max_sequence_ends);
    config.max_operator_devices = absl::GetFlag(FLAGS_max_operator_devices);
    config.max_concurrent_requests = absl::GetFlag(FLAGS_max_concurrent_requests);
    config.max_concurrent_uploads = absl::GetFlag(FLAGS_max_concurrent_uploads);
    config.upload_idle_timeout_seconds = absl::GetFlag(FLAGS_upload_idle_timeout_seconds);
    config.upload_min_bytes_per_second = absl::GetFlag(FLAGS_upload_min_bytes_per_second);
    config.upload_rate_grace_seconds = absl::GetFlag(FLAGS_upload_rate_grace_seconds);
    config.max_models = absl::GetFlag(FLAGS_max_models);
    config.max_model_bytes = absl::GetFlag(FLAGS_max_model_bytes);
    config.compile_threads = absl::GetFlag(FLAGS_compile_threads);
    config.instances_per_plan = absl::GetFlag(FLAGS_instances_per_plan);
    config.max_queue_delay_us = absl::GetFlag(FLAGS_max_queue_delay_us);
    config.share_weights = absl::GetFlag(FLAGS_share_weights);
    config.generation_slots = absl::GetFlag(FLAGS_generation_slots);
    config.generation_capacity = absl::GetFlag(FLAGS_generation_capacity);
    config.generation_page_size = absl::GetFlag(FLAGS_generation_page_size);
    config.generation_cache_tokens = absl::GetFlag(FLAGS_generation_cache_tokens);
    config.generation_top_k = absl::GetFlag(FLAGS_generation_top_k);
    config.device_memory = absl::GetFlag(FLAGS_device_memory);
    config.tls_cert = absl::GetFlag(FLAGS_tls_cert);
    config.tls_key = absl::GetFlag(FLAGS_tls_key);
    config.token_file = absl::GetFlag(FLAGS_token_file);
    config.insecure = absl::GetFlag(FLAGS_insecure);
    config.shutdown_grace_seconds = absl::GetFlag(FLAGS_shutdown_grace_seconds);
    config.rank_timeout_seconds = absl::GetFlag(FLAGS_rank_timeout_seconds);
    config.cuda_rank_transport = absl::GetFlag(FLAGS_cuda_rank_transport);
    config.synthesis_iterations = absl::GetFlag(FLAGS_synthesis_iterations);
    config.execute_delay_ms = absl::GetFlag(FLAGS_execute_delay_ms_for_testing);
    config.repository_load_gate = absl::GetFlag(FLAGS_repository_load_gate_for_testing);
    config.fail_backend_after_runs_for_testing =
        absl::GetFlag(FLAGS_fail_backend_after_runs_for_testing);
    return config;
}

int signal_pipe[2] = {-1, -1};
// Written to signal_pipe, as a signal number would be, when the backend fails beyond recovery
// (no signal is numbered 0).
constexpr unsigned char kBackendFailed = 0;
// The exit status then (docs/server.md "Unrecoverable device errors").
constexpr int kExitBackendFailed = 3;
// How long health says NOT_SERVING, and probes are answered, before the daemon stops accepting
// calls after such a failure: load balancers and orchestrators that poll health see the
// replica go out of service rather than only a refused connection. At most
// --shutdown_grace_seconds.
constexpr std::chrono::seconds kUnreadyBeforeShutdown(2);
// Set by the engine's unrecoverable listener: the exit status is kExitBackendFailed.
std::atomic<bool> backend_failed{false};

extern "C" void on_signal(int signal_number) {
    const unsigned char byte = static_cast<unsigned char>(signal_number);
    // Async-signal-safe; a full pipe means a signal is already pending.
    [[maybe_unused]] const ssize_t written = write(signal_pipe[1], &byte, 1);
}

int fail(const absl::Status& status) {
    std::cerr << "einsummabled: " << status.message() << "\n";
    return 2;
}

// "127.0.0.1:0" with port 50123 bound -> "127.0.0.1:50123"; a Unix socket address as it is
// (gRPC reports port 1 for it).
std::string with_port(const std::string& address, int port) {
    if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
        return address;
    }
    const size_t colon = address.rfind(':');
    const size_t bracket = address.rfind(']');
    if (colon == std::string::npos || (bracket != std::string::npos && colon < bracket)) {
        return absl::StrCat(address, ":", port);
    }
    return absl::StrCat(address.substr(0, colon + 1), port);
}

// Why gRPC could not listen on a TCP `address` (it does not say): binds a socket there the way
// gRPC would and names errno, e.g. "address in use". Empty when the bind works or the address
// is not numeric TCP.
std::string bind_error(const std::string& address) {
    std::string host = address;
    for (const char* scheme : {"ipv4:", "ipv6:", "dns:"}) {
        if (absl::StartsWith(host, scheme)) {
            host = host.substr(std::string(scheme).size());
        }
    }
    const size_t colon = host.rfind(':');
    if (colon == std::string::npos) {
        return "";
    }
    std::string port = host.substr(colon + 1);
    host = host.substr(0, colon);
    if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
        host = host.substr(1, host.size() - 2);
    }
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo* found = nullptr;
    if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &found) != 0) {
        return "";
    }
    std::string error;
    for (addrinfo* info = found; info != nullptr && error.empty(); info = info->ai_next) {
        const int fd = socket(info->ai_family, info->ai_socktype, info->ai_protocol);
        if (fd < 0) {
            continue;
        }
        if (bind(fd, info->ai_addr, info->ai_addrlen) != 0) {
            error = errno == EADDRINUSE ? "address in use" : std::strerror(errno);
        }
        close(fd);
    }
    freeaddrinfo(found);
    return error;
}

// SIGTERM and SIGINT: the handler writes the signal to a pipe that one thread reads. A handler
// rather than sigwait on a blocked mask, because threads a library starts before main
// (OpenBLAS, used before, started its pool when it was loaded) would keep the default action
// and kill the process.
absl::Status handle_signals() {
    if (pipe(signal_pipe) != 0) {
        return absl::InternalError("cannot create the signal pipe");
    }
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    signal(SIGPIPE, SIG_IGN);
    return absl::OkStatus();
}

// Logs on stderr at `log_level` (stdout carries only the "listening on" line).
absl::Status start_logging(const std::string& log_level) {
    spdlog::set_default_logger(spdlog::stderr_color_mt("einsummabled"));
    const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
    if (level == spdlog::level::off && log_level != "off") {
        return absl::InvalidArgumentError(absl::StrCat(
            "--log_level=", log_level, ": expected trace, debug, info, warn or error"));
    }
    spdlog::set_level(level);
    return absl::OkStatus();
}

// A warning for each FLAGS_ variable of the environment the daemon does not read.
void warn_unread_flag_variables(int argc, char** argv) {
    std::vector<std::string> environment;
    for (char** entry = environ; *entry != nullptr; ++entry) {
        environment.emplace_back(*entry);
    }
    for (const std::string& warning : unread_flag_variables(
             std::vector<std::string>(argv, argv + argc), environment,
             [](const std::string& name) { return absl::FindCommandLineFlag(name) != nullptr; })) {
        spdlog::warn("{}", warning);
    }
}

// The flags, checked (bad ones are the daemon's error, not absl's exit status 1), with the log
// on stderr at --log_level and a warning for each FLAGS_ variable the daemon does not read.
absl::StatusOr<DaemonConfig> read_flags(int argc, char** argv) {
    absl::SetProgramUsageMessage(
        "einsummabled [--listen=127.0.0.1:50051] [--devices=8] [--plan_cache_dir=DIR] ...: the "
        "Einsummable inference server (docs/server.md)");
    if (std::optional<std::string> error = runtime::check_flags(argc, argv)) {
        return absl::InvalidArgumentError(*error);
    }
    absl::ParseCommandLine(argc, argv);
    EINSUMMABLE_RETURN_IF_ERROR(start_logging(absl::GetFlag(FLAGS_log_level)));
    warn_unread_flag_variables(argc, argv);
    DaemonConfig config = config_from_flags();
    EINSUMMABLE_RETURN_IF_ERROR(check_config(config));
    return config;
}

#if defined(EINSUMMABLE_WITH_MPI)
// This process's MPI job when an MPI launcher started it (docs/cluster.md); null otherwise.
std::shared_ptr<runtime::cluster::MpiCluster> mpi_job;
#endif

// The backend --backend and --devices ask for; under an MPI launcher with several ranks, rank
// 0's cluster backend over every rank's (docs/cluster.md). There the CUDA backend's discovered
// topology is rank 0's node alone: the job's must come from --topology (`topology_given`).
absl::StatusOr<runtime::BackendChoice>
choose_backend(runtime::BackendRequest request, int rank_timeout_seconds, bool topology_given) {
#if defined(EINSUMMABLE_WITH_MPI)
    if (mpi_job != nullptr && mpi_job->ranks() > 1) {
        request.transport = mpi_job->transport();
        EINSUMMABLE_ASSIGN_OR_RETURN(runtime::BackendChoice choice,
                                     runtime::choose_backend(request));
        if (choice.topology.has_value()) {
            if (!topology_given) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "under an MPI launcher with ", mpi_job->ranks(),
                    " ranks the CUDA backend needs --topology for the whole job (such as "
                    "dgx-h100-2nodes, or a cluster file: docs/topologies.md \"Clusters\"): "
                    "discovery sees rank 0's node only (",
                    choice.topology->name(), ")"));
            }
            choice.topology.reset();
        }
        runtime::cluster::ClusterOptions options;
        options.version = EINSUMMABLE_VERSION;
        options.rank_timeout = std::chrono::seconds(rank_timeout_seconds);
        options.max_tag = request.transport->max_tag();
        EINSUMMABLE_ASSIGN_OR_RETURN(
            choice.backend,
            runtime::cluster::make_cluster_backend(choice.backend, mpi_job->channel(), options));
        absl::StrAppend(&choice.reason, " per rank; ", mpi_job->ranks(),
                        " MPI ranks: ", choice.backend->devices(), " devices");
        return choice;
    }
#endif
    return runtime::choose_backend(request);
}

// The backend, topology and device memory (server/machine.h), logged.
absl::StatusOr<ResolvedMachine> resolve_and_log_machine(const DaemonConfig& config) {
    std::vector<LogLine> log;
    absl::StatusOr<ResolvedMachine> machine = resolve_machine(
        config,
        [&config](const runtime::BackendRequest& request) {
            return choose_backend(request, config.rank_timeout_seconds, !config.topology.empty());
        },
        &log);
    for (const LogLine& line : log) {
        if (line.level == LogLine::Level::warn) {
            spdlog::warn("{}", line.text);
        } else {
            spdlog::info("{}", line.text);
        }
    }
    return machine;
}

// Who may call: the bearer token (empty: none) and the gRPC credentials (TLS or none).
struct Access {
    std::string token;
    std::shared_ptr<grpc::ServerCredentials> credentials;
    bool tls = false;
};

absl::StatusOr<Access> read_access(const DaemonConfig& config) {
    Access access;
    if (!config.token_file.empty()) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::string read, read_token_file(config.token_file));
        access.token = std::move(read);
    }
    access.credentials = grpc::InsecureServerCredentials();
    access.tls = !config.tls_cert.empty();
    if (access.tls) {
        absl::StatusOr<std::string> cert = read_text_file(config.tls_cert);
        absl::StatusOr<std::string> key = read_text_file(config.tls_key);
        if (!cert.ok() || !key.ok()) {
            return !cert.ok() ? cert.status() : key.status();
        }
        grpc::SslServerCredentialsOptions ssl;
        ssl.pem_key_cert_pairs.push_back({*key, *cert});
        access.credentials = grpc::SslServerCredentials(ssl);
    }
    return access;
}

// The /metrics endpoint; null when --metrics_port is 0.
absl::StatusOr<std::unique_ptr<MetricsHttpServer>>
start_metrics_server(const DaemonConfig& config, std::shared_ptr<Metrics> metrics) {
    if (config.metrics_port <= 0) {
        return std::unique_ptr<MetricsHttpServer>();
    }
    MetricsHttpServer::Options options;
    options.host = config.metrics_listen;
    options.port = config.metrics_port;
    absl::StatusOr<std::unique_ptr<MetricsHttpServer>> started =
        MetricsHttpServer::start(options, [metrics] { return metrics->text(); });
    if (!started.ok()) {
        return absl::Status(started.status().code(),
                            absl::StrCat("--metrics_listen=", config.metrics_listen,
                                         " --metrics_port=", config.metrics_port,
                                         ": cannot serve /metrics: ", started.status().message()));
    }
    return started;
}

// The chosen backend, made to fail beyond recovery after
// --fail_backend_after_runs_for_testing runs when that is set.
std::shared_ptr<runtime::Backend> backend_for_testing(const DaemonConfig& config,
                                                      std::shared_ptr<runtime::Backend> backend) {
    if (config.fail_backend_after_runs_for_testing < 0) {
        return backend;
    }
    spdlog::warn("--fail_backend_after_runs_for_testing={}: the backend fails beyond recovery "
                 "after that many runs",
                 config.fail_backend_after_runs_for_testing);
    return runtime::fail_unrecoverably_after(
        backend, config.fail_backend_after_runs_for_testing,
        absl::InternalError("running the plan: cudaErrorIllegalAddress (an illegal memory "
                            "access was encountered), injected by "
                            "--fail_backend_after_runs_for_testing"));
}

// The gRPC server with the daemon's services, health and reflection, listening on --listen;
// `port` is the port it bound.
absl::StatusOr<std::unique_ptr<grpc::Server>>
start_grpc_server(const DaemonConfig& config, const Access& access,
                  std::vector<grpc::Service*> services, int* port) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    grpc::ServerBuilder builder;
    *port = 0;
    // Off: with SO_REUSEPORT (gRPC's default) a second daemon on the same port starts and the
    // kernel splits new connections between the two.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.AddListeningPort(config.listen, access.credentials, port);
    builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
    builder.SetMaxSendMessageSize(static_cast<int>(config.max_message_bytes));
    for (grpc::Service* service : services) {
        builder.RegisterService(service);
    }
    // With a token, every service but health asks for it, reflection included: its descriptors
    // map the whole API for whoever can connect (docs/server.md "Security").
    if (!access.token.empty()) {
        std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
            interceptors;
        interceptors.push_back(std::make_unique<BearerTokenInterceptorFactory>(access.token));
        builder.experimental().SetInterceptorCreators(std::move(interceptors));
    }
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    if (!server || *port == 0) {
        const std::string why = bind_error(config.listen);
        return absl::UnavailableError(absl::StrCat("--listen=", config.listen,
                                                   ": cannot listen on the address",
                                                   why.empty() ? "" : ": ", why));
    }
    return server;
}

// What --insecure let through (check_config refuses it otherwise).
void warn_if_insecure(const DaemonConfig& config, const Access& access, bool metrics_on) {
    if (!is_loopback_address(config.listen) && !(access.tls && !access.token.empty())) {
        spdlog::warn("--insecure: serving {} to other machines{}{}", config.listen,
                     access.tls ? "" : " without TLS",
                     access.token.empty() ? " without a bearer token" : "");
    }
    if (metrics_on && !is_loopback_host(config.metrics_listen)) {
        spdlog::warn("--insecure: serving /metrics on {} to other machines (no TLS, no token)",
                     config.metrics_listen);
    }
}

// What the daemon runs, in the order it starts them (so destroyed in reverse).
struct Daemon {
    std::optional<ResolvedMachine> machine;
    Access access;
    std::shared_ptr<Metrics> metrics;
    std::unique_ptr<MetricsHttpServer> metrics_server;
    std::string backend_name;        // the backend the engine runs on (backend_for_testing)
    std::string persistence_summary; // PlanPersistence::describe
    std::shared_ptr<Engine> engine;
    std::shared_ptr<CallRunner> runner;
    std::unique_ptr<ModelRepository> repository; // --model_repository; null without
    std::unique_ptr<EinsummableService> service;
    std::unique_ptr<KServeService> kserve;
    std::unique_ptr<grpc::Server> server;
    int port = 0; // the port the gRPC server bound
    // Loads the repository's models once the gRPC server listens (start_repository_loader);
    // joined before the services go.
    std::thread repository_loader;
    // Over several MPI ranks: polls the backend for a rank that stopped answering while no call
    // ran (Engine::check_backend), so that an idle daemon also stops serving. Stopped and joined
    // with the services.
    std::thread backend_watch;
    std::atomic<bool> stop_watch{false};
};

// The engine on the daemon's machine, with its plan persistence, and the CallRunner that the
// services run calls through.
void start_engine(const DaemonConfig& config, std::unique_ptr<PlanPersistence> persistence,
                  Daemon& daemon) {
    std::shared_ptr<runtime::Backend> backend =
        backend_for_testing(config, daemon.machine->choice.backend);
    daemon.backend_name = backend->name();
    if (config.max_upload_bytes_in_flight < config.max_tensor_bytes) {
        spdlog::warn("--max_upload_bytes_in_flight={} is below --max_tensor_bytes={}: weights "
                     "larger than it cannot be uploaded",
                     config.max_upload_bytes_in_flight, config.max_tensor_bytes);
    }
    daemon.persistence_summary = persistence->describe();
    daemon.engine =
        std::make_shared<Engine>(engine_options(config, *daemon.machine, EINSUMMABLE_VERSION),
                                 backend, std::move(persistence), daemon.metrics);
    daemon.runner = std::make_shared<CallRunner>(
        daemon.metrics, ServiceOptions{daemon.access.token, config.max_concurrent_requests,
                                       config.max_concurrent_uploads,
                                       std::chrono::seconds(config.upload_idle_timeout_seconds),
                                       config.upload_min_bytes_per_second,
                                       std::chrono::seconds(config.upload_rate_grace_seconds)});
}

// The gRPC services over the engine, served on --listen, with health following the runner and
// the engine's unrecoverable backend failure stopping the daemon.
absl::Status start_services(const DaemonConfig& config, Daemon& daemon) {
    daemon.service =
        std::make_unique<EinsummableService>(daemon.engine, daemon.runner, daemon.repository.get());
    daemon.kserve =
        std::make_unique<KServeService>(daemon.engine, daemon.runner, daemon.repository.get());
    EINSUMMABLE_ASSIGN_OR_RETURN(daemon.server,
                                 start_grpc_server(config, daemon.access,
                                                   {daemon.service.get(), daemon.kserve.get()},
                                                   &daemon.port));
    // gRPC health follows whether the daemon can take work (CallRunner): NOT_SERVING while
    // the repository loads at start, while every request slot is taken and from SIGTERM on.
    daemon.runner->set_starting(daemon.repository != nullptr);
    grpc::HealthCheckServiceInterface* health = daemon.server->GetHealthCheckService();
    daemon.runner->set_serving_listener(
        [health](bool serving) { health->SetServingStatus(serving); });
    // The backend failed beyond recovery (Engine::set_unrecoverable_listener): stop serving here,
    // on the thread of the request that found it, so that its reply already finds health
    // NOT_SERVING and KServe not ready; the signal thread then stops the server, and the daemon
    // exits kExitBackendFailed for its supervisor to restart it.
    daemon.engine->set_unrecoverable_listener([runner = daemon.runner](const absl::Status&) {
        runner->shut_down();
        backend_failed = true;
        const unsigned char byte = kBackendFailed;
        [[maybe_unused]] const ssize_t written = write(signal_pipe[1], &byte, 1);
    });
    warn_if_insecure(config, daemon.access, daemon.metrics_server != nullptr);
#if defined(EINSUMMABLE_WITH_MPI)
    if (mpi_job != nullptr && mpi_job->ranks() > 1) {
        daemon.backend_watch = std::thread([&daemon] {
            while (!daemon.stop_watch && daemon.engine->check_backend().ok()) {
                std::this_thread::sleep_for(std::chrono::milliseconds(200));
            }
        });
    }
#endif
    return absl::OkStatus();
}

// --model_repository: its model directories listed (each LOADING), nothing loaded yet; a
// repository that is not a directory stops the daemon. The models load in the background once
// the gRPC server listens (start_repository_loader).
absl::Status scan_repository(const DaemonConfig& config, Daemon& daemon) {
    if (config.model_repository.empty()) {
        return absl::OkStatus();
    }
    daemon.repository =
        std::make_unique<ModelRepository>(config.model_repository, daemon.engine, daemon.metrics);
    return daemon.repository->scan();
}

// Loads the repository's models one after another on a thread of their own, with the port
// answering (docs/server.md "Model repository", "Readiness"): each model is registered whole
// when it has loaded, so ListModels and KServe ModelReady follow what has loaded and no model is
// seen half loaded; health stays NOT_SERVING and KServe ServerReady false until every model is
// READY or UNAVAILABLE (Triton's strict readiness), then they follow the runner as before. A
// model that fails to load is logged and left out.
void start_repository_loader(const DaemonConfig& config, Daemon& daemon) {
    if (daemon.repository == nullptr) {
        return;
    }
    daemon.repository_loader =
        std::thread([repository = daemon.repository.get(), runner = daemon.runner,
                     gate = config.repository_load_gate] {
            if (!gate.empty()) {
                spdlog::warn("--repository_load_gate_for_testing: loading waits for {}", gate);
                std::error_code error;
                while (!std::filesystem::exists(gate, error) && !runner->is_shut_down()) {
                    std::this_thread::sleep_for(std::chrono::milliseconds(20));
                }
            }
            repository->load_scanned();
            runner->set_starting(false);
        });
}

// Everything the daemon serves, started in order: the machine, who may call, the plan store,
// the metrics endpoint, the engine, the gRPC services.
absl::Status start_daemon(const DaemonConfig& config, Daemon& daemon) {
    EINSUMMABLE_ASSIGN_OR_RETURN(daemon.machine, resolve_and_log_machine(config));
    EINSUMMABLE_ASSIGN_OR_RETURN(daemon.access, read_access(config));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::unique_ptr<PlanPersistence> persistence,
        open_plan_persistence(config.plan_cache_dir, config.plan_cache_max_bytes));
    daemon.metrics = std::make_shared<Metrics>();
    EINSUMMABLE_ASSIGN_OR_RETURN(daemon.metrics_server,
                                 start_metrics_server(config, daemon.metrics));
    start_engine(config, std::move(persistence), daemon);
    EINSUMMABLE_RETURN_IF_ERROR(scan_repository(config, daemon));
    return start_services(config, daemon);
}

// The start-up log line, then the "listening on" line on stdout (the port actually bound): in
// that order, so that whoever has read the stdout line finds the log line written.
void announce(const DaemonConfig& config, const Daemon& daemon) {
    const std::string bound = with_port(config.listen, daemon.port);
    spdlog::info("einsummabled {} listening on {} ({}{}): {} backend, {} devices, topology {}, "
                 "plan cache {} (max {} in memory), metrics {}",
                 EINSUMMABLE_VERSION, bound, config.tls_cert.empty() ? "no TLS" : "TLS",
                 daemon.access.token.empty() ? "" : ", bearer token", daemon.backend_name,
                 daemon.machine->choice.backend->devices(), daemon.machine->topology.name(),
                 daemon.persistence_summary, config.plan_cache_entries,
                 daemon.metrics_server
                     ? absl::StrCat("http://", daemon.metrics_server->address(), "/metrics")
                     : std::string("off"));
    spdlog::default_logger()->flush();
    std::cout << "listening on " << bound << std::endl;
}

// The signal thread: waits for SIGTERM, SIGINT or the backend's failure, then stops taking
// calls and shuts the gRPC server down, letting calls in flight drain.
void drain_on_signal(const DaemonConfig& config, Daemon& daemon) {
    unsigned char byte = 0;
    while (read(signal_pipe[0], &byte, 1) < 0 && errno == EINTR) {
    }
    const int received = byte;
    if (received == kBackendFailed) {
        const auto unready = std::min<std::chrono::seconds>(
            kUnreadyBeforeShutdown, std::chrono::seconds(config.shutdown_grace_seconds));
        spdlog::critical("the {} backend failed beyond recovery ({}): health is NOT_SERVING; "
                         "stopping in {} s, draining calls in flight (up to {} s), then "
                         "exiting {} for the supervisor to restart the daemon",
                         daemon.backend_name, daemon.engine->unrecoverable_error().ToString(),
                         unready.count(), config.shutdown_grace_seconds, kExitBackendFailed);
        std::this_thread::sleep_for(unready);
    } else {
        spdlog::info("{}: draining calls in flight (up to {} s), then exiting",
                     received == SIGTERM ? "SIGTERM" : "SIGINT", config.shutdown_grace_seconds);
    }
    daemon.runner->shut_down();
    daemon.kserve->set_ready(false);
    daemon.server->Shutdown(std::chrono::system_clock::now() +
                            std::chrono::seconds(config.shutdown_grace_seconds));
    spdlog::debug("calls drained");
}

// Serves until a signal (or the backend's failure) stops the server; the exit status.
int serve_until_signal(const DaemonConfig& config, Daemon& daemon) {
    std::thread signal_thread([&] { drain_on_signal(config, daemon); });
    daemon.server->Wait();
    signal_thread.join();
    daemon.stop_watch = true;
    if (daemon.backend_watch.joinable()) {
        daemon.backend_watch.join();
    }
    if (daemon.repository_loader.joinable()) {
        // Stopped while loading: the model loading now finishes, the rest are not loaded.
        daemon.repository->stop();
        daemon.repository_loader.join();
    }
    daemon.server.reset();
    spdlog::debug("server released");
    daemon.metrics_server.reset();
    // The engine, and with it every plan, goes when run() returns; after a backend failure their
    // device memory is freed on a lost context, whose calls fail at once.
    daemon.engine->set_unrecoverable_listener(nullptr);
    if (backend_failed) {
        spdlog::info("stopped after the backend failed; exit status {}", kExitBackendFailed);
        return kExitBackendFailed;
    }
    spdlog::info("stopped");
    return 0;
}

// The daemon on rank 0 (or alone): serves until a signal; the exit status.
int serve(const DaemonConfig& config) {
    Daemon daemon;
    if (absl::Status status = start_daemon(config, daemon); !status.ok()) {
        return fail(status);
    }
    announce(config, daemon);
    start_repository_loader(config, daemon);
    return serve_until_signal(config, daemon);
}

#if defined(EINSUMMABLE_WITH_MPI)
// A rank other than 0 (docs/cluster.md): its backend (--backend, --devices: its own devices),
// serving rank 0's requests until rank 0 shuts it down.
int serve_rank(const DaemonConfig& config) {
    runtime::BackendRequest request = backend_request(config);
    request.transport = mpi_job->transport();
    absl::StatusOr<runtime::BackendChoice> choice = runtime::choose_backend(request);
    if (!choice.ok()) {
        // Still served: rank 0's Hello gets the reason at once, and its Shutdown an answer.
        spdlog::critical("rank {}: {}", mpi_job->rank(), choice.status().ToString());
        runtime::cluster::RankWorker failed(mpi_job->rank(), choice.status(), EINSUMMABLE_VERSION);
        mpi_job->serve(failed).IgnoreError();
        mpi_job->stop();
        return 1;
    }
    spdlog::info("rank {} of {}: {}; serving rank 0", mpi_job->rank(), mpi_job->ranks(),
                 choice->reason);
    runtime::cluster::RankWorker worker(mpi_job->rank(), choice->backend, EINSUMMABLE_VERSION);
    const absl::Status served = mpi_job->serve(worker);
    mpi_job->stop();
    if (!served.ok()) {
        spdlog::critical("rank {}: {}", mpi_job->rank(), served.ToString());
        return 1;
    }
    return 0;
}
#endif

int run(int argc, char** argv) {
    if (absl::Status status = handle_signals(); !status.ok()) {
        return fail(status);
    }
    const absl::StatusOr<DaemonConfig> flags = read_flags(argc, argv);
    if (!flags.ok()) {
        return fail(flags.status());
    }
#if defined(EINSUMMABLE_WITH_MPI)
    if (runtime::cluster::launched_by_mpi()) {
        absl::StatusOr<std::shared_ptr<runtime::cluster::MpiCluster>> job =
            runtime::cluster::MpiCluster::start();
        if (!job.ok()) {
            return fail(job.status());
        }
        mpi_job = *std::move(job);
        if (mpi_job->rank() > 0) {
            return serve_rank(*flags);
        }
    }
    const int status = serve(*flags);
    if (mpi_job != nullptr && status == kExitBackendFailed && mpi_job->ranks() > 1) {
        // A rank is dead or hung: it may answer no shutdown, and MPI cannot end in order. The
        // launcher stops every rank and reports the status to the supervisor.
        spdlog::info("aborting the MPI job with status {}", status);
        spdlog::default_logger()->flush();
        mpi_job->abort(status);
    }
    if (mpi_job != nullptr) {
        mpi_job->stop(); // after the plans went: the other ranks are told to shut down
    }
    return status;
#else
    return serve(*flags);
#endif
}

} // namespace
} // namespace einsummable::server

int main(int argc, char** argv) {
    return einsummable::server::run(argc, argv);
}
