// The real einsummabled over gRPC (docs/server.md): the paper's FFN registered with symbolic
// tokens, weights uploaded in chunks, executed at two token counts against the reference;
// every kind of bad request gets its status and the daemon keeps serving; health, metrics,
// bearer tokens, refusing an insecure start, SIGTERM draining an Execute in flight, a backend
// failing beyond recovery (health NOT_SERVING, exit 3), and a restart after kill -9 finding its
// plans in the plan cache directory.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include "absl/strings/str_cat.h"
#include "compiler/ir/spec_execution.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kernels/cpu/block_kernel.h"
#include "kserve/grpc_predict_v2.grpc.pb.h"
#include "proto/graph_def.h"
#include "tests/integration/daemon_client.h"
#include "tests/unit/eventually.h"

namespace einsummable {
namespace {

using namespace integration;
using ::testing::HasSubstr;
using ::testing::Not;

// One daemon for the request tests: 4 virtual devices, the FFN registered as "ffn" with its
// weights uploaded once.
class DaemonTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        daemon_ = new DaemonProcess();
        metrics_port_ = integration::free_port();
        const std::string error = daemon_->start({
            "--devices=4",
            absl::StrCat("--metrics_port=", metrics_port_),
            "--synthesis_iterations=100",
            "--log_level=debug",
        });
        ASSERT_EQ(error, "");
        stub_ = stub_for(daemon_->address()).release();
        w1_ = new std::vector<float>(random_values(kDModel * kDFf, kDModel, 1));
        w2_ = new std::vector<float>(random_values(kDFf * kDModel, kDFf, 2));
    }

    static void TearDownTestSuite() {
        delete stub_;
        daemon_->signal(SIGTERM);
        EXPECT_EQ(daemon_->wait(std::chrono::seconds(30)), 0) << daemon_->log();
        delete daemon_;
        delete w1_;
        delete w2_;
    }

    void SetUp() override {
        ASSERT_NE(stub_, nullptr);
        if (!ffn_ready_) {
            ASSERT_TRUE(register_ffn(*stub_, "ffn").ok());
            v1::UploadTensorResponse resp;
            grpc::Status status = upload(*stub_, "ffn", "w1", *w1_, {kDModel, kDFf}, 5, &resp);
            ASSERT_TRUE(status.ok()) << status.error_message();
            EXPECT_EQ(resp.bytes(), kDModel * kDFf * 4);
            status = upload(*stub_, "ffn", "w2", *w2_, {kDFf, kDModel}, 3, &resp);
            ASSERT_TRUE(status.ok()) << status.error_message();
            ffn_ready_ = true;
        }
    }

    // Execute on "ffn" at `tokens`, checked against the reference.
    void expect_good_execute(int64_t tokens, uint64_t seed, bool* cache_hit = nullptr) {
        const std::vector<float> x = random_values(tokens * kDModel, kDModel, seed);
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        grpc::Status status = stub_->Execute(&context, execute_request("ffn", tokens, x), &resp);
        ASSERT_TRUE(status.ok()) << status.error_message();
        ASSERT_EQ(resp.outputs_size(), 1);
        EXPECT_EQ(resp.outputs(0).name(), "y");
        EXPECT_THAT(resp.outputs(0).tensor().shape(), ::testing::ElementsAre(tokens, kDModel));
        EXPECT_LE(max_relative_error(as_doubles(resp.outputs(0).tensor().data()),
                                     reference_y(tokens, x, *w1_, *w2_)),
                  kTolerance);
        if (cache_hit != nullptr) {
            *cache_hit = resp.cache_hit();
        }
    }

    static DaemonProcess* daemon_;
    static int metrics_port_;
    static v1::Einsummable::Stub* stub_;
    static std::vector<float>* w1_;
    static std::vector<float>* w2_;
    static bool ffn_ready_;
};

DaemonProcess* DaemonTest::daemon_ = nullptr;
int DaemonTest::metrics_port_ = 0;
v1::Einsummable::Stub* DaemonTest::stub_ = nullptr;
std::vector<float>* DaemonTest::w1_ = nullptr;
std::vector<float>* DaemonTest::w2_ = nullptr;
bool DaemonTest::ffn_ready_ = false;

TEST_F(DaemonTest, ServesTheFfnAtTwoTokenCountsFromCachedPlans) {
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 8;
    for (bool expect_hit : {false, true}) {
        v1::CompileResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        grpc::Status status = stub_->Compile(&context, compile, &resp);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(resp.cache_hit(), expect_hit);
        EXPECT_THAT(resp.plan_key(), HasSubstr("tokens:8"));
        EXPECT_THAT(resp.plan_key(), HasSubstr("devices=4"));
        EXPECT_FALSE(resp.strategy().empty());
    }
    bool hit = false;
    expect_good_execute(8, 10, &hit);
    EXPECT_TRUE(hit);
    expect_good_execute(16, 11, &hit); // a new shape: compiled on the miss
    EXPECT_FALSE(hit);
    expect_good_execute(16, 12, &hit);
    EXPECT_TRUE(hit);

    v1::ListModelsResponse models;
    grpc::ClientContext list_context;
    ASSERT_TRUE(stub_->ListModels(&list_context, {}, &models).ok());
    ASSERT_EQ(models.models_size(), 1);
    EXPECT_EQ(models.models(0).plans(), 2);
    EXPECT_THAT(models.models(0).weights_loaded(), ::testing::ElementsAre("w1", "w2"));
    EXPECT_THAT(models.models(0).symbols(), ::testing::ElementsAre("tokens"));

    v1::ExplainRequest explain;
    explain.set_model("ffn");
    (*explain.mutable_dims())["tokens"] = 8;
    v1::ExplainResponse explained;
    grpc::ClientContext explain_context;
    ASSERT_TRUE(stub_->Explain(&explain_context, explain, &explained).ok());
    EXPECT_THAT(explained.text(), HasSubstr("peak memory per device"));
    EXPECT_GT(explained.predicted_cost_bytes(), 0.0);

    v1::GetServerInfoResponse info;
    grpc::ClientContext info_context;
    ASSERT_TRUE(stub_->GetServerInfo(&info_context, {}, &info).ok());
    EXPECT_EQ(info.version(), EINSUMMABLE_VERSION);
    EXPECT_EQ(info.devices(), 4);
    // scripts/gpu-check runs this suite with EINSUMMABLE_DAEMON_ARGS="--backend=cuda
    // --devices=0,0,0,0": the same requests on four virtual devices of one GPU.
    if (cuda_run()) {
        EXPECT_EQ(info.backend(), "cuda");
        EXPECT_THAT(info.backend_reason(), HasSubstr("-> cuda backend on GPUs [0,0,0,0]"));
        EXPECT_FALSE(info.gpus().empty());
        EXPECT_FALSE(info.topology_reason().empty());
    } else {
        EXPECT_EQ(info.backend(), "cpu");
        EXPECT_EQ(info.topology(), "dgx-a100");
        EXPECT_THAT(info.backend_reason(), HasSubstr("--backend=cpu -> cpu backend with 4 virtual "
                                                     "devices"));
        EXPECT_THAT(info.topology_reason(), HasSubstr("CPU backend's default"));
        // The gemm library and the kernel family it runs, in the reply and the start-up log.
        EXPECT_THAT(info.kernels(), HasSubstr(" kernels (CPU: "));
        EXPECT_THAT(daemon_->log(), HasSubstr("kernels: " + info.kernels()));
    }
}

TEST_F(DaemonTest, BadRequestsGetPreciseStatusesAndTheDaemonKeepsServing) {
    struct Case {
        std::string what;
        std::function<grpc::Status()> call;
        grpc::StatusCode code;
        std::string message;
    };
    auto execute = [&](v1::ExecuteRequest req) {
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        return stub_->Execute(&context, req, &resp);
    };
    const std::vector<float> x = random_values(8 * kDModel, kDModel, 20);
    const std::vector<Case> cases = {
        {"malformed GraphDef",
         [&] {
             v1::GraphDef graph = ffn_graph();
             graph.mutable_inputs(0)->mutable_dims(1)->clear_fixed();
             return register_ffn(*stub_, "malformed", graph);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "input tensor 'x' dimension 1 ('d_model')"},
        {"unknown operator",
         [&] {
             v1::GraphDef graph = ffn_graph();
             graph.mutable_operators(1)->set_kind("conv2d");
             return register_ffn(*stub_, "unknown_op", graph);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "conv2d"},
        {"shape mismatch",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             req.mutable_inputs(0)->mutable_tensor()->set_shape(1, 1000);
             return execute(req);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "input 'x' has shape [8, 1024]"},
        {"wrong dtype",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             req.mutable_inputs(0)->mutable_tensor()->set_dtype(v1::BF16);
             return execute(req);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "input 'x' is f32"},
        {"wrong byte count",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             req.mutable_inputs(0)->mutable_tensor()->mutable_data()->resize(100);
             return execute(req);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "input 'x' f32[tokens=8, d_model=1024] takes 32768"},
        {"missing weight",
         [&] {
             grpc::Status status = register_ffn(*stub_, "no_weights");
             if (!status.ok()) {
                 return status;
             }
             return execute(execute_request("no_weights", 8, x));
         },
         grpc::StatusCode::FAILED_PRECONDITION, "weight 'w1' of model 'no_weights'"},
        {"unknown model", [&] { return execute(execute_request("nope", 8, x)); },
         grpc::StatusCode::NOT_FOUND, "model 'nope'"},
        {"tensor over the size limit",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             (*req.mutable_dims())["tokens"] = int64_t{1} << 20; // x: 4 GiB > 1 GiB
             // The input's shape says so too: it binds tokens as well, and must agree.
             req.mutable_inputs(0)->mutable_tensor()->set_shape(0, int64_t{1} << 20);
             return execute(req);
         },
         grpc::StatusCode::RESOURCE_EXHAUSTED, "tensor 'x'"},
        {"weight of the wrong shape",
         [&] {
             v1::UploadTensorResponse resp;
             return upload(*stub_, "ffn", "w1", random_values(16, 4, 3), {4, 4}, 1, &resp);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "weight 'w1' has shape [1024, 4096]"},
        {"bad options",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             req.mutable_options()->set_planner("magic");
             return execute(req);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "options.planner: 'magic'"},
        {"too many devices",
         [&] {
             v1::ExecuteRequest req = execute_request("ffn", 8, x);
             req.mutable_options()->set_devices(64);
             return execute(req);
         },
         grpc::StatusCode::INVALID_ARGUMENT, "options.devices: 64"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.what);
        grpc::Status status = c.call();
        EXPECT_EQ(status.error_code(), c.code) << status.error_message();
        EXPECT_THAT(status.error_message(), HasSubstr(c.message));
        expect_good_execute(8, 21);
    }
}

TEST_F(DaemonTest, HalfFinishedUploadsNeverReplaceAGoodWeight) {
    // Too few bytes: the stream ends, the weight is not replaced.
    v1::UploadTensorResponse resp;
    grpc::Status status =
        upload(*stub_, "ffn", "w1", random_values(1024, 4, 5), {kDModel, kDFf}, 2, &resp);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(status.error_message(), HasSubstr("weight 'w1' takes 16777216 bytes"));
    // A client that gives up half way.
    {
        grpc::ClientContext context;
        with_deadline(context);
        std::unique_ptr<grpc::ClientWriter<v1::UploadTensorChunk>> writer =
            stub_->UploadTensor(&context, &resp);
        v1::UploadTensorChunk chunk;
        chunk.set_model("ffn");
        chunk.set_name("w2");
        chunk.set_dtype(v1::F32);
        chunk.add_shape(kDFf);
        chunk.add_shape(kDModel);
        chunk.set_data(std::string(1 << 20, '\x7f'));
        writer->Write(chunk);
        context.TryCancel();
        EXPECT_FALSE(writer->Finish().ok());
    }
    expect_good_execute(8, 30); // still the original weights
}

TEST_F(DaemonTest, HealthCheckIsServing) {
    auto health = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(daemon_->address(), grpc::InsecureChannelCredentials()));
    grpc::health::v1::HealthCheckResponse resp;
    grpc::ClientContext context;
    with_deadline(context, 10);
    grpc::Status status = health->Check(&context, {}, &resp);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
}

// The services server reflection lists at `address`, the call carrying `authorization` unless
// it is empty; the status in `status`.
std::vector<std::string> reflected_services(const std::string& address,
                                            const std::string& authorization,
                                            grpc::Status* status) {
    using namespace grpc::reflection::v1alpha;
    auto reflection =
        ServerReflection::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    grpc::ClientContext context;
    with_deadline(context, 10);
    if (!authorization.empty()) {
        context.AddMetadata("authorization", authorization);
    }
    auto stream = reflection->ServerReflectionInfo(&context);
    ServerReflectionRequest req;
    req.set_list_services("*");
    stream->Write(req);
    stream->WritesDone();
    std::vector<std::string> services;
    ServerReflectionResponse resp;
    while (stream->Read(&resp)) {
        for (const ServiceResponse& service : resp.list_services_response().service()) {
            services.push_back(service.name());
        }
    }
    *status = stream->Finish();
    return services;
}

TEST_F(DaemonTest, ReflectionListsTheServices) {
    grpc::Status status;
    const std::vector<std::string> services = reflected_services(daemon_->address(), "", &status);
    EXPECT_TRUE(status.ok()) << status.error_message();
    EXPECT_THAT(services,
                ::testing::IsSupersetOf({"einsummable.v1.Einsummable", "grpc.health.v1.Health"}));
}

TEST_F(DaemonTest, MetricsEndpointServesRequestCounters) {
    expect_good_execute(8, 40);
    const std::string text = metrics_text(metrics_port_);
    EXPECT_THAT(text, HasSubstr("einsummable_requests_total{"));
    EXPECT_THAT(text, HasSubstr("method=\"Execute\""));
    EXPECT_THAT(text, HasSubstr("code=\"OK\""));
    EXPECT_THAT(text, HasSubstr("einsummable_request_duration_seconds_bucket"));
    EXPECT_THAT(text, HasSubstr("einsummable_execute_duration_seconds_count{model=\"ffn\"}"));
    EXPECT_THAT(text, HasSubstr("einsummable_plan_cache_entries"));
    EXPECT_THAT(text, HasSubstr("einsummable_bytes_moved_total{"));
    EXPECT_THAT(text, HasSubstr("einsummable_device_memory_bytes{device=\"3\"}"));
    EXPECT_THAT(text, HasSubstr("einsummable_inflight_requests"));
    // No capacity is known for the CPU backend's default topology, so none is exported.
    EXPECT_THAT(text, Not(HasSubstr("einsummable_device_memory_capacity_bytes{")));
}

// With a capacity (here --device_memory), every device exports it next to the bytes in use, so
// dashboards and alerts (deploy/prometheus) can compare the two.
TEST(DaemonLifecycleTest, DeviceMemoryCapacityIsExportedPerDevice) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    DaemonProcess daemon;
    const int metrics_port = integration::free_port();
    v1::CompileResponse compiled;
    auto stub = ready_daemon(
        daemon, {absl::StrCat("--metrics_port=", metrics_port), "--device_memory=64MiB"}, w1, w2,
        &compiled);
    ASSERT_NE(stub, nullptr);
    const std::string text = metrics_text(metrics_port);
    for (int device : {0, 1}) { // ready_daemon's --devices=2
        EXPECT_THAT(text,
                    HasSubstr(absl::StrCat("einsummable_device_memory_capacity_bytes{device=\"",
                                           device, "\"} 67108864\n")));
        EXPECT_THAT(text,
                    HasSubstr(absl::StrCat("einsummable_device_memory_bytes{device=\"", device)));
    }
    EXPECT_THAT(text, Not(HasSubstr("einsummable_device_memory_capacity_bytes{device=\"2\"}")));
    v1::GetServerInfoResponse info;
    grpc::ClientContext context;
    with_deadline(context, 10);
    ASSERT_TRUE(stub->GetServerInfo(&context, {}, &info).ok());
    EXPECT_THAT(info.device_memory_capacity_bytes(), ::testing::ElementsAre(67108864, 67108864));
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
}

// A Compile whose plan does not fit the GPU is RESOURCE_EXHAUSTED naming the device and the
// bytes, frees what it took, and the daemon serves the next requests: an execute on a plan it
// had, and a new compile. The CPU backend has no device capacity of its own to exhaust, so this
// runs only on CUDA.
TEST(DaemonLifecycleTest, APlanLargerThanTheGpuIsResourceExhaustedAndTheDaemonServesOn) {
    if (!cuda_run()) {
        GTEST_SKIP() << "needs --backend=cuda (scripts/gpu-check runs it on a GPU)";
    }
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    DaemonProcess daemon;
    v1::CompileResponse compiled;
    // Tensors up to 1 TiB pass the server's own limit, so the GPU's memory is what refuses.
    auto stub = ready_daemon(daemon, {"--metrics_port=0", "--max_tensor_bytes=1099511627776"}, w1,
                             w2, &compiled);
    ASSERT_NE(stub, nullptr);
    v1::CompileRequest huge;
    huge.set_model("ffn");
    (*huge.mutable_dims())["tokens"] = int64_t{1} << 26; // x 256 GiB, h 1 TiB in f32
    v1::CompileResponse refused;
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    grpc::Status status = stub->Compile(&context, huge, &refused);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("device 0 (GPU 0"));
    EXPECT_THAT(status.error_message(), HasSubstr("bytes are free"));
    for (int64_t tokens : {int64_t{4}, int64_t{8}}) {
        const std::vector<float> x = random_values(tokens * kDModel, kDModel, 30 + tokens);
        v1::ExecuteResponse resp;
        grpc::ClientContext execute_context;
        with_deadline(execute_context);
        status = stub->Execute(&execute_context, execute_request("ffn", tokens, x), &resp);
        ASSERT_TRUE(status.ok()) << "tokens=" << tokens << ": " << status.error_message();
        ASSERT_EQ(resp.outputs_size(), 1);
        EXPECT_LE(max_relative_error(as_doubles(resp.outputs(0).tensor().data()),
                                     reference_y(tokens, x, w1, w2)),
                  1e-4)
            << "tokens=" << tokens;
    }
    daemon.signal(SIGTERM);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
}

TEST(DaemonLifecycleTest, SigtermDrainsAnExecuteInFlightAndExitsZero) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    DaemonProcess daemon;
    const int metrics_port = integration::free_port();
    v1::CompileResponse compiled;
    auto stub = ready_daemon(daemon,
                             {absl::StrCat("--metrics_port=", metrics_port),
                              "--execute_delay_ms_for_testing=1500", "--max_concurrent_requests=1"},
                             w1, w2, &compiled);
    ASSERT_NE(stub, nullptr);

    const std::vector<float> x = random_values(4 * kDModel, kDModel, 50);
    grpc::Status execute_status;
    v1::ExecuteResponse executed;
    std::thread in_flight([&] {
        grpc::ClientContext context;
        with_deadline(context);
        execute_status = stub->Execute(&context, execute_request("ffn", 4, x), &executed);
    });
    ASSERT_TRUE(wait_for_metric(metrics_port, "einsummable_inflight_requests 1"));

    // Over --max_concurrent_requests while the Execute runs (server info, a probe, is never
    // refused: overload_test).
    {
        v1::CompileRequest compile;
        compile.set_model("ffn");
        (*compile.mutable_dims())["tokens"] = 4;
        v1::CompileResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 10);
        EXPECT_EQ(stub->Compile(&context, compile, &resp).error_code(),
                  grpc::StatusCode::RESOURCE_EXHAUSTED);
    }

    daemon.signal(SIGTERM);
    // Draining: no new calls (each on a fresh channel, so no connection is reused). The daemon
    // stops accepting them just after it logs the signal; how soon after the kill depends on the
    // machine, so the test waits for the line, then for a refusal, each for up to 30 s, rather
    // than a fixed time after which a busy machine might still be accepting.
    EXPECT_TRUE(testing::eventually([&] {
        return daemon.log().find("SIGTERM: draining calls in flight") != std::string::npos;
    })) << daemon.log();
    EXPECT_TRUE(testing::eventually([&] {
        auto fresh = stub_for(daemon.address());
        v1::GetServerInfoResponse info;
        grpc::ClientContext context;
        with_deadline(context, 2);
        return !fresh->GetServerInfo(&context, {}, &info).ok();
    })) << "a new call was still accepted 30 s after SIGTERM";
    in_flight.join();
    ASSERT_TRUE(execute_status.ok()) << execute_status.error_message();
    ASSERT_EQ(executed.outputs_size(), 1);
    EXPECT_LE(max_relative_error(as_doubles(executed.outputs(0).tensor().data()),
                                 reference_y(4, x, w1, w2)),
              kTolerance);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0) << daemon.log();
    EXPECT_THAT(daemon.log(), HasSubstr("SIGTERM"));
}

// A backend that fails beyond recovery (a sticky CUDA error, docs/cuda.md "Errors"; injected here
// by --fail_backend_after_runs_for_testing on whichever backend runs): the Execute that hits it
// fails UNAVAILABLE saying so, and by the time it returns gRPC health is NOT_SERVING and KServe
// is not ready; later work is refused UNAVAILABLE, and the daemon exits 3 for its supervisor
// (systemd's Restart=on-failure) to start it again.
TEST(DaemonLifecycleTest, AnUnrecoverableBackendErrorStopsServingAndExitsThree) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    DaemonProcess daemon;
    v1::CompileResponse compiled;
    auto stub = ready_daemon(
        daemon, {"--metrics_port=0", "--fail_backend_after_runs_for_testing=1"}, w1, w2, &compiled);
    ASSERT_NE(stub, nullptr);
    auto channel = grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials());
    auto health = grpc::health::v1::Health::NewStub(channel);
    auto kserve = inference::GRPCInferenceService::NewStub(channel);
    auto health_status = [&] {
        grpc::health::v1::HealthCheckResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 5);
        const grpc::Status status = health->Check(&context, {}, &resp);
        EXPECT_TRUE(status.ok()) << "health: " << status.error_message();
        return resp.status();
    };
    auto server_ready = [&] {
        inference::ServerReadyResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 5);
        const grpc::Status status = kserve->ServerReady(&context, {}, &resp);
        EXPECT_TRUE(status.ok()) << "ServerReady: " << status.error_message();
        return resp.ready();
    };
    auto execute = [&](v1::ExecuteResponse* resp) {
        const std::vector<float> x = random_values(4 * kDModel, kDModel, 60);
        grpc::ClientContext context;
        with_deadline(context);
        return stub->Execute(&context, execute_request("ffn", 4, x), resp);
    };
    EXPECT_EQ(health_status(), grpc::health::v1::HealthCheckResponse::SERVING);
    EXPECT_TRUE(server_ready());
    v1::ExecuteResponse first;
    grpc::Status status = execute(&first);
    ASSERT_TRUE(status.ok()) << status.error_message();

    v1::ExecuteResponse failed;
    status = execute(&failed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("cudaErrorIllegalAddress"));
    EXPECT_THAT(status.error_message(), HasSubstr("cannot run again in this process"));
    EXPECT_THAT(status.error_message(), HasSubstr("restart"));
    // Out of service before the failing request's reply left; the daemon still answers probes
    // for a moment (2 s) before it stops accepting calls.
    EXPECT_EQ(health_status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    EXPECT_FALSE(server_ready());
    v1::ExecuteResponse later;
    EXPECT_EQ(execute(&later).error_code(), grpc::StatusCode::UNAVAILABLE);

    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 3) << daemon.log();
    EXPECT_THAT(daemon.log(), HasSubstr("failed beyond recovery"));
}

TEST(DaemonLifecycleTest, RestartAfterKillFindsItsPlansInTheCacheDirectory) {
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    const integration::TempDir plans("einsummable_plans_");
    const std::string cache_dir = plans.path();
    v1::CompileResponse first_compile;
    {
        DaemonProcess first;
        auto stub = ready_daemon(first, {"--metrics_port=0", "--plan_cache_dir=" + cache_dir}, w1,
                                 w2, &first_compile);
        ASSERT_NE(stub, nullptr);
        EXPECT_FALSE(first_compile.cache_hit());
        first.signal(SIGKILL);
        EXPECT_EQ(first.wait(std::chrono::seconds(10)), -SIGKILL);
    }
    DaemonProcess second;
    const int metrics_port = integration::free_port();
    v1::CompileResponse second_compile;
    auto stub = ready_daemon(
        second, {absl::StrCat("--metrics_port=", metrics_port), "--plan_cache_dir=" + cache_dir},
        w1, w2, &second_compile);
    ASSERT_NE(stub, nullptr);
    EXPECT_TRUE(second_compile.cache_hit());
    EXPECT_EQ(second_compile.plan_key(), first_compile.plan_key());
    EXPECT_THAT(metrics_text(metrics_port),
                HasSubstr("einsummable_compile_duration_seconds_count 0"));
    EXPECT_THAT(second.log(), ::testing::Not(HasSubstr("compiling plan")));
    // The loaded plan runs.
    const std::vector<float> x = random_values(4 * kDModel, kDModel, 60);
    v1::ExecuteResponse executed;
    grpc::ClientContext context;
    with_deadline(context);
    grpc::Status status = stub->Execute(&context, execute_request("ffn", 4, x), &executed);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_LE(max_relative_error(as_doubles(executed.outputs(0).tensor().data()),
                                 reference_y(4, x, w1, w2)),
              kTolerance);
    second.signal(SIGTERM);
    EXPECT_EQ(second.wait(std::chrono::seconds(30)), 0);
}

TEST(DaemonLifecycleTest, ABearerTokenIsRequiredWhenConfigured) {
    const integration::TempDir token_dir("einsummable_token_");
    const std::string dir = token_dir.path();
    {
        std::ofstream out(dir + "/token");
        out << "s3cret\n";
    }
    DaemonProcess daemon;
    ASSERT_EQ(
        daemon.start({"--metrics_port=0", "--log_level=debug", "--token_file=" + dir + "/token"}),
        "");
    auto stub = stub_for(daemon.address());
    for (const char* header : {"", "Bearer wrong", "s3cret", "Bearer s3cret"}) {
        v1::GetServerInfoResponse info;
        grpc::ClientContext context;
        with_deadline(context, 10);
        if (*header != '\0') {
            context.AddMetadata("authorization", header);
        }
        grpc::Status status = stub->GetServerInfo(&context, {}, &info);
        if (std::string(header) == "Bearer s3cret") {
            EXPECT_TRUE(status.ok()) << status.error_message();
        } else {
            EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << header;
        }
        // Server reflection asks for the token like every other service: otherwise it hands its
        // descriptors, the whole API, to anyone who can connect.
        grpc::Status reflected;
        const std::vector<std::string> services =
            reflected_services(daemon.address(), header, &reflected);
        if (std::string(header) == "Bearer s3cret") {
            EXPECT_TRUE(reflected.ok()) << reflected.error_message();
            EXPECT_THAT(services, ::testing::Contains("einsummable.v1.Einsummable"));
        } else {
            EXPECT_EQ(reflected.error_code(), grpc::StatusCode::UNAUTHENTICATED)
                << header << ": " << reflected.error_message();
            EXPECT_THAT(services, ::testing::IsEmpty()) << header;
        }
    }
    {
        // The message says what is wrong, as for the Einsummable service.
        grpc::Status reflected;
        reflected_services(daemon.address(), "", &reflected);
        EXPECT_EQ(reflected.error_message(), "missing `authorization: Bearer <token>` metadata");
    }
    // Health stays open to probes, which carry no token.
    {
        auto health = grpc::health::v1::Health::NewStub(
            grpc::CreateChannel(daemon.address(), grpc::InsecureChannelCredentials()));
        grpc::health::v1::HealthCheckResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 10);
        grpc::Status status = health->Check(&context, {}, &resp);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
    }
    daemon.signal(SIGINT);
    EXPECT_EQ(daemon.wait(std::chrono::seconds(30)), 0);
}

TEST(DaemonLifecycleTest, RefusesToStartWithABadConfiguration) {
    struct Case {
        std::vector<std::string> flags;
        std::string message;
    };
    const std::vector<Case> cases = {
        {{"--listen=0.0.0.0:0"}, "--insecure"},
        {{"--backend=cpu", "--devices=0,0"}, "a list of GPUs is for the CUDA backend"},
        {{"--backend=tpu"}, "--backend=tpu: expected auto, cpu or cuda"},
        {{"--devices=16", "--topology=dgx-a100"}, "--devices=16"},
        {{"--no_such_flag=1"}, "no_such_flag"},
        {{"--max_concurrent_uploads=0"}, "--max_concurrent_uploads=0"},
        {{"--upload_idle_timeout_seconds=0"}, "--upload_idle_timeout_seconds=0"},
        {{"--compile_threads=-1"}, "--compile_threads=-1"},
    };
    for (const Case& c : cases) {
        std::vector<std::string> flags = c.flags;
        flags.push_back("--metrics_port=0");
        std::string log;
        EXPECT_EQ(DaemonProcess::run_to_exit(flags, &log), 2) << log;
        EXPECT_THAT(log, HasSubstr(c.message));
    }
    // --backend=cuda where the CUDA backend cannot be had (here: its plugin is missing, or the
    // build has none) refuses to start and says so, on any machine.
    setenv("EINSUMMABLE_CUDA_PLUGIN", "/nonexistent/libeinsummable_cuda.so", 1);
    std::string log;
    EXPECT_EQ(DaemonProcess::run_to_exit({"--backend=cuda", "--metrics_port=0"}, &log), 2) << log;
    unsetenv("EINSUMMABLE_CUDA_PLUGIN");
    EXPECT_THAT(log, HasSubstr("--backend=cuda: "));
    EXPECT_THAT(log, HasSubstr("CUDA backend"));
}

} // namespace
} // namespace einsummable
