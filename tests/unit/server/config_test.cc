// server/config.h: which listen addresses are loopback, and the daemon's start-up rules.
#include <cstdio>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/config.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

TEST(ConfigTest, LoopbackAddresses) {
    for (const char* address : {"127.0.0.1:50051", "127.1.2.3:0", "localhost:50051", "[::1]:50051",
                                "ipv4:127.0.0.1:1", "unix:/tmp/e.sock"}) {
        EXPECT_TRUE(is_loopback_address(address)) << address;
    }
    for (const char* address : {"0.0.0.0:50051", "[::]:50051", "10.0.0.1:50051",
                                "example.com:50051", "128.0.0.1:1", ":50051"}) {
        EXPECT_FALSE(is_loopback_address(address)) << address;
    }
}

TEST(ConfigTest, DefaultsAreValid) {
    EXPECT_TRUE(check_config(DaemonConfig{}).ok());
}

TEST(ConfigTest, OtherAddressesNeedTlsAndATokenOrInsecure) {
    DaemonConfig config;
    config.listen = "0.0.0.0:50051";
    absl::Status status = check_config(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(status.message()), HasSubstr("--insecure"));
    config.tls_cert = "cert.pem";
    config.tls_key = "key.pem";
    EXPECT_THAT(std::string(check_config(config).message()), HasSubstr("without a token"));
    config.token_file = "token";
    EXPECT_TRUE(check_config(config).ok());
    config = DaemonConfig{};
    config.listen = "0.0.0.0:50051";
    config.insecure = true;
    EXPECT_TRUE(check_config(config).ok());
}

TEST(ConfigTest, RejectsBadValuesNamingTheFlag) {
    struct Case {
        std::function<void(DaemonConfig&)> edit;
        std::string flag;
    };
    const std::vector<Case> cases = {
        {[](DaemonConfig& c) { c.backend = "tpu"; }, "--backend=tpu"},
        {[](DaemonConfig& c) { c.devices = "0"; }, "--devices"},
        {[](DaemonConfig& c) { c.devices = "two"; }, "--devices"},
        {[](DaemonConfig& c) {
             c.backend = "cpu";
             c.devices = "0,0";
         },
         "--devices"},
        {[](DaemonConfig& c) { c.backend = "tpu"; }, "--backend"},
        {[](DaemonConfig& c) { c.metrics_port = 70000; }, "--metrics_port"},
        {[](DaemonConfig& c) { c.plan_cache_entries = 0; }, "--plan_cache_entries"},
        {[](DaemonConfig& c) { c.max_message_bytes = int64_t{1} << 32; }, "--max_message_bytes"},
        {[](DaemonConfig& c) { c.max_tensor_bytes = 0; }, "--max_tensor_bytes"},
        {[](DaemonConfig& c) { c.max_upload_bytes_in_flight = 0; }, "--max_upload_bytes_in_flight"},
        {[](DaemonConfig& c) { c.max_concurrent_requests = 0; }, "--max_concurrent_requests"},
        {[](DaemonConfig& c) { c.max_concurrent_uploads = 0; }, "--max_concurrent_uploads"},
        {[](DaemonConfig& c) { c.upload_idle_timeout_seconds = 0; },
         "--upload_idle_timeout_seconds"},
        {[](DaemonConfig& c) { c.upload_min_bytes_per_second = -1; },
         "--upload_min_bytes_per_second=-1"},
        {[](DaemonConfig& c) { c.upload_rate_grace_seconds = -1; },
         "--upload_rate_grace_seconds=-1"},
        {[](DaemonConfig& c) { c.max_models = 0; }, "--max_models=0"},
        {[](DaemonConfig& c) { c.max_model_bytes = 0; }, "--max_model_bytes=0"},
        {[](DaemonConfig& c) { c.compile_threads = -1; }, "--compile_threads"},
        {[](DaemonConfig& c) { c.instances_per_plan = -1; }, "--instances_per_plan"},
        {[](DaemonConfig& c) { c.instances_per_plan = 65; }, "--instances_per_plan"},
        {[](DaemonConfig& c) { c.device_memory = "80 GB/s"; }, "--device_memory=80 GB/s"},
        {[](DaemonConfig& c) { c.device_memory = "-1"; }, "--device_memory"},
        {[](DaemonConfig& c) { c.device_memory = "lots"; }, "--device_memory"},
        {[](DaemonConfig& c) { c.device_memory = "9 EiB"; }, "--device_memory"},
        // /metrics has neither TLS nor a token.
        {[](DaemonConfig& c) { c.metrics_listen = "0.0.0.0"; }, "--metrics_listen=0.0.0.0"},
        {[](DaemonConfig& c) { c.tls_cert = "cert.pem"; }, "--tls_key"},
    };
    for (const Case& c : cases) {
        DaemonConfig config;
        c.edit(config);
        absl::Status status = check_config(config);
        EXPECT_FALSE(status.ok()) << c.flag;
        EXPECT_THAT(std::string(status.message()), HasSubstr(c.flag));
    }
}

TEST(ConfigTest, ANumberOutOfRangeSaysWhatTheFlagTakes) {
    struct Case {
        std::function<void(DaemonConfig&)> edit;
        std::string message;
    };
    const std::vector<Case> cases = {
        {[](DaemonConfig& c) { c.metrics_port = -1; },
         "--metrics_port=-1: expected 0 (off) to 65535"},
        {[](DaemonConfig& c) { c.plan_cache_entries = 0; },
         "--plan_cache_entries=0: expected at least 1"},
        {[](DaemonConfig& c) { c.plan_cache_max_bytes = -1; },
         "--plan_cache_max_bytes=-1: expected at least 0 (0 = no cap)"},
        {[](DaemonConfig& c) { c.max_message_bytes = 1023; },
         "--max_message_bytes=1023: expected 1024 to 2^31-1"},
        {[](DaemonConfig& c) { c.max_graph_operators = 0; },
         "--max_graph_operators=0: expected at least 1"},
        {[](DaemonConfig& c) { c.max_sequence_ends = 0; },
         "--max_sequence_ends=0: expected at least 1"},
        {[](DaemonConfig& c) { c.max_operator_devices = 0; },
         "--max_operator_devices=0: expected at least 1"},
        {[](DaemonConfig& c) { c.compile_threads = -1; },
         "--compile_threads=-1: expected 0 (the cores) or more"},
        {[](DaemonConfig& c) { c.instances_per_plan = 65; },
         "--instances_per_plan=65: expected 0 (as the devices' memory holds) or 1 to 64"},
        {[](DaemonConfig& c) { c.max_queue_delay_us = 10'000'001; },
         "--max_queue_delay_us=10000001: expected 0 to 10000000"},
        {[](DaemonConfig& c) { c.shutdown_grace_seconds = -1; },
         "--shutdown_grace_seconds=-1: expected at least 0"},
        {[](DaemonConfig& c) { c.synthesis_iterations = -1; },
         "--synthesis_iterations=-1: expected at least 0"},
        {[](DaemonConfig& c) { c.generation_page_size = 0; },
         "--generation_page_size=0: expected 1 to 1048576"},
        {[](DaemonConfig& c) { c.generation_cache_tokens = -1; },
         "--generation_cache_tokens=-1: expected 0 (slots × capacity) to 4294967296"},
        {[](DaemonConfig& c) { c.rank_timeout_seconds = 0; },
         "--rank_timeout_seconds=0: expected 1 to 3600"},
        {[](DaemonConfig& c) { c.cuda_rank_transport = "gloo"; },
         "--cuda_rank_transport=gloo: expected nccl (GPU to GPU, one GPU per rank) or mpi "
         "(through host memory)"},
        {[](DaemonConfig& c) { c.generation_top_k = 1025; },
         "--generation_top_k=1025: expected 0 (rows of logits) to 1024"},
        {[](DaemonConfig& c) { c.generation_page_size = 48; },
         "--generation_capacity (2048) must be whole pages of --generation_page_size (48)"},
        // The first flag checked is the one named: the limits, --device_memory, then the rest.
        {[](DaemonConfig& c) {
             c.synthesis_iterations = -1;
             c.device_memory = "lots";
             c.max_models = 0;
         },
         "--max_models=0: expected at least 1"},
        {[](DaemonConfig& c) {
             c.synthesis_iterations = -1;
             c.device_memory = "lots";
         },
         "--device_memory=lots: expected bytes, or a number with a unit (B, kB, KB, MB, GB, TB, "
         "KiB, MiB, GiB, TiB), such as 80GB or 512MiB"},
    };
    for (const Case& c : cases) {
        DaemonConfig config;
        c.edit(config);
        absl::Status status = check_config(config);
        EXPECT_TRUE(absl::IsInvalidArgument(status)) << c.message;
        EXPECT_EQ(status.message(), c.message);
    }
}

TEST(ConfigTest, DeviceMemoryTakesBytesOrTheTopologyFilesUnits) {
    const std::pair<const char*, int64_t> cases[] = {
        {"", 0},
        {"0", 0},
        {"1048576", 1048576},
        {"80GB", 80'000'000'000},
        {"80 GB", 80'000'000'000},
        {"1.5 KiB", 1536},
        {"512MiB", int64_t{512} << 20},
        {"2 TiB", int64_t{2} << 40},
        {"64 B", 64},
    };
    for (const auto& [text, bytes] : cases) {
        absl::StatusOr<int64_t> parsed = parse_byte_size("--device_memory", text);
        ASSERT_TRUE(parsed.ok()) << text << ": " << parsed.status();
        EXPECT_EQ(*parsed, bytes) << text;
        DaemonConfig config;
        config.device_memory = text;
        EXPECT_TRUE(check_config(config).ok()) << text;
    }
    // 0 (auto) and 64 are the bounds of --instances_per_plan.
    for (int instances : {0, 1, 64}) {
        DaemonConfig config;
        config.instances_per_plan = instances;
        EXPECT_TRUE(check_config(config).ok()) << instances;
    }
    EXPECT_EQ(DaemonConfig{}.instances_per_plan, 0);
}

TEST(ConfigTest, APublicMetricsEndpointNeedsInsecureAndLoopbackHostsAreKnown) {
    DaemonConfig config;
    config.metrics_listen = "10.0.0.5";
    EXPECT_EQ(check_config(config).code(), absl::StatusCode::kFailedPrecondition);
    config.insecure = true;
    EXPECT_TRUE(check_config(config).ok()) << check_config(config);
    config.insecure = false;
    config.metrics_port = 0; // no endpoint, nothing exposed
    EXPECT_TRUE(check_config(config).ok()) << check_config(config);
    for (const char* host : {"127.0.0.1", "localhost", "::1", "[::1]", "127.1.2.3"}) {
        EXPECT_TRUE(is_loopback_host(host)) << host;
    }
    for (const char* host : {"0.0.0.0", "[::]", "10.0.0.5", "example.com"}) {
        EXPECT_FALSE(is_loopback_host(host)) << host;
    }
}

TEST(ConfigTest, AcceptsEveryBackendAndADeviceListForCuda) {
    for (const char* backend : {"auto", "cpu", "cuda"}) {
        DaemonConfig config;
        config.backend = backend;
        config.devices = "4";
        EXPECT_TRUE(check_config(config).ok()) << backend << ": " << check_config(config);
    }
    DaemonConfig config;
    config.backend = "cuda";
    config.devices = "0,0,0,0";
    EXPECT_TRUE(check_config(config).ok()) << check_config(config);
}

TEST(ConfigTest, ReadsATokenFile) {
    const std::string path = ::testing::TempDir() + "/einsummable_token";
    {
        std::ofstream out(path);
        out << "  s3cret\n";
    }
    EXPECT_EQ(*read_token_file(path), "s3cret");
    {
        std::ofstream out(path);
        out << "\n";
    }
    EXPECT_THAT(std::string(read_token_file(path).status().message()), HasSubstr("is empty"));
    std::remove(path.c_str());
    EXPECT_EQ(read_token_file(path).status().code(), absl::StatusCode::kNotFound);
}

// The unit and the image read the daemon's configuration from FLAGS_ variables, each only where a
// --tryfromenv lists it: the daemon names every other one instead of ignoring it silently.
TEST(ConfigTest, UnreadFlagVariablesAreNamedWithWhyTheyAreNotRead) {
    const auto is_flag = [](const std::string& name) {
        return name == "listen" || name == "devices" || name == "plan_cache_dir" ||
               name == "log_level";
    };
    const std::vector<std::string> args = {"einsummabled", "--plan_cache_dir=/var/lib/x",
                                           "--tryfromenv=listen,devices", "-fromenv", "log_level"};
    const std::vector<std::string> environment = {
        "PATH=/usr/bin",      "FLAGS_listen=0.0.0.0:50051",
        "FLAGS_devices=4",    "FLAGS_log_level=debug",
        "FLAGS_devcies=8",    "FLAGS_plan_cache_dir=/tmp",
        "NOT_FLAGS_listen=x", "FLAGS_=empty"};
    EXPECT_THAT(unread_flag_variables(args, environment, is_flag),
                ::testing::ElementsAre(
                    "FLAGS_devcies is set but not read: einsummabled has no flag --devcies "
                    "(misspelt?)",
                    "FLAGS_plan_cache_dir is set but not read: no --tryfromenv lists "
                    "'plan_cache_dir' (give it as --plan_cache_dir, or add it to the list)"));
    // Nothing listed: every FLAGS_ variable is unread.
    EXPECT_EQ(unread_flag_variables({"einsummabled"}, {"FLAGS_listen=x"}, is_flag).size(), 1u);
    EXPECT_TRUE(unread_flag_variables(args, {"HOME=/root"}, is_flag).empty());
}

} // namespace
} // namespace einsummable::server
