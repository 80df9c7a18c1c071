// Against the real daemon: what a hostile RegisterModel or Compile may ask for is
// bounded, and refused with a clear error rather than a long compile or an overlong message: a
// 20,000-character name (INVALID_ARGUMENT, not gRPC's RESOURCE_EXHAUSTED for metadata), a
// newline in a name (refused, no forged log line), too many sequence ends
// (--max_sequence_ends), operators x devices over --max_operator_devices, an einsum given two
// outputs (the error names the einsum), an input whose fixed size is over --max_tensor_bytes;
// and a string field that is not UTF-8 (INVALID_ARGUMENT naming the field, not gRPC's
// INTERNAL with no message). After each the daemon still serves the FFN. Also: registrations
// past --max_models or --max_model_bytes are refused naming the limit and what is
// registered, the models already there keep serving, and unregistering makes room.
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "einsummable/v1/service.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "kserve/grpc_predict_v2.pb.h"
#include "tests/integration/daemon_client.h"
#include "tests/integration/daemon_process.h"

namespace einsummable {
namespace {

using namespace integration;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kDevices = 8;
// The FFN (3 operators) at 8 devices is 24: one more operator is over.
constexpr int kMaxOperatorDevices = 3 * kDevices;

// q, k, v [ends, 1, 2] f32 and an attention over `ends` one-token sequences: 0.5 MB of inputs
// at 65,536 ends, whose plan took 26 s before split_index became near-linear.
v1::GraphDef packed_attention(int64_t ends) {
    v1::GraphDef graph;
    for (const char* name : {"q", "k", "v"}) {
        v1::TensorDesc* input = graph.add_inputs();
        input->set_name(name);
        input->set_dtype(v1::F32);
        const std::pair<const char*, int64_t> dims[] = {{"sequence", ends}, {"heads", 1}, {"d", 2}};
        for (const auto& [dim_name, size] : dims) {
            v1::Dimension* dim = input->add_dims();
            dim->set_name(dim_name);
            dim->set_fixed(size);
        }
    }
    v1::OperatorDef* op = graph.add_operators();
    op->set_name("attn");
    op->set_kind("attention");
    for (const char* name : {"q", "k", "v"}) {
        op->add_inputs(name);
    }
    v1::IntList* list = (*op->mutable_attributes())["sequence_ends"].mutable_int_list();
    for (int64_t end = 1; end <= ends; ++end) {
        list->add_values(end);
    }
    graph.add_saved("attn");
    return graph;
}

grpc::Status compile(v1::Einsummable::Stub& stub, const std::string& model,
                     const std::map<std::string, int64_t>& dims = {}) {
    v1::CompileRequest req;
    req.set_model(model);
    for (const auto& [symbol, size] : dims) {
        (*req.mutable_dims())[symbol] = size;
    }
    v1::CompileResponse resp;
    grpc::ClientContext context;
    with_deadline(context, 120);
    return stub.Compile(&context, req, &resp);
}

// Time bounds stretch under ASan (scripts/test runs these tests in a Debug ASan build too).
#ifdef __SANITIZE_ADDRESS__
constexpr double kSlowdown = 8.0;
#else
constexpr double kSlowdown = 1.0;
#endif

double seconds_since(std::chrono::steady_clock::time_point start) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

class LimitsTest : public ::testing::Test {
protected:
    static void SetUpTestSuite() {
        daemon_ = new DaemonProcess();
        const std::string error =
            daemon_->start({absl::StrCat("--devices=", kDevices), "--synthesis_iterations=100",
                            absl::StrCat("--max_operator_devices=", kMaxOperatorDevices)});
        ASSERT_EQ(error, "");
        stub_ = stub_for(daemon_->address()).release();
        w1_ = new std::vector<float>(random_values(kDModel * kDFf, kDModel, 1));
        w2_ = new std::vector<float>(random_values(kDFf * kDModel, kDFf, 2));
        ASSERT_TRUE(register_ffn(*stub_, "ffn").ok());
        v1::UploadTensorResponse uploaded;
        ASSERT_TRUE(upload(*stub_, "ffn", "w1", *w1_, {kDModel, kDFf}, 2, &uploaded).ok());
        ASSERT_TRUE(upload(*stub_, "ffn", "w2", *w2_, {kDFf, kDModel}, 2, &uploaded).ok());
    }

    static void TearDownTestSuite() {
        delete stub_;
        delete w1_;
        delete w2_;
        delete daemon_;
        stub_ = nullptr;
        daemon_ = nullptr;
    }

    void SetUp() override {
        if (stub_ == nullptr) {
            GTEST_SKIP() << "the daemon did not start";
        }
    }

    void expect_good_execute(uint64_t seed) {
        constexpr int64_t kTokens = 8;
        const std::vector<float> x = random_values(kTokens * kDModel, kDModel, seed);
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 120);
        grpc::Status status = stub_->Execute(&context, execute_request("ffn", kTokens, x), &resp);
        ASSERT_TRUE(status.ok()) << status.error_message();
        ASSERT_EQ(resp.outputs_size(), 1);
        EXPECT_LE(max_relative_error(as_doubles(resp.outputs(0).tensor().data()),
                                     reference_y(kTokens, x, *w1_, *w2_)),
                  kTolerance);
    }

    static DaemonProcess* daemon_;
    static v1::Einsummable::Stub* stub_;
    static std::vector<float>* w1_;
    static std::vector<float>* w2_;
};

DaemonProcess* LimitsTest::daemon_ = nullptr;
v1::Einsummable::Stub* LimitsTest::stub_ = nullptr;
std::vector<float>* LimitsTest::w1_ = nullptr;
std::vector<float>* LimitsTest::w2_ = nullptr;

TEST_F(LimitsTest, ALongTensorNameIsInvalidArgumentNotOverlongMetadata) {
    v1::GraphDef graph = ffn_graph();
    const std::string name(20000, 'x');
    graph.mutable_inputs(0)->set_name(name);
    graph.mutable_operators(0)->set_inputs(0, name);
    grpc::Status status = register_graph(*stub_, "long_name", graph, {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(),
                AllOf(HasSubstr("input tensor name 'xxxx"), HasSubstr("(20000 characters)")));
    EXPECT_LT(status.error_message().size(), 400u);
    expect_good_execute(10);
}

TEST_F(LimitsTest, ANewlineInANameIsRefusedAndForgesNoLogLine) {
    v1::GraphDef graph = ffn_graph();
    const std::string name = "h\n[forged] E RegisterModel model=ffn: all weights deleted";
    graph.mutable_operators(0)->set_name(name);
    grpc::Status status = register_graph(*stub_, "newline", graph, {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("'h\\n[forged] E"));
    EXPECT_THAT(status.error_message(), HasSubstr("contains control character \\x0a"));
    // A newline in the model name or a weight name, too.
    status = register_graph(*stub_, "ffn\n[forged] model", ffn_graph(), {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    status = register_graph(*stub_, "weights", ffn_graph(), {"w1", "w2\n[forged] weight"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    // Execute's input names are checked against the model's; the error shows the name escaped.
    v1::ExecuteRequest execute = execute_request("ffn", 8, random_values(8 * kDModel, kDModel, 3));
    execute.mutable_inputs(0)->set_name("x\n[forged] input");
    v1::ExecuteResponse executed;
    grpc::ClientContext context;
    with_deadline(context);
    status = stub_->Execute(&context, execute, &executed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr("'x\\n[forged] input' is not an input"));
    expect_good_execute(11);
    std::istringstream log(daemon_->log());
    for (std::string line; std::getline(log, line);) {
        EXPECT_FALSE(absl::StartsWith(line, "[forged]")) << "forged log line: " << line;
    }
}

TEST_F(LimitsTest, TooManySequenceEndsAreRefusedQuickly) {
    // One over the default --max_sequence_ends, then a million.
    for (int64_t ends : {int64_t{65537}, int64_t{1} << 20}) {
        const v1::GraphDef graph = packed_attention(ends);
        const auto start = std::chrono::steady_clock::now();
        grpc::Status status = register_graph(*stub_, "packed_over", graph);
        // The daemon checks the count before building anything; the bound leaves the rest of
        // the two seconds to sending a few MB over loopback on a loaded machine.
        EXPECT_LT(seconds_since(start), 2.0 * kSlowdown) << ends << " ends";
        EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
            << status.error_message();
        EXPECT_THAT(status.error_message(),
                    HasSubstr(absl::StrCat("operator 'attn': sequence_ends has ", ends,
                                           " entries; the server accepts at most 65536 "
                                           "(--max_sequence_ends)")));
    }
    expect_good_execute(12);
}

TEST_F(LimitsTest, TheMostSequenceEndsRegisterAndCompileQuickly) {
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = register_graph(*stub_, "packed", packed_attention(65536));
    ASSERT_TRUE(status.ok()) << status.error_message();
    status = compile(*stub_, "packed");
    ASSERT_TRUE(status.ok()) << status.error_message();
    // About a second here (the synthesis dominates); the quadratic split took 26 s at 8 devices.
    EXPECT_LT(seconds_since(start), 15.0 * kSlowdown);
    expect_good_execute(13);
}

TEST_F(LimitsTest, OperatorsTimesDevicesOverTheLimitIsResourceExhausted) {
    v1::GraphDef graph = ffn_graph();
    v1::OperatorDef* relu = graph.add_operators();
    relu->set_name("z");
    relu->set_kind("einsum");
    (*relu->mutable_attributes())["equation"].set_string_value("ij->ij");
    (*relu->mutable_attributes())["join"].set_string_value("relu");
    relu->add_inputs("y");
    graph.set_saved(0, "z");
    ASSERT_TRUE(register_graph(*stub_, "ffn_relu", graph, {"w1", "w2"}).ok());
    const auto start = std::chrono::steady_clock::now();
    grpc::Status status = compile(*stub_, "ffn_relu", {{"tokens", 8}});
    EXPECT_LT(seconds_since(start), 2.0 * kSlowdown) << "refused before compiling";
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr("4 operators"), HasSubstr("8 devices"),
                                              HasSubstr(absl::StrCat(kMaxOperatorDevices)),
                                              HasSubstr("--max_operator_devices")));
    expect_good_execute(14);
}

TEST_F(LimitsTest, AnEinsumGivenTwoOutputsIsTheOneNamed) {
    v1::GraphDef graph = ffn_graph();
    // The second output is the next operator's name: once reported against that operator.
    graph.mutable_operators(0)->add_outputs("h");
    graph.mutable_operators(0)->add_outputs("a");
    grpc::Status status = register_graph(*stub_, "two_outputs", graph, {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr("node 'h' (einsum"),
                                              HasSubstr("names 2 outputs, the operator has 1")));
    // Outputs of new names, the next operator still reading 'h': the error names the einsum,
    // not that operator's unknown input.
    graph = ffn_graph();
    graph.mutable_operators(0)->add_outputs("h1");
    graph.mutable_operators(0)->add_outputs("h2");
    status = register_graph(*stub_, "two_new_outputs", graph, {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), AllOf(HasSubstr("node 'h' (einsum"),
                                              HasSubstr("names 2 outputs, the operator has 1")));
    expect_good_execute(15);
}

// Calls `method` with `request` as raw bytes, as a client of any protobuf library (or none)
// may send them: the C++ stubs cannot send a string field that is not UTF-8.
grpc::Status raw_call(const std::string& address, const std::string& method,
                      const std::string& request) {
    std::shared_ptr<grpc::Channel> channel =
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    grpc::Slice slice(request);
    const grpc::ByteBuffer buffer(&slice, 1);
    grpc::ByteBuffer response;
    grpc::ClientContext context;
    with_deadline(context, 60);
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel.get(),
        grpc::internal::RpcMethod(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC), &context,
        buffer, &response);
}

// `message` serialized, its one "QQQ" (inside a string field) replaced by `bytes`, three bytes
// too, so that every length on the wire stays right.
std::string serialized_with(const google::protobuf::Message& message, const std::string& bytes) {
    std::string wire = message.SerializeAsString();
    EXPECT_EQ(bytes.size(), 3u);
    const size_t at = wire.find("QQQ");
    EXPECT_NE(at, std::string::npos);
    EXPECT_EQ(wire.find("QQQ", at + 1), std::string::npos);
    return wire.replace(at, 3, bytes);
}

// A string field that is not UTF-8 must not fail in gRPC's generated handler, before the method
// runs, as INTERNAL with an empty message.
TEST_F(LimitsTest, AStringFieldThatIsNotUtf8IsInvalidArgumentNamingTheField) {
    const std::string address = daemon_->address();
    struct Case {
        std::string method;
        std::string request;
        std::string message;
    };
    v1::RegisterModelRequest register_model;
    register_model.set_model("utf8_equation");
    *register_model.mutable_graph() = ffn_graph();
    (*register_model.mutable_graph()->mutable_operators(0)->mutable_attributes())["equation"]
        .set_string_value("ij,jk->iQQQk");
    v1::CompileRequest compile_request;
    compile_request.set_model("ffnQQQ");
    inference::ModelInferRequest infer;
    infer.set_model_name("ffn");
    infer.add_inputs()->set_name("xQQQ");
    const Case cases[] = {
        {"/einsummable.v1.Einsummable/RegisterModel",
         serialized_with(register_model, "\xce"
                                         "AB"),
         "field graph.operators[0].attributes['equation'].string_value of "
         "einsummable.v1.RegisterModelRequest is not valid UTF-8"},
        {"/einsummable.v1.Einsummable/Compile", serialized_with(compile_request, "\xff\xff\xff"),
         "field model of einsummable.v1.CompileRequest is not valid UTF-8"},
        {"/inference.GRPCInferenceService/ModelInfer", serialized_with(infer, "\xed\xa0\x80"),
         "field inputs[0].name of inference.ModelInferRequest is not valid UTF-8"},
        {"/einsummable.v1.Einsummable/Execute", std::string("\x0a\xff\xff\xff\xff"),
         "the request is not a valid einsummable.v1.ExecuteRequest"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.method);
        const grpc::Status status = raw_call(address, c.method, c.request);
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << status.error_message();
        EXPECT_THAT(status.error_message(), HasSubstr(c.message));
    }
    // Generate streams its replies and parses its request as strictly.
    {
        v1::GenerateRequest generate;
        generate.set_model("ffnQQQ");
        generate.add_prompt_ids(1);
        std::shared_ptr<grpc::Channel> channel =
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
        const std::string wire = serialized_with(generate, "\xff\xfe\xfd");
        grpc::Slice slice(wire);
        const grpc::ByteBuffer buffer(&slice, 1);
        grpc::ClientContext context;
        with_deadline(context, 60);
        std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
            grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
                channel.get(),
                grpc::internal::RpcMethod("/einsummable.v1.Einsummable/Generate",
                                          grpc::internal::RpcMethod::SERVER_STREAMING),
                &context, buffer));
        grpc::ByteBuffer reply;
        EXPECT_FALSE(reader->Read(&reply));
        const grpc::Status status = reader->Finish();
        EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
            << status.error_message();
        EXPECT_THAT(status.error_message(),
                    HasSubstr("field model of einsummable.v1.GenerateRequest is not valid UTF-8"));
    }
    // The same path with a request that parses: the method still runs.
    v1::ListModelsRequest list;
    EXPECT_TRUE(
        raw_call(address, "/einsummable.v1.Einsummable/ListModels", list.SerializeAsString()).ok());
    compile_request.set_model("nope");
    const grpc::Status unknown = raw_call(address, "/einsummable.v1.Einsummable/Compile",
                                          compile_request.SerializeAsString());
    EXPECT_EQ(unknown.error_code(), grpc::StatusCode::NOT_FOUND) << unknown.error_message();
    expect_good_execute(17);
}

TEST_F(LimitsTest, AFixedInputOverTheTensorLimitIsRefusedAtRegistration) {
    v1::GraphDef graph = ffn_graph();
    // x [2^20, 1024] f32: 4 GiB, over the default --max_tensor_bytes (1 GiB).
    graph.mutable_inputs(0)->mutable_dims(0)->set_fixed(int64_t{1} << 20);
    grpc::Status status = register_graph(*stub_, "big_input", graph, {"w1", "w2"});
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_THAT(status.error_message(),
                HasSubstr("input 'x' takes 4294967296 bytes; the server accepts tensors of at "
                          "most 1073741824 bytes (--max_tensor_bytes)"));
    expect_good_execute(16);
}

// The value of the unlabelled sample `name` in the metrics text; -1 when absent.
double metric_value(int metrics_port, const std::string& name) {
    std::istringstream lines(metrics_text(metrics_port));
    for (std::string line; std::getline(lines, line);) {
        if (absl::StartsWith(line, name + " ")) {
            return std::stod(line.substr(name.size() + 1));
        }
    }
    return -1;
}

// Without limits, 2,000 registrations of 14 MB graphs would all be kept. With --max_models=3 and
// room for two FFNs with their weights (32 MiB each): a third FFN is refused for its bytes, a third
// model without weights fits, a fourth is refused for the count; the first still executes with
// the weights it was given, and unregistering one makes room for another.
TEST(ModelLimitsTest, RegistrationsPastTheLimitsAreRefusedAndNothingAcceptedIsLost) {
    const int64_t graph_bytes = static_cast<int64_t>(ffn_graph().ByteSizeLong());
    const int64_t ffn_bytes = graph_bytes + 2 * kDModel * kDFf * 4;
    const int64_t max_bytes = int64_t{80} << 20;
    const std::vector<float> w1 = random_values(kDModel * kDFf, kDModel, 1);
    const std::vector<float> w2 = random_values(kDFf * kDModel, kDFf, 2);
    const int metrics_port = free_port();
    DaemonProcess daemon;
    v1::CompileResponse compiled;
    auto stub = ready_daemon(daemon,
                             {absl::StrCat("--metrics_port=", metrics_port), "--max_models=3",
                              absl::StrCat("--max_model_bytes=", max_bytes)},
                             w1, w2, &compiled);
    ASSERT_NE(stub, nullptr);
    ASSERT_TRUE(register_ffn(*stub, "second").ok());

    grpc::Status status = register_ffn(*stub, "third");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_EQ(status.error_message(),
              absl::StrCat("model 'third' takes ", ffn_bytes, " bytes (graph ", graph_bytes,
                           ", weights ", 2 * kDModel * kDFf * 4, "); the 2 models registered take ",
                           2 * ffn_bytes, " of the ", max_bytes,
                           " bytes the server holds (--max_model_bytes=", max_bytes,
                           "); unregister one first"));
    // The graph alone (no weights) fits the bytes, and fills the count.
    ASSERT_TRUE(register_graph(*stub, "third", ffn_graph()).ok());
    status = register_ffn(*stub, "fourth");
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
    EXPECT_EQ(status.error_message(), "model 'fourth': 3 models are registered, the most the "
                                      "server holds (--max_models=3); unregister one first");
    EXPECT_TRUE(wait_for_metric(metrics_port, "einsummable_models 3"))
        << metrics_text(metrics_port);
    EXPECT_EQ(metric_value(metrics_port, "einsummable_model_bytes"),
              static_cast<double>(2 * ffn_bytes + graph_bytes));

    // What was accepted is intact: the three models, and the first one's weights serve.
    {
        v1::ListModelsResponse models;
        grpc::ClientContext context;
        with_deadline(context);
        ASSERT_TRUE(stub->ListModels(&context, {}, &models).ok());
        std::vector<std::string> names;
        for (const v1::ModelInfo& model : models.models()) {
            names.push_back(model.model());
        }
        EXPECT_THAT(names, ::testing::ElementsAre("ffn", "second", "third"));
        EXPECT_THAT(models.models(0).weights_loaded(), ::testing::ElementsAre("w1", "w2"));
    }
    auto expect_execute = [&](const std::string& model, uint64_t seed) {
        const std::vector<float> x = random_values(4 * kDModel, kDModel, seed);
        v1::ExecuteResponse resp;
        grpc::ClientContext context;
        with_deadline(context, 120);
        grpc::Status executed = stub->Execute(&context, execute_request(model, 4, x), &resp);
        ASSERT_TRUE(executed.ok()) << model << ": " << executed.error_message();
        ASSERT_EQ(resp.outputs_size(), 1);
        EXPECT_LE(max_relative_error(as_doubles(resp.outputs(0).tensor().data()),
                                     reference_y(4, x, w1, w2)),
                  kTolerance)
            << model;
    };
    expect_execute("ffn", 20);

    // Unregistering frees the count and the bytes: a fourth FFN now registers and serves.
    {
        v1::UnregisterModelRequest req;
        req.set_model("second");
        v1::UnregisterModelResponse resp;
        grpc::ClientContext context;
        with_deadline(context);
        ASSERT_TRUE(stub->UnregisterModel(&context, req, &resp).ok());
    }
    ASSERT_TRUE(register_ffn(*stub, "fourth").ok());
    v1::UploadTensorResponse uploaded;
    ASSERT_TRUE(upload(*stub, "fourth", "w1", w1, {kDModel, kDFf}, 2, &uploaded).ok());
    ASSERT_TRUE(upload(*stub, "fourth", "w2", w2, {kDFf, kDModel}, 2, &uploaded).ok());
    expect_execute("fourth", 21);
    expect_execute("ffn", 22);
    EXPECT_EQ(metric_value(metrics_port, "einsummable_model_bytes"),
              static_cast<double>(2 * ffn_bytes + graph_bytes));
}

} // namespace
} // namespace einsummable
