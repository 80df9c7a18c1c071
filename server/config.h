#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "runtime/backend_choice.h"
#include "server/engine_settings.h"

namespace einsummable::server {

// The daemon's configuration, as its flags give it (docs/server.md, "Flags"): the engine's
// settings (EngineSettings, handed to the engine whole; engine_settings.h) and the daemon's own.
struct DaemonConfig : EngineSettings {
    std::string listen = "127.0.0.1:50051";
    std::string backend = "auto"; // auto | cpu | cuda
    // A count, or for CUDA a list of GPU ordinals ("0,0,0,0"); empty = 8 CPU virtual devices
    // or every visible GPU (runtime/backend_choice.h).
    std::string devices;
    std::string topology;    // a built-in name or a file; empty = runtime::default_topology
    int metrics_port = 9464; // 0 disables the metrics endpoint
    std::string metrics_listen = "127.0.0.1";
    std::string plan_cache_dir; // empty = memory only
    // A model repository loaded at start (server/model_repository.h); empty = none.
    std::string model_repository;
    // Testing only (--repository_load_gate_for_testing): the background loader waits until this
    // file exists before it loads the repository's models; empty = no wait.
    std::string repository_load_gate;
    // Total bytes of plan files in plan_cache_dir, least recently used evicted first; 0 = no
    // cap. A plan file holds decisions only (kilobytes to a few megabytes), so 1 GiB keeps
    // thousands of shapes while bounding the disk a long-lived daemon can fill.
    int64_t plan_cache_max_bytes = int64_t{1} << 30;
    int max_concurrent_requests = 64; // work calls (grpc_service.h CallKind::work)
    int max_concurrent_uploads = 8;
    int upload_idle_timeout_seconds = 30;
    // An upload must average this many bytes a second once --upload_rate_grace_seconds have
    // passed (IdleWatchdog::ProgressRule), or it is cut: a stream trickling a few bytes now and
    // then resets the idle timeout forever, and 8 of them held every upload slot. 1 MiB/s is
    // a slow link for weights (a 16 MiB weight in 16 s) yet makes holding all 8 slots cost a
    // client 8 MiB/s of sending. 0: no rate rule.
    int64_t upload_min_bytes_per_second = int64_t{1} << 20;
    int upload_rate_grace_seconds = 30;
    // --device_memory: bytes per device (parse_byte_size: a count, or a number with a unit as
    // the topology file's `memory` takes); empty or 0 = not given (docs/server.md, "Memory").
    // resolve_machine (machine.h) turns it into EngineOptions::device_memory_bytes.
    std::string device_memory;
    std::string tls_cert;
    std::string tls_key;
    std::string token_file;
    bool insecure = false;
    int shutdown_grace_seconds = 30;
    // Under an MPI launcher with several ranks (docs/cluster.md "Faults"): how long a rank may
    // leave rank 0's heartbeat unanswered before it is taken for dead or hung.
    int rank_timeout_seconds = 30;
    // Under an MPI launcher on the CUDA backend (docs/cluster.md "The CUDA backend"): how a
    // rank's messages travel: nccl (GPU to GPU) or mpi (through pinned host memory; works with
    // several ranks on one GPU).
    std::string cuda_rank_transport = "nccl";
    // runtime::fail_unrecoverably_after this many runs; negative: never.
    int64_t fail_backend_after_runs_for_testing = -1;
};

// Whether a gRPC listen address only accepts connections from this machine: a loopback host
// (localhost, 127.0.0.0/8, ::1) or a Unix socket. 0.0.0.0 and [::] are not.
bool is_loopback_address(absl::string_view address);
// The same for a bare host (--metrics_listen): localhost, 127.0.0.0/8, ::1 or [::1].
bool is_loopback_host(absl::string_view host);

// "80 GB", "512MiB", "1048576" (bytes) -> bytes: a non-negative number, then optionally one of
// the units of a topology file's `memory` (B, kB, KB, MB, GB, TB decimal; KiB, MiB, GiB, TiB
// binary), spaces allowed between. Empty is 0. InvalidArgument naming `flag` otherwise.
absl::StatusOr<int64_t> parse_byte_size(absl::string_view flag, absl::string_view text);

// Every check that needs no file or socket: ranges, TLS flags given together, and the security
// rules: an address other than loopback needs TLS and a bearer token, or --insecure; a metrics
// endpoint (which has neither) on a host other than loopback needs --insecure. Errors name the
// flag.
absl::Status check_config(const DaemonConfig& config);

// The backend the flags ask for (--backend, --devices, --cuda_rank_transport); the transport is
// the caller's to add under an MPI launcher.
runtime::BackendRequest backend_request(const DaemonConfig& config);

// The token in a --token_file: its contents without surrounding white space; an empty token is
// an error.
absl::StatusOr<std::string> read_token_file(const std::string& path);

// A whole file (TLS certificate or key); NotFound naming the path.
absl::StatusOr<std::string> read_text_file(const std::string& path);

// The FLAGS_<name> variables of `environment` ("NAME=value" entries) that this run does not
// read. abseil reads a flag from its variable only where a --tryfromenv or --fromenv argument
// of `args` lists it (the systemd unit and the Docker image list every flag but
// --plan_cache_dir; deploy/), so any other FLAGS_ variable is a misspelt flag or one the list
// leaves out, silently ignored unless the daemon says so. One warning line per variable, in
// the environment's order: "FLAGS_x is set but not read: ..." saying which case it is
// (`is_flag` tells whether the daemon has a flag of that name).
std::vector<std::string>
unread_flag_variables(const std::vector<std::string>& args,
                      const std::vector<std::string>& environment,
                      const std::function<bool(const std::string&)>& is_flag);

} // namespace einsummable::server
