#include "server/config.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/exprog/topology.h"
#include "compiler/support/status_macros.h"
#include "runtime/backend_choice.h"
#include "server/model_store.h"

namespace einsummable::server {

bool is_loopback_address(absl::string_view address) {
    if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) {
        return true;
    }
    for (absl::string_view scheme : {"ipv4:", "ipv6:", "dns:"}) {
        if (absl::StartsWith(address, scheme)) {
            address.remove_prefix(scheme.size());
        }
    }
    absl::string_view host = address;
    if (absl::StartsWith(host, "[")) {
        const size_t close = host.find(']');
        if (close == absl::string_view::npos) {
            return false;
        }
        host = host.substr(0, close + 1);
    } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
        host = host.substr(0, colon);
    }
    return is_loopback_host(host);
}

bool is_loopback_host(absl::string_view host) {
    if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
        host = host.substr(1, host.size() - 2);
    }
    return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

absl::StatusOr<int64_t> parse_byte_size(absl::string_view flag, absl::string_view text) {
    if (absl::StripAsciiWhitespace(text).empty()) {
        return 0;
    }
    // The topology file's memory units (docs/topologies.md).
    const std::optional<double> bytes = exprog::parse_memory_size(text);
    // Below 2^63 bytes (8 EiB), so that the count fits an int64_t.
    if (!bytes || !(*bytes < 9.2e18)) {
        return absl::InvalidArgumentError(
            absl::StrCat(flag, "=", text,
                         ": expected bytes, or a number with a unit (B, kB, KB, MB, GB, TB, KiB, "
                         "MiB, GiB, TiB), such as 80GB or 512MiB"));
    }
    return static_cast<int64_t>(*bytes);
}

namespace {

constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();

// A numeric flag's rule: its value within [min, max], else InvalidArgument "<flag>=<value>:
// <expected>".
struct Range {
    const char* flag;
    int64_t value;
    int64_t min;
    int64_t max;
    std::string expected;
};

absl::Status check_ranges(const std::vector<Range>& ranges) {
    for (const Range& range : ranges) {
        if (range.value < range.min || range.value > range.max) {
            return absl::InvalidArgumentError(
                absl::StrCat(range.flag, "=", range.value, ": ", range.expected));
        }
    }
    return absl::OkStatus();
}

// The rules of the daemon's numeric flags but --shutdown_grace_seconds and
// --synthesis_iterations, in the order they are checked.
std::vector<Range> limit_ranges(const DaemonConfig& config) {
    const std::string at_least_1 = "expected at least 1";
    return {
        {"--metrics_port", config.metrics_port, 0, 65535, "expected 0 (off) to 65535"},
        {"--plan_cache_entries", config.plan_cache_entries, 1, kNoMax, at_least_1},
        {"--plan_cache_max_bytes", config.plan_cache_max_bytes, 0, kNoMax,
         "expected at least 0 (0 = no cap)"},
        // gRPC message sizes are ints.
        {"--max_message_bytes", config.max_message_bytes, 1024, (int64_t{1} << 31) - 1,
         "expected 1024 to 2^31-1"},
        {"--max_tensor_bytes", config.max_tensor_bytes, 1, kNoMax, at_least_1},
        {"--max_upload_bytes_in_flight", config.max_upload_bytes_in_flight, 1, kNoMax, at_least_1},
        {"--max_graph_operators", config.max_graph_operators, 1, kNoMax, at_least_1},
        {"--max_sequence_ends", config.max_sequence_ends, 1, kNoMax, at_least_1},
        {"--max_operator_devices", config.max_operator_devices, 1, kNoMax, at_least_1},
        {"--max_concurrent_requests", config.max_concurrent_requests, 1, kNoMax, at_least_1},
        {"--max_concurrent_uploads", config.max_concurrent_uploads, 1, kNoMax, at_least_1},
        {"--upload_idle_timeout_seconds", config.upload_idle_timeout_seconds, 1, kNoMax,
         at_least_1},
        {"--upload_min_bytes_per_second", config.upload_min_bytes_per_second, 0, kNoMax,
         "expected at least 0 (0 = no minimum rate)"},
        {"--upload_rate_grace_seconds", config.upload_rate_grace_seconds, 0, kNoMax,
         "expected at least 0"},
        {"--max_models", config.max_models, 1, kNoMax, at_least_1},
        {"--max_model_bytes", config.max_model_bytes, 1, kNoMax, at_least_1},
        {"--compile_threads", config.compile_threads, 0, kNoMax, "expected 0 (the cores) or more"},
        {"--instances_per_plan", config.instances_per_plan, 0, 64,
         "expected 0 (as the devices' memory holds) or 1 to 64"},
        {"--max_queue_delay_us", config.max_queue_delay_us, 0, BatchSpec::kMaxQueueDelayUs,
         absl::StrCat("expected 0 to ", BatchSpec::kMaxQueueDelayUs)},
        {"--generation_slots", config.generation_slots, 0, 1024,
         "expected 0 (Generate recomputes) or 1 to 1024"},
        {"--generation_capacity", config.generation_capacity, 1, 1 << 20, "expected 1 to 1048576"},
        {"--generation_page_size", config.generation_page_size, 1, 1 << 20,
         "expected 1 to 1048576"},
        {"--generation_cache_tokens", config.generation_cache_tokens, 0, int64_t{1} << 32,
         "expected 0 (slots × capacity) to 4294967296"},
        {"--generation_top_k", config.generation_top_k, 0, 1024,
         "expected 0 (rows of logits) to 1024"},
    };
}

// TLS flags given together, and the security rules: an address other than loopback needs TLS
// and a bearer token, or --insecure; a metrics endpoint on a host other than loopback needs
// --insecure.
absl::Status check_security(const DaemonConfig& config) {
    if (config.tls_cert.empty() != config.tls_key.empty()) {
        return absl::InvalidArgumentError("--tls_cert and --tls_key go together: give both");
    }
    const bool tls = !config.tls_cert.empty();
    const bool token = !config.token_file.empty();
    if (!is_loopback_address(config.listen) && !(tls && token) && !config.insecure) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--listen=", config.listen,
            " accepts connections from other machines; that needs TLS (--tls_cert, --tls_key) "
            "and a bearer token (--token_file). Listen on 127.0.0.1, add both, or pass "
            "--insecure to serve ",
            tls ? "without a token" : (token ? "without TLS" : "without TLS or token"), " anyway"));
    }
    if (config.metrics_port > 0 && !is_loopback_host(config.metrics_listen) && !config.insecure) {
        return absl::FailedPreconditionError(absl::StrCat(
            "--metrics_listen=", config.metrics_listen,
            " serves /metrics (no TLS, no token) to other machines; listen on 127.0.0.1 and "
            "scrape through a proxy, or pass --insecure to serve it anyway"));
    }
    return absl::OkStatus();
}

} // namespace

runtime::BackendRequest backend_request(const DaemonConfig& config) {
    runtime::BackendRequest request{config.backend, config.devices};
    request.cuda_rank_transport = config.cuda_rank_transport;
    return request;
}

absl::Status check_config(const DaemonConfig& config) {
    EINSUMMABLE_RETURN_IF_ERROR(runtime::check_backend_request(backend_request(config)));
    if (config.listen.empty()) {
        return absl::InvalidArgumentError("--listen: empty address");
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_ranges(limit_ranges(config)));
    EINSUMMABLE_RETURN_IF_ERROR(parse_byte_size("--device_memory", config.device_memory));
    if (config.generation_capacity % config.generation_page_size != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--generation_capacity (", config.generation_capacity,
            ") must be whole pages of --generation_page_size (", config.generation_page_size, ")"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_ranges({
        {"--shutdown_grace_seconds", config.shutdown_grace_seconds, 0, kNoMax,
         "expected at least 0"},
        {"--synthesis_iterations", config.synthesis_iterations, 0, kNoMax, "expected at least 0"},
        {"--rank_timeout_seconds", config.rank_timeout_seconds, 1, 3600, "expected 1 to 3600"},
    }));
    return check_security(config);
}

absl::StatusOr<std::string> read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return absl::NotFoundError(absl::StrCat(path, ": cannot open the file"));
    }
    std::ostringstream contents;
    contents << in.rdbuf();
    return contents.str();
}

absl::StatusOr<std::string> read_token_file(const std::string& path) {
    absl::StatusOr<std::string> contents = read_text_file(path);
    if (!contents.ok()) {
        return absl::Status(contents.status().code(),
                            absl::StrCat("--token_file: ", contents.status().message()));
    }
    std::string token(absl::StripAsciiWhitespace(*contents));
    if (token.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--token_file: ", path, " is empty"));
    }
    return token;
}

std::vector<std::string>
unread_flag_variables(const std::vector<std::string>& args,
                      const std::vector<std::string>& environment,
                      const std::function<bool(const std::string&)>& is_flag) {
    // The names the --tryfromenv/--fromenv arguments list, in either spelling abseil takes
    // (--tryfromenv=a,b or --tryfromenv a,b; one or two dashes).
    std::set<std::string> listed;
    for (size_t idx = 0; idx < args.size(); ++idx) {
        absl::string_view arg = args[idx];
        if (!absl::ConsumePrefix(&arg, "--")) {
            absl::ConsumePrefix(&arg, "-");
        }
        for (absl::string_view name : {"tryfromenv", "fromenv"}) {
            absl::string_view rest = arg;
            if (!absl::ConsumePrefix(&rest, name)) {
                continue;
            }
            absl::string_view list;
            if (absl::ConsumePrefix(&rest, "=")) {
                list = rest;
            } else if (rest.empty() && idx + 1 < args.size()) {
                list = args[idx + 1];
            } else {
                continue;
            }
            for (absl::string_view flag : absl::StrSplit(list, ',', absl::SkipEmpty())) {
                listed.insert(std::string(flag));
            }
        }
    }
    std::vector<std::string> warnings;
    for (absl::string_view entry : environment) {
        if (!absl::ConsumePrefix(&entry, "FLAGS_")) {
            continue;
        }
        const std::string flag(entry.substr(0, entry.find('=')));
        if (flag.empty() || listed.count(flag) > 0) {
            continue;
        }
        if (is_flag(flag)) {
            warnings.push_back(absl::StrCat("FLAGS_", flag,
                                            " is set but not read: no --tryfromenv lists '", flag,
                                            "' (give it as --", flag, ", or add it to the list)"));
        } else {
            warnings.push_back(absl::StrCat("FLAGS_", flag,
                                            " is set but not read: einsummabled has no flag --",
                                            flag, " (misspelt?)"));
        }
    }
    return warnings;
}

} // namespace einsummable::server
