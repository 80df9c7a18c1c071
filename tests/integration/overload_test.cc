// The daemon under overload and abuse (docs/server.md, "Limits and timeouts"): one daemon per
// port, idle upload streams cancelled and never locking out liveness, readiness, health or
// server info, health NOT_SERVING while every request slot is taken, compiles that stop when
// their callers leave, a bounded compile pool whose queue honours deadlines, long messages cut
// so the status code survives, client text escaped in the log, and the configuration rules for
// metrics, --insecure and bearer tokens.
#include <chrono>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>

#include "absl/strings/str_cat.h"
#include "compiler/workloads/llama.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"
#include "proto/graph_def.h"
#include "tests/integration/daemon_client.h"

namespace einsummable {
namespace {

using namespace integration;
using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

// The value of an unlabelled sample `name` in the metrics text; -1 when absent.
double metric_value(const std::string& text, const std::string& name) {
    const std::regex line("(^|\n)" + name + " ([-0-9.e+]+)");
    std::smatch match;
    return std::regex_search(text, match, line) ? std::stod(match[2]) : -1.0;
}

HealthResponse::ServingStatus health_of(const std::string& address) {
    auto health = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    HealthResponse resp;
    grpc::ClientContext context;
    with_deadline(context, 5);
    grpc::Status status = health->Check(&context, {}, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return resp.status();
}

// GetServerInfo, ListModels, KServe ServerLive and ServerReady: each answers OK.
void expect_probes_answer(const std::string& address) {
    auto stub = stub_for(address);
    {
        v1::GetServerInfoResponse info;
        grpc::ClientContext context;
        with_deadline(context, 5);
        grpc::Status status = stub->GetServerInfo(&context, {}, &info);
        EXPECT_TRUE(status.ok()) << "GetServerInfo: " << status.error_message();
    }
    {
        v1::ListModelsResponse models;
        grpc::ClientContext context;
        with_deadline(context, 5);
        grpc::Status status = stub->ListModels(&context, {}, &models);
        EXPECT_TRUE(status.ok()) << "ListModels: " << status.error_message();
    }
    auto kserve = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    {
        inference::ServerLiveResponse live;
        grpc::ClientContext context;
        with_deadline(context, 5);
        grpc::Status status = kserve->ServerLive(&context, {}, &live);
        EXPECT_TRUE(status.ok()) << "ServerLive: " << status.error_message();
        EXPECT_TRUE(live.live());
    }
    {
        inference::ServerReadyResponse ready;
        grpc::ClientContext context;
        with_deadline(context, 5);
        grpc::Status status = kserve->ServerReady(&context, {}, &ready);
        EXPECT_TRUE(status.ok()) << "ServerReady: " << status.error_message();
    }
}

// An upload stream that sends its header and then nothing, until the daemon ends it.
struct IdleUpload {
    grpc::ClientContext context; // no deadline: the client would wait for ever
    v1::UploadTensorResponse resp;
    std::unique_ptr<grpc::ClientWriter<v1::UploadTensorChunk>> writer;

    IdleUpload(v1::Einsummable::Stub& stub, const std::string& model) {
        writer = stub.UploadTensor(&context, &resp);
        v1::UploadTensorChunk chunk;
        chunk.set_model(model);
        chunk.set_name("w1");
        chunk.set_dtype(v1::F32);
        chunk.add_shape(kDModel);
        chunk.add_shape(kDFf);
        writer->Write(chunk);
    }
};

// `blocks` LLaMA-3-8B blocks (docs/workloads.md) as a GraphDef with every input given per request:
// a model whose compile takes seconds at 8 devices with objective search on dgx-v100 (whose
// exchanges, unlike a switch's, are searched: einsummable-plan alone takes 1.9 s for one block
// of 1024 tokens on this 2-core machine, release build, before lowering and the backend's
// prepare). Compile needs no weights.
v1::GraphDef llama_graph(int64_t tokens, int blocks = 1) {
    const workloads::LlamaConfig config = workloads::LlamaConfig::single(tokens);
    return graphdef::from_graph(blocks == 1 ? workloads::llama_block(config).value()
                                            : workloads::llama_stack(config, blocks).value());
}

grpc::Status compile(v1::Einsummable::Stub& stub, const std::string& model,
                     std::chrono::milliseconds deadline, const std::string& objective = "") {
    v1::CompileRequest req;
    req.set_model(model);
    if (!objective.empty()) {
        req.mutable_options()->set_objective(objective);
    }
    v1::CompileResponse resp;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + deadline);
    return stub.Compile(&context, req, &resp);
}

TEST(OverloadTest, ASecondDaemonOnABoundPortRefusesToStart) {
    DaemonProcess first;
    ASSERT_EQ(first.start({"--metrics_port=0"}), "");
    std::string log;
    EXPECT_EQ(DaemonProcess::run_to_exit(
                  {absl::StrCat("--listen=", first.address()), "--metrics_port=0"}, &log),
              2)
        << log;
    EXPECT_THAT(log, HasSubstr("address in use"));
    expect_probes_answer(first.address()); // the first one is untouched
}

TEST(OverloadTest, AUnixSocketAddressIsReportedAsItIs) {
    const TempDir dir("einsummable_unix_");
    const std::string address = "unix:" + dir.path() + "/daemon.sock";
    DaemonProcess daemon;
    ASSERT_EQ(daemon.start({"--listen=" + address, "--metrics_port=0"}), "");
    EXPECT_EQ(daemon.address(), address);
    expect_probes_answer(address);
}

TEST(OverloadTest, IdleUploadsAreCancelledAndNeverLockOutProbes) {
    DaemonProcess daemon;
    const int metrics_port = free_port();
    ASSERT_EQ(daemon.start({absl::StrCat("--metrics_port=", metrics_port),
                            "--max_concurrent_uploads=4", "--max_concurrent_requests=4",
                            "--upload_idle_timeout_seconds=2", "--devices=2"}),
              "");
    auto stub = stub_for(daemon.address());
    ASSERT_TRUE(register_ffn(*stub, "ffn").ok());

    // Four idle streams take every upload slot; the fifth and sixth are refused by name.
    const Clock::time_point opened = Clock::now();
    std::vector<std::unique_ptr<IdleUpload>> idle;
    for (int stream_idx = 0; stream_idx < 4; ++stream_idx) {
        idle.push_back(std::make_unique<IdleUpload>(*stub, "ffn"));
    }
    ASSERT_TRUE(wait_for_metric(metrics_port, "einsummable_inflight_requests 4"));
    for (int extra = 0; extra < 2; ++extra) {
        IdleUpload refused(*stub, "ffn");
        refused.writer->WritesDone();
        grpc::Status status = refused.writer->Finish();
        EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
        EXPECT_THAT(status.error_message(), HasSubstr("--max_concurrent_uploads"));
    }
    // Uploads have their own limit: liveness, readiness, info and health answer, and so does
    // work.
    expect_probes_answer(daemon.address());
    EXPECT_EQ(health_of(daemon.address()), HealthResponse::SERVING);
    {
        v1::CompileRequest req;
        req.set_model("ffn");
        (*req.mutable_dims())["tokens"] = 4;
        v1::CompileResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        grpc::Status status = stub->Compile(&context, req, &resp);
        EXPECT_TRUE(status.ok()) << status.error_message();
    }
    // The idle streams are cancelled after the timeout (2 s, checked a few times a second).
    for (std::unique_ptr<IdleUpload>& upload : idle) {
        grpc::Status status = upload->writer->Finish();
        EXPECT_FALSE(status.ok());
    }
    const double waited = std::chrono::duration<double>(Clock::now() - opened).count();
    EXPECT_GE(waited, 1.9);
    EXPECT_LT(waited, 10.0);
    // The daemon logs why once the cancelled handler's Read returns, which may be just after
    // the client saw the cancellation.
    const Clock::time_point logged_by = Clock::now() + std::chrono::seconds(5);
    while (daemon.log().find("--upload_idle_timeout_seconds") == std::string::npos &&
           Clock::now() < logged_by) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_THAT(daemon.log(), HasSubstr("--upload_idle_timeout_seconds"));
    // The slots are free again: a real upload goes through.
    v1::UploadTensorResponse resp;
    grpc::Status status = upload(*stub, "ffn", "w1", random_values(kDModel * kDFf, kDModel, 1),
                                 {kDModel, kDFf}, 4, &resp);
    EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(OverloadTest, HealthIsNotServingWhileEveryRequestSlotIsTaken) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    DaemonProcess daemon;
    const int metrics_port = free_port();
    v1::CompileResponse compiled;
    auto stub = ready_daemon(daemon,
                             {absl::StrCat("--metrics_port=", metrics_port),
                              "--execute_delay_ms_for_testing=1500", "--max_concurrent_requests=1"},
                             w1, w2, &compiled);
    ASSERT_NE(stub, nullptr);
    EXPECT_EQ(health_of(daemon.address()), HealthResponse::SERVING);

    const std::vector<float> x = random_values(4 * kDModel, kDModel, 50);
    grpc::Status execute_status;
    v1::ExecuteResponse executed;
    std::thread in_flight([&] {
        grpc::ClientContext context;
        with_deadline(context);
        execute_status = stub->Execute(&context, execute_request("ffn", 4, x), &executed);
    });
    ASSERT_TRUE(wait_for_metric(metrics_port, "einsummable_inflight_requests 1"));
    EXPECT_EQ(health_of(daemon.address()), HealthResponse::NOT_SERVING);
    expect_probes_answer(daemon.address());
    // Work beyond the limit is refused by name.
    grpc::Status refused = compile(*stub, "ffn", std::chrono::seconds(10));
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(refused.error_message(), HasSubstr("--max_concurrent_requests"));
    in_flight.join();
    ASSERT_TRUE(execute_status.ok()) << execute_status.error_message();
    EXPECT_LE(max_relative_error(as_doubles(executed.outputs(0).tensor().data()),
                                 reference_y(4, x, w1, w2)),
              1e-5);
    EXPECT_EQ(health_of(daemon.address()), HealthResponse::SERVING);
}

// 16 compiles of distinct shapes of the LLaMA block, each with a 1 s deadline, on a pool of 2:
// every caller gets DEADLINE_EXCEEDED at its deadline, and a few seconds later nothing runs,
// nothing is queued and no request slot is held — the compiles stopped instead of running to
// the end (seconds each, so tens of seconds for the 16 on two threads).
TEST(OverloadTest, CompilesWhoseCallersLeftStopAndFreeTheirSlots) {
    DaemonProcess daemon;
    const int metrics_port = free_port();
    ASSERT_EQ(daemon.start({absl::StrCat("--metrics_port=", metrics_port), "--devices=8",
                            "--topology=dgx-v100", "--compile_threads=2", "--log_level=debug"}),
              "");
    auto stub = stub_for(daemon.address());
    constexpr int kCompiles = 16;
    std::vector<std::string> models;
    for (int model_idx = 0; model_idx < kCompiles; ++model_idx) {
        models.push_back(absl::StrCat("llama", model_idx));
        ASSERT_TRUE(register_graph(*stub, models.back(), llama_graph(1024 + 64 * model_idx)).ok());
    }
    const Clock::time_point start = Clock::now();
    std::vector<grpc::Status> statuses(kCompiles);
    std::vector<std::thread> callers;
    for (int model_idx = 0; model_idx < kCompiles; ++model_idx) {
        callers.emplace_back([&, model_idx] {
            statuses[model_idx] =
                compile(*stub, models[model_idx], std::chrono::seconds(1), "search");
        });
    }
    for (std::thread& caller : callers) {
        caller.join();
    }
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - start).count(), 5.0);
    for (const grpc::Status& status : statuses) {
        EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED)
            << status.error_message();
    }
    // Within a few seconds of the last deadline everything is idle again.
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
    std::string text;
    while (Clock::now() < deadline) {
        text = metrics_text(metrics_port);
        if (metric_value(text, "einsummable_compiles_running") == 0 &&
            metric_value(text, "einsummable_compile_queue_length") == 0 &&
            metric_value(text, "einsummable_inflight_requests") == 0) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(metric_value(text, "einsummable_compiles_running"), 0) << text;
    EXPECT_EQ(metric_value(text, "einsummable_compile_queue_length"), 0) << text;
    EXPECT_EQ(metric_value(text, "einsummable_inflight_requests"), 0) << text;
    EXPECT_GE(metric_value(text, "einsummable_compiles_cancelled_total"), 1) << text;
    EXPECT_EQ(metric_value(text, "einsummable_compile_duration_seconds_count"), 0) << text;
    EXPECT_THAT(daemon.log(), HasSubstr("compile stopped after"));
    // And it serves: the FFN compiles and answers.
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    ASSERT_TRUE(register_ffn(*stub, "ffn").ok());
    v1::UploadTensorResponse uploaded;
    ASSERT_TRUE(upload(*stub, "ffn", "w1", w1, {kDModel, kDFf}, 2, &uploaded).ok());
    ASSERT_TRUE(upload(*stub, "ffn", "w2", w2, {kDFf, kDModel}, 2, &uploaded).ok());
    const std::vector<float> x = random_values(4 * kDModel, kDModel, 70);
    v1::ExecuteResponse executed;
    grpc::ClientContext context;
    with_deadline(context);
    grpc::Status status = stub->Execute(&context, execute_request("ffn", 4, x), &executed);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(max_relative_error(as_doubles(executed.outputs(0).tensor().data()),
                                 reference_y(4, x, w1, w2)),
              1e-5);
}

// --compile_threads=1: distinct compiles run one at a time and the others queue (the metrics
// show it); a queued compile whose deadline passes returns at its deadline, not when the one
// ahead of it ends; the queue moves on once the slow one is abandoned.
TEST(OverloadTest, CompilesQueueForABoundedPoolAndQueuedOnesHonourDeadlines) {
    DaemonProcess daemon;
    const int metrics_port = free_port();
    ASSERT_EQ(daemon.start({absl::StrCat("--metrics_port=", metrics_port), "--devices=8",
                            "--topology=dgx-v100", "--compile_threads=1"}),
              "");
    auto stub = stub_for(daemon.address());
    ASSERT_TRUE(register_graph(*stub, "slow", llama_graph(2048, 4)).ok());
    ASSERT_TRUE(register_graph(*stub, "queued", llama_graph(1024)).ok());
    constexpr int kFfns = 3;
    for (int ffn_idx = 0; ffn_idx < kFfns; ++ffn_idx) {
        ASSERT_TRUE(register_ffn(*stub, absl::StrCat("ffn", ffn_idx)).ok());
    }
    // The slow compile (four blocks, objective search: some 20 s in full) takes the only thread
    // until its caller gives up after 4 s.
    grpc::Status slow;
    std::thread slow_caller(
        [&] { slow = compile(*stub, "slow", std::chrono::seconds(4), "search"); });
    ASSERT_TRUE(wait_for_metric(metrics_port, "einsummable_compiles_running 1"));
    const Clock::time_point queued_at = Clock::now();
    grpc::Status queued = compile(*stub, "queued", std::chrono::milliseconds(500));
    EXPECT_EQ(queued.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << queued.error_message();
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - queued_at).count(), 2.0);
    // Three quick compiles queue behind it; the gauges never show more than one running.
    std::vector<grpc::Status> quick(kFfns);
    std::vector<std::thread> callers;
    for (int ffn_idx = 0; ffn_idx < kFfns; ++ffn_idx) {
        callers.emplace_back([&, ffn_idx] {
            v1::CompileRequest req;
            req.set_model(absl::StrCat("ffn", ffn_idx));
            (*req.mutable_dims())["tokens"] = 8;
            v1::CompileResponse resp;
            grpc::ClientContext context;
            with_deadline(context, 120);
            quick[ffn_idx] = stub->Compile(&context, req, &resp);
        });
    }
    double most_running = 0;
    double most_queued = 0;
    while (true) {
        const std::string text = metrics_text(metrics_port);
        most_running = std::max(most_running, metric_value(text, "einsummable_compiles_running"));
        most_queued = std::max(most_queued, metric_value(text, "einsummable_compile_queue_length"));
        if (metric_value(text, "einsummable_compile_duration_seconds_count") >= kFfns) {
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (std::thread& caller : callers) {
        caller.join();
    }
    slow_caller.join();
    EXPECT_EQ(slow.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << slow.error_message();
    for (const grpc::Status& status : quick) {
        EXPECT_TRUE(status.ok()) << status.error_message();
    }
    EXPECT_EQ(most_running, 1);
    EXPECT_GE(most_queued, 1);
    const std::string text = metrics_text(metrics_port);
    // The slow one, the three quick ones and the abandoned one each waited in the queue once.
    EXPECT_EQ(metric_value(text, "einsummable_compile_queue_wait_seconds_count"), kFfns + 2)
        << text;
}

TEST(OverloadTest, LongMessagesAreCutAndKeepTheirStatusAndClientTextIsEscapedInTheLog) {
    DaemonProcess daemon;
    ASSERT_EQ(daemon.start({"--metrics_port=0", "--log_level=debug", "--devices=2"}), "");
    auto stub = stub_for(daemon.address());
    ASSERT_TRUE(register_ffn(*stub, "ffn").ok());
    v1::UploadTensorResponse uploaded;
    ASSERT_TRUE(upload(*stub, "ffn", "w1", random_values(kDModel * kDFf, kDModel, 1),
                       {kDModel, kDFf}, 2, &uploaded)
                    .ok());
    ASSERT_TRUE(upload(*stub, "ffn", "w2", random_values(kDFf * kDModel, kDFf, 2), {kDFf, kDModel},
                       2, &uploaded)
                    .ok());
    const std::vector<float> x = random_values(8 * kDModel, kDModel, 80);
    // A 20k-character input name: the message that names it is cut, the code stays.
    {
        v1::ExecuteRequest req = execute_request("ffn", 8, x);
        req.mutable_inputs(0)->set_name(std::string(20000, 'n'));
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        grpc::Status status = stub->Execute(&context, req, &resp);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << status.error_message().substr(0, 200);
        // The name is quoted short (its first bytes and its length); whatever a message
        // holds, it is cut at 1 KiB (call_text_test).
        EXPECT_LE(status.error_message().size(), 1024u);
        EXPECT_THAT(status.error_message(), HasSubstr("(20000 characters)"));
    }
    // An input name with a newline cannot forge a log line.
    {
        v1::ExecuteRequest req = execute_request("ffn", 8, x);
        req.mutable_inputs(0)->set_name(
            "x\n[2099-01-01 00:00:00.000] [einsummabled] [error] FORGED");
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        EXPECT_EQ(stub->Execute(&context, req, &resp).error_code(),
                  grpc::StatusCode::INVALID_ARGUMENT);
    }
    const std::string log = daemon.log();
    EXPECT_THAT(log, HasSubstr("[2099-01-01")); // logged, escaped on the same line
    EXPECT_THAT(log, ::testing::ContainsRegex("Execute model=ffn .*x\\\\n\\[2099-01-01"));
    EXPECT_THAT(log, ::testing::Not(HasSubstr("\n[2099-01-01")));
}

TEST(OverloadTest, TwoAuthorizationHeadersAreRefused) {
    const TempDir token_dir("einsummable_token_");
    {
        std::ofstream out(token_dir.path() + "/token");
        out << "s3cret\n";
    }
    DaemonProcess daemon;
    ASSERT_EQ(daemon.start({"--metrics_port=0", "--token_file=" + token_dir.path() + "/token"}),
              "");
    auto stub = stub_for(daemon.address());
    for (const char* second : {"Bearer s3cret", "Bearer wrong"}) {
        v1::GetServerInfoResponse info;
        grpc::ClientContext context;
        with_deadline(context, 10);
        context.AddMetadata("authorization", "Bearer s3cret");
        context.AddMetadata("authorization", second);
        grpc::Status status = stub->GetServerInfo(&context, {}, &info);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << second;
        EXPECT_THAT(status.error_message(), HasSubstr("exactly one"));
    }
}

TEST(OverloadTest, MetricsForOtherMachinesNeedInsecureAndInsecureIsAWarning) {
    std::string log;
    EXPECT_EQ(DaemonProcess::run_to_exit(
                  {"--metrics_listen=0.0.0.0", absl::StrCat("--metrics_port=", free_port())}, &log),
              2)
        << log;
    EXPECT_THAT(log, HasSubstr("--metrics_listen=0.0.0.0"));
    EXPECT_THAT(log, HasSubstr("--insecure"));

    DaemonProcess daemon;
    ASSERT_EQ(daemon.start({"--listen=0.0.0.0:0", "--insecure", "--metrics_port=0"}), "");
    EXPECT_THAT(daemon.log(), ::testing::ContainsRegex("\\[warning\\] --insecure: serving"));
}

} // namespace
} // namespace einsummable
