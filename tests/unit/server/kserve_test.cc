// server/kserve.h without gRPC: the KServe v2 mapping onto an Engine on the CPU backend —
// metadata, Triton's model config and readiness of the small FFN, ModelInfer's numbers against
// the reference (raw and typed contents, two shapes, compile options and Triton's flag from
// parameters), and every bad request's status and message.
#include <filesystem>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "server/kserve.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using testing::as_bytes;
using testing::as_floats;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::kFf;
using testing::kModel;
using testing::random_values;
using testing::reference;

class KServeTest : public ::testing::Test {
protected:
    void SetUp() override {
        engine_ =
            std::make_unique<Engine>(testing::test_engine_options(),
                                     runtime::cpu::make_cpu_backend({2, 1}), nullptr, nullptr);
        v1::RegisterModelRequest req;
        req.set_model("ffn");
        *req.mutable_graph() = graphdef::parse_text(testing::kFfn).value();
        req.add_weights("w1");
        req.add_weights("w2");
        ASSERT_TRUE(engine_->register_model(req).ok());
    }

    void upload(const std::string& name, const std::vector<float>& values,
                std::vector<int64_t> shape) {
        ASSERT_TRUE(testing::upload_f32(*engine_, "ffn", name, values, shape).ok());
    }

    void upload_weights() {
        upload("w1", w1_, {kModel, kFf});
        upload("w2", w2_, {kFf, kModel});
    }

    // x [tokens, kModel] as raw contents.
    inference::ModelInferRequest infer_request(int tokens, const std::vector<float>& x) {
        inference::ModelInferRequest req;
        req.set_model_name("ffn");
        req.set_id("request-7");
        auto* input = req.add_inputs();
        input->set_name("x");
        input->set_datatype("FP32");
        input->add_shape(tokens);
        input->add_shape(kModel);
        req.add_raw_input_contents(as_bytes(x));
        return req;
    }

    // The status of a request; it must fail.
    absl::Status infer_error(const inference::ModelInferRequest& req) {
        absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
        EXPECT_FALSE(response.ok());
        return response.ok() ? absl::OkStatus() : response.status();
    }

    std::unique_ptr<Engine> engine_;
    std::vector<float> w1_ = random_values(kModel * kFf, 11);
    std::vector<float> w2_ = random_values(kFf * kModel, 12);
};

TEST_F(KServeTest, ModelMetadataShowsSymbolicDimensionsAsMinusOne) {
    inference::ModelMetadataRequest req;
    req.set_name("ffn");
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        kserve_model_metadata(*engine_, req);
    ASSERT_TRUE(metadata.ok()) << metadata.status();
    EXPECT_EQ(metadata->name(), "ffn");
    EXPECT_THAT(metadata->versions(), ElementsAre("1"));
    EXPECT_EQ(metadata->platform(), "einsummable");
    ASSERT_EQ(metadata->inputs_size(), 1); // the weights are not inputs
    EXPECT_EQ(metadata->inputs(0).name(), "x");
    EXPECT_EQ(metadata->inputs(0).datatype(), "FP32");
    EXPECT_THAT(metadata->inputs(0).shape(), ElementsAre(-1, kModel));
    ASSERT_EQ(metadata->outputs_size(), 1);
    EXPECT_EQ(metadata->outputs(0).name(), "y");
    EXPECT_EQ(metadata->outputs(0).datatype(), "FP32");
    EXPECT_THAT(metadata->outputs(0).shape(), ElementsAre(-1, kModel));

    req.set_version("2");
    absl::StatusOr<inference::ModelMetadataResponse> wrong_version =
        kserve_model_metadata(*engine_, req);
    EXPECT_EQ(wrong_version.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(wrong_version.status().message(), HasSubstr("no version '2'"));

    req.set_name("nope");
    req.set_version("");
    EXPECT_EQ(kserve_model_metadata(*engine_, req).status().code(), absl::StatusCode::kNotFound);
}

// What perf_analyzer reads before its first request (clients/python/tests/test_perf_analyzer.py
// runs it): ModelMetadata's tensors in Triton's ModelConfig form, and no batch dimension.
TEST_F(KServeTest, ModelConfigDescribesTheTensorsWithNoBatchDimension) {
    inference::ModelConfigRequest req;
    req.set_name("ffn");
    absl::StatusOr<inference::ModelConfigResponse> response = kserve_model_config(*engine_, req);
    ASSERT_TRUE(response.ok()) << response.status();
    const inference::ModelConfig& config = response->config();
    EXPECT_EQ(config.name(), "ffn");
    EXPECT_EQ(config.platform(), "einsummable");
    EXPECT_EQ(config.max_batch_size(), 0);
    ASSERT_EQ(config.input_size(), 1); // the weights are not inputs
    EXPECT_EQ(config.input(0).name(), "x");
    EXPECT_EQ(config.input(0).data_type(), inference::TYPE_FP32);
    EXPECT_THAT(config.input(0).dims(), ElementsAre(-1, kModel));
    ASSERT_EQ(config.output_size(), 1);
    EXPECT_EQ(config.output(0).name(), "y");
    EXPECT_EQ(config.output(0).data_type(), inference::TYPE_FP32);
    EXPECT_THAT(config.output(0).dims(), ElementsAre(-1, kModel));

    req.set_version("1");
    EXPECT_TRUE(kserve_model_config(*engine_, req).ok());
    req.set_version("2");
    absl::StatusOr<inference::ModelConfigResponse> wrong_version =
        kserve_model_config(*engine_, req);
    EXPECT_EQ(wrong_version.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(wrong_version.status().message(), HasSubstr("no version '2'"));
    req.set_name("nope");
    req.set_version("");
    absl::StatusOr<inference::ModelConfigResponse> unknown = kserve_model_config(*engine_, req);
    EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(unknown.status().message(), HasSubstr("model 'nope' is not registered"));
}

TEST_F(KServeTest, ModelIsReadyOnceEveryWeightIsUploaded) {
    inference::ModelReadyRequest req;
    req.set_name("ffn");
    EXPECT_FALSE(kserve_model_ready(*engine_, req));
    upload("w1", w1_, {kModel, kFf});
    EXPECT_FALSE(kserve_model_ready(*engine_, req));
    upload("w2", w2_, {kFf, kModel});
    EXPECT_TRUE(kserve_model_ready(*engine_, req));
    req.set_version("1");
    EXPECT_TRUE(kserve_model_ready(*engine_, req));
    req.set_version("3");
    EXPECT_FALSE(kserve_model_ready(*engine_, req));
    req.set_name("unknown");
    req.set_version("");
    EXPECT_FALSE(kserve_model_ready(*engine_, req));
}

TEST_F(KServeTest, InferMatchesTheReferenceAtTwoShapes) {
    upload_weights();
    for (int tokens : {3, 5}) {
        const std::vector<float> x = random_values(tokens * kModel, 100 + tokens);
        absl::StatusOr<inference::ModelInferResponse> response =
            kserve_model_infer(*engine_, infer_request(tokens, x));
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_EQ(response->model_name(), "ffn");
        EXPECT_EQ(response->model_version(), "1");
        EXPECT_EQ(response->id(), "request-7");
        ASSERT_EQ(response->outputs_size(), 1);
        EXPECT_EQ(response->outputs(0).name(), "y");
        EXPECT_EQ(response->outputs(0).datatype(), "FP32");
        EXPECT_THAT(response->outputs(0).shape(), ElementsAre(tokens, kModel));
        ASSERT_EQ(response->raw_output_contents_size(), 1);
        const std::vector<float> y = as_floats(response->raw_output_contents(0));
        const std::vector<float> want = reference(x, w1_, w2_, tokens);
        ASSERT_EQ(y.size(), want.size());
        for (size_t i = 0; i < y.size(); ++i) {
            EXPECT_NEAR(y[i], want[i], 1e-5) << "tokens " << tokens << " element " << i;
        }
    }
    EXPECT_EQ(engine_->compiles(), 2); // one plan per shape
}

TEST_F(KServeTest, InferReadsTypedContentsAndCompileOptionsFromParameters) {
    upload_weights();
    const int tokens = 4;
    const std::vector<float> x = random_values(tokens * kModel, 7);
    inference::ModelInferRequest req = infer_request(tokens, x);
    req.clear_raw_input_contents();
    for (float value : x) {
        req.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
    }
    (*req.mutable_parameters())["devices"].set_int64_param(1);
    (*req.mutable_parameters())["schedule"].set_string_param("naive");
    (*req.mutable_parameters())["priority"].set_uint64_param(3);
    auto* output = req.add_outputs();
    output->set_name("y");
    absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
    ASSERT_TRUE(response.ok()) << response.status();
    const std::vector<float> y = as_floats(response->raw_output_contents(0));
    const std::vector<float> want = reference(x, w1_, w2_, tokens);
    for (size_t i = 0; i < y.size(); ++i) {
        EXPECT_NEAR(y[i], want[i], 1e-5) << "element " << i;
    }
    EXPECT_EQ(engine_->compiles(), 1);
    // Another device count is another plan.
    (*req.mutable_parameters())["devices"].set_int64_param(2);
    ASSERT_TRUE(kserve_model_infer(*engine_, req).ok());
    EXPECT_EQ(engine_->compiles(), 2);
    // So is another objective than the default (time); its plan computes the same function.
    (*req.mutable_parameters())["objective"].set_string_param("bytes");
    response = kserve_model_infer(*engine_, req);
    ASSERT_TRUE(response.ok()) << response.status();
    EXPECT_EQ(engine_->compiles(), 3);
    const std::vector<float> by_time = as_floats(response->raw_output_contents(0));
    ASSERT_EQ(by_time.size(), want.size());
    for (size_t i = 0; i < by_time.size(); ++i) {
        EXPECT_NEAR(by_time[i], want[i], 1e-5) << "element " << i;
    }
    // "cost", the bytes objective's old name, is its plan; naming the default is the default's.
    (*req.mutable_parameters())["objective"].set_string_param("cost");
    ASSERT_TRUE(kserve_model_infer(*engine_, req).ok());
    EXPECT_EQ(engine_->compiles(), 3);
    (*req.mutable_parameters())["objective"].set_string_param("time");
    ASSERT_TRUE(kserve_model_infer(*engine_, req).ok());
    EXPECT_EQ(engine_->compiles(), 3);
}

// Triton's C++ client, so perf_analyzer, sets triton_enable_empty_final_response on every
// request, true or false; ModelInfer answers once either way.
TEST_F(KServeTest, InferAcceptsTritonsEmptyFinalResponseFlag) {
    upload_weights();
    const int tokens = 3;
    const std::vector<float> x = random_values(tokens * kModel, 21);
    const std::vector<float> want = reference(x, w1_, w2_, tokens);
    for (bool flag : {false, true}) {
        SCOPED_TRACE(flag);
        inference::ModelInferRequest req = infer_request(tokens, x);
        (*req.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(flag);
        absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
        ASSERT_TRUE(response.ok()) << response.status();
        EXPECT_TRUE(response->parameters().empty()); // no triton_final_response: not a stream
        ASSERT_EQ(response->raw_output_contents_size(), 1);
        const std::vector<float> y = as_floats(response->raw_output_contents(0));
        ASSERT_EQ(y.size(), want.size());
        for (size_t i = 0; i < y.size(); ++i) {
            EXPECT_NEAR(y[i], want[i], 1e-5) << "element " << i;
        }
    }
    EXPECT_EQ(engine_->compiles(), 1); // the flag is no compile option
}

struct BadInfer {
    const char* name;
    void (*edit)(inference::ModelInferRequest&);
    absl::StatusCode code;
    const char* message;
};

TEST_F(KServeTest, EveryBadRequestIsRefusedWithAMessageNamingTheCulprit) {
    upload_weights();
    const BadInfer cases[] = {
        {"unknown model", [](auto& r) { r.set_model_name("nope"); }, absl::StatusCode::kNotFound,
         "model 'nope' is not registered"},
        {"unknown version", [](auto& r) { r.set_model_version("9"); }, absl::StatusCode::kNotFound,
         "no version '9'"},
        {"unsupported datatype", [](auto& r) { r.mutable_inputs(0)->set_datatype("INT8"); },
         absl::StatusCode::kInvalidArgument, "input 'x': datatype 'INT8' is not supported"},
        {"wrong datatype", [](auto& r) { r.mutable_inputs(0)->set_datatype("FP16"); },
         absl::StatusCode::kInvalidArgument, "input 'x' is FP32; got FP16"},
        {"wrong rank", [](auto& r) { r.mutable_inputs(0)->mutable_shape()->RemoveLast(); },
         absl::StatusCode::kInvalidArgument, "input 'x' has 2 dimensions ([-1, 4]"},
        {"wrong fixed size", [](auto& r) { r.mutable_inputs(0)->set_shape(1, 5); },
         absl::StatusCode::kInvalidArgument, "input 'x' dimension 1 ('d_model') is 4; got 5"},
        {"unknown input", [](auto& r) { r.mutable_inputs(0)->set_name("z"); },
         absl::StatusCode::kInvalidArgument, "'z' is not an input of model 'ffn' (inputs: x"},
        {"weight as input", [](auto& r) { r.mutable_inputs(0)->set_name("w1"); },
         absl::StatusCode::kInvalidArgument, "weights are uploaded with UploadTensor: w1, w2"},
        {"missing input",
         [](auto& r) {
             r.clear_inputs();
             r.clear_raw_input_contents();
         },
         absl::StatusCode::kInvalidArgument, "input 'x' of model 'ffn' is missing"},
        {"raw contents count", [](auto& r) { r.add_raw_input_contents("extra"); },
         absl::StatusCode::kInvalidArgument, "raw_input_contents has 2 entries for 1 inputs"},
        {"byte count", [](auto& r) { r.mutable_raw_input_contents(0)->resize(12); },
         absl::StatusCode::kInvalidArgument, "takes 48 bytes; got 12"},
        {"typed contents count",
         [](auto& r) {
             r.clear_raw_input_contents();
             r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
         },
         absl::StatusCode::kInvalidArgument, "takes 48 bytes; got 4"},
        // Values in another type's field are named, not ignored as if absent ("takes 48 bytes;
        // got 0").
        {"contents of another type",
         [](auto& r) {
             r.clear_raw_input_contents();
             for (int i = 0; i < 12; ++i) {
                 r.mutable_inputs(0)->mutable_contents()->add_int_contents(i);
             }
         },
         absl::StatusCode::kInvalidArgument,
         "input 'x' is FP32: its values go in fp32_contents or raw_input_contents; got "
         "int_contents (12 values)"},
        {"contents of two types",
         [](auto& r) {
             r.clear_raw_input_contents();
             for (int i = 0; i < 12; ++i) {
                 r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
             }
             r.mutable_inputs(0)->mutable_contents()->add_fp64_contents(1.0);
         },
         absl::StatusCode::kInvalidArgument,
         "input 'x' is FP32: its values go in fp32_contents or raw_input_contents; got "
         "fp64_contents (1 value)"},
        {"unknown parameter",
         [](auto& r) { (*r.mutable_parameters())["batch"].set_int64_param(2); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'batch' is not supported by model 'ffn' (parameters: devices, planner, "
         "objective, schedule, seed, sequence_ends, timeout, priority, "
         "triton_enable_empty_final_response)"},
        {"sequence ends not integers",
         [](auto& r) { (*r.mutable_parameters())["sequence_ends"].set_string_param("2, x"); },
         absl::StatusCode::kInvalidArgument, "parameter 'sequence_ends': 'x' is not an integer"},
        {"sequence ends of a model without batching",
         [](auto& r) { (*r.mutable_parameters())["sequence_ends"].set_string_param("1,2"); },
         absl::StatusCode::kInvalidArgument, "sequence_ends"},
        {"sequence parameter",
         [](auto& r) { (*r.mutable_parameters())["sequence_id"].set_int64_param(2); },
         absl::StatusCode::kInvalidArgument, "parameter 'sequence_id' is not supported"},
        {"triton flag not a bool",
         [](auto& r) {
             (*r.mutable_parameters())["triton_enable_empty_final_response"].set_int64_param(1);
         },
         absl::StatusCode::kInvalidArgument,
         "parameter 'triton_enable_empty_final_response' must be a bool (bool_param); got "
         "int64_param 1"},
        {"triton flag a string",
         [](auto& r) {
             (*r.mutable_parameters())["triton_enable_empty_final_response"].set_string_param(
                 "true");
         },
         absl::StatusCode::kInvalidArgument,
         "parameter 'triton_enable_empty_final_response' must be a bool (bool_param); got "
         "string_param 'true'"},
        {"unknown triton parameter",
         [](auto& r) { (*r.mutable_parameters())["triton_final_response"].set_bool_param(true); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'triton_final_response': names starting with 'triton_' are reserved for "
         "Triton; einsummabled accepts only triton_enable_empty_final_response"},
        // The bare prefix is reserved too, and a good triton_ parameter beside it changes nothing.
        {"bare triton prefix beside a good one",
         [](auto& r) {
             (*r.mutable_parameters())["triton_enable_empty_final_response"].set_bool_param(true);
             (*r.mutable_parameters())["triton_"].set_int64_param(0);
         },
         absl::StatusCode::kInvalidArgument, "parameter 'triton_': names starting with 'triton_'"},
        {"devices not an int",
         [](auto& r) { (*r.mutable_parameters())["devices"].set_string_param("two"); },
         absl::StatusCode::kInvalidArgument, "parameter 'devices' must be an integer"},
        {"too many devices",
         [](auto& r) { (*r.mutable_parameters())["devices"].set_int64_param(3); },
         absl::StatusCode::kInvalidArgument, "options.devices: 3"},
        {"bad objective",
         [](auto& r) { (*r.mutable_parameters())["objective"].set_string_param("fastest"); },
         absl::StatusCode::kInvalidArgument,
         "options.objective: 'fastest' is not an objective (bytes, time, search; cost means "
         "bytes)"},
        {"objective not a string",
         [](auto& r) { (*r.mutable_parameters())["objective"].set_int64_param(1); },
         absl::StatusCode::kInvalidArgument, "parameter 'objective' must be a string"},
        {"bad planner",
         [](auto& r) { (*r.mutable_parameters())["planner"].set_string_param("best"); },
         absl::StatusCode::kInvalidArgument, "options.planner: 'best'"},
        {"tensor parameter",
         [](auto& r) {
             (*r.mutable_inputs(0)->mutable_parameters())["shared_memory_region"].set_string_param(
                 "r");
         },
         absl::StatusCode::kInvalidArgument, "input 'x': parameter 'shared_memory_region'"},
        {"unknown output", [](auto& r) { r.add_outputs()->set_name("h"); },
         absl::StatusCode::kInvalidArgument, "output 'h' is not a saved tensor"},
        {"classification",
         [](auto& r) {
             auto* output = r.add_outputs();
             output->set_name("y");
             (*output->mutable_parameters())["classification"].set_int64_param(3);
         },
         absl::StatusCode::kInvalidArgument, "output 'y': parameter 'classification'"},
        {"timeout passed", [](auto& r) { (*r.mutable_parameters())["timeout"].set_int64_param(0); },
         absl::StatusCode::kDeadlineExceeded, "timeout parameter (0 µs)"},
        {"negative timeout",
         [](auto& r) { (*r.mutable_parameters())["timeout"].set_int64_param(-1); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'timeout': -1 is negative; expected microseconds, at least 0"},
        {"most negative timeout",
         [](auto& r) { (*r.mutable_parameters())["timeout"].set_int64_param(INT64_MIN); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'timeout': -9223372036854775808 is negative"},
        {"timeout not an int",
         [](auto& r) { (*r.mutable_parameters())["timeout"].set_string_param("soon"); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'timeout' must be an integer (int64_param); got string_param 'soon'"},
        {"timeout a double",
         [](auto& r) { (*r.mutable_parameters())["timeout"].set_double_param(1.5); },
         absl::StatusCode::kInvalidArgument,
         "parameter 'timeout' must be an integer "
         "(int64_param); got double_param 1.5"},
        {"timeout a bool",
         [](auto& r) { (*r.mutable_parameters())["timeout"].set_bool_param(true); },
         absl::StatusCode::kInvalidArgument, "got bool_param true"},
        {"contents and raw contents",
         [](auto& r) { r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f); },
         absl::StatusCode::kInvalidArgument,
         "input 'x': contents must not be given when the request uses raw_input_contents"},
        {"empty contents and raw contents",
         [](auto& r) { r.mutable_inputs(0)->mutable_contents(); },
         absl::StatusCode::kInvalidArgument,
         "input 'x': contents must not be given when the request uses raw_input_contents"},
    };
    const std::vector<float> x = random_values(3 * kModel, 5);
    for (const BadInfer& bad : cases) {
        SCOPED_TRACE(bad.name);
        inference::ModelInferRequest req = infer_request(3, x);
        bad.edit(req);
        absl::Status status = infer_error(req);
        EXPECT_EQ(status.code(), bad.code) << status;
        EXPECT_THAT(status.message(), HasSubstr(bad.message));
    }
    // Nothing was broken: the next good request succeeds.
    EXPECT_TRUE(kserve_model_infer(*engine_, infer_request(3, x)).ok());
}

// A timeout too large for the clock (2^60 µs used to overflow it into a deadline already passed)
// adds no deadline of its own: the request runs, and the call's own cancellation still applies.
TEST_F(KServeTest, HugeTimeoutsSaturate) {
    upload_weights();
    const std::vector<float> x = random_values(3 * kModel, 5);
    for (int64_t micros : {int64_t{1} << 53, int64_t{1} << 60, INT64_MAX}) {
        SCOPED_TRACE(micros);
        inference::ModelInferRequest req = infer_request(3, x);
        (*req.mutable_parameters())["timeout"].set_int64_param(micros);
        absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
        EXPECT_TRUE(response.ok()) << response.status();
    }
    inference::ModelInferRequest req = infer_request(3, x);
    (*req.mutable_parameters())["timeout"].set_uint64_param(UINT64_MAX);
    absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
    EXPECT_TRUE(response.ok()) << response.status();
    // An hour is an ordinary deadline, not reached.
    (*req.mutable_parameters())["timeout"].set_int64_param(int64_t{3600} * 1000 * 1000);
    response = kserve_model_infer(*engine_, req);
    EXPECT_TRUE(response.ok()) << response.status();

    (*req.mutable_parameters())["timeout"].set_int64_param(INT64_MAX);
    response = kserve_model_infer(*engine_, req, [] {
        return absl::DeadlineExceededError("the call's own deadline passed");
    });
    EXPECT_EQ(response.status().code(), absl::StatusCode::kDeadlineExceeded);
    EXPECT_THAT(response.status().message(), HasSubstr("the call's own deadline passed"));
}

TEST_F(KServeTest, TwoInputsBindingOneSymbolDifferentlyAreRefused) {
    // z = x + u with x, u [tokens, 2]: the second input must agree on tokens.
    v1::RegisterModelRequest req;
    req.set_model("add");
    *req.mutable_graph() = graphdef::parse_text(R"pb(
                               inputs {
                                 name: "x"
                                 dtype: F32
                                 dims { name: "tokens" symbol: "tokens" }
                                 dims { fixed: 2 }
                               }
                               inputs {
                                 name: "u"
                                 dtype: F32
                                 dims { name: "tokens" symbol: "tokens" }
                                 dims { fixed: 2 }
                               }
                               operators {
                                 name: "z"
                                 kind: "einsum"
                                 attributes {
                                   key: "equation"
                                   value { string_value: "ij,ij->ij" }
                                 }
                                 attributes {
                                   key: "join"
                                   value { string_value: "add" }
                                 }
                                 inputs: [ "x", "u" ]
                               }
                               saved: "z"
                           )pb")
                               .value();
    ASSERT_TRUE(engine_->register_model(req).ok());
    inference::ModelInferRequest infer;
    infer.set_model_name("add");
    for (auto [name, tokens] : {std::pair<const char*, int>{"x", 3}, {"u", 4}}) {
        auto* input = infer.add_inputs();
        input->set_name(name);
        input->set_datatype("FP32");
        input->add_shape(tokens);
        input->add_shape(2);
        infer.add_raw_input_contents(std::string(tokens * 2 * 4, '\0'));
    }
    absl::Status status = infer_error(infer);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("input 'u' dimension 0 ('tokens') binds symbol "
                                            "'tokens' to 4, but input 'x' binds it to 3"));
}

TEST_F(KServeTest, MissingWeightIsAFailedPrecondition) {
    inference::ModelInferRequest req = infer_request(2, random_values(2 * kModel, 3));
    absl::Status status = infer_error(req);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(status.message(), HasSubstr("weight 'w1'"));
}

TEST(KServeDatatypes, RoundTripAndRefusal) {
    for (ir::DType dtype : {ir::DType::f16, ir::DType::bf16, ir::DType::f32, ir::DType::f64}) {
        absl::StatusOr<v1::DType> wire = from_kserve_datatype(kserve_datatype(dtype), "t");
        ASSERT_TRUE(wire.ok());
        EXPECT_EQ(*wire, to_wire_dtype(dtype));
    }
    EXPECT_EQ(triton_data_type(ir::DType::f16), inference::TYPE_FP16);
    EXPECT_EQ(triton_data_type(ir::DType::bf16), inference::TYPE_BF16);
    EXPECT_EQ(triton_data_type(ir::DType::f32), inference::TYPE_FP32);
    EXPECT_EQ(triton_data_type(ir::DType::f64), inference::TYPE_FP64);
    absl::StatusOr<v1::DType> bytes = from_kserve_datatype("BYTES", "output 'q'");
    EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(bytes.status().message(), HasSubstr("output 'q': datatype 'BYTES'"));
}

// Triton's repository calls without --model_repository, and the requests this daemon refuses;
// the calls themselves are model_repository_test's and test_repository.py's.
TEST_F(KServeTest, RepositoryCallsNeedTheFlagAndRefuseWhatTheyCannotDo) {
    inference::RepositoryIndexRequest index;
    absl::StatusOr<inference::RepositoryIndexResponse> got =
        kserve_repository_index(nullptr, index);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(got.status().message(), HasSubstr("--model_repository"));
    inference::RepositoryModelLoadRequest load;
    load.set_model_name("ffn");
    EXPECT_EQ(kserve_repository_load(nullptr, load).code(), absl::StatusCode::kFailedPrecondition);
    inference::RepositoryModelUnloadRequest unload;
    unload.set_model_name("ffn");
    EXPECT_EQ(kserve_repository_unload(nullptr, unload).code(),
              absl::StatusCode::kFailedPrecondition);

    const std::filesystem::path root = std::filesystem::temp_directory_path() /
                                       ("kserve_test_repository_" + std::to_string(::getpid()));
    std::filesystem::create_directories(root);
    // The fixture's engine, not owned.
    ModelRepository repository(root, std::shared_ptr<Engine>(engine_.get(), [](Engine*) {}),
                               nullptr);
    ASSERT_TRUE(repository.load_all().ok());
    index.set_repository_name("other");
    got = kserve_repository_index(&repository, index);
    EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(got.status().message(), HasSubstr("repository_name 'other'"));
    (*load.mutable_parameters())["config"].set_string_param("{}");
    absl::Status refused = kserve_repository_load(&repository, load);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.message(), HasSubstr("parameter 'config' is not supported"));
    // Triton's unload_dependents is accepted (there are no ensembles); the name is unknown.
    (*unload.mutable_parameters())["unload_dependents"].set_bool_param(true);
    EXPECT_EQ(kserve_repository_unload(&repository, unload).code(), absl::StatusCode::kNotFound);
    std::filesystem::remove_all(root);
}

} // namespace
} // namespace einsummable::server

namespace einsummable::server {
namespace {

// A model that looks its i32 or i64 ids up in an uploaded table [8, 3] (docs/operators.md
// "embedding"): INT32 ids as typed int_contents, INT64 ids raw, and an id outside the table
// refused naming its position, with the model still serving.
constexpr char kLookup[] = R"pb(
  inputs {
    name: "ids32"
    dtype: I32
    dims { name: "tokens" symbol: "tokens" }
  }
  inputs {
    name: "ids64"
    dtype: I64
    dims { name: "tokens" symbol: "tokens" }
  }
  inputs {
    name: "table"
    dtype: F32
    dims { name: "vocab" fixed: 8 }
    dims { name: "d" fixed: 3 }
  }
  operators { name: "a" kind: "embedding" inputs: [ "table", "ids32" ] }
  operators { name: "b" kind: "embedding" inputs: [ "table", "ids64" ] }
  saved: [ "a", "b" ]
)pb";

TEST(KServeIntegers, Int32AndInt64IdsLookRowsUpAndAnIdOutsideTheTableIsNamed) {
    EngineOptions options;
    options.version = "test";
    options.topology = runtime::default_topology(2);
    options.synthesis_iterations = 50;
    Engine engine(options, runtime::cpu::make_cpu_backend({2, 1}), nullptr, nullptr);
    v1::RegisterModelRequest reg;
    reg.set_model("lookup");
    *reg.mutable_graph() = graphdef::parse_text(kLookup).value();
    reg.add_weights("table");
    ASSERT_TRUE(engine.register_model(reg).ok());
    std::vector<float> table(24);
    for (int idx = 0; idx < 24; ++idx) {
        table[idx] = 0.5f * static_cast<float>(idx);
    }
    ASSERT_TRUE(testing::upload_f32(engine, "lookup", "table", table, {8, 3}).ok());

    inference::ModelMetadataRequest metadata_req;
    metadata_req.set_name("lookup");
    absl::StatusOr<inference::ModelMetadataResponse> metadata =
        kserve_model_metadata(engine, metadata_req);
    ASSERT_TRUE(metadata.ok()) << metadata.status();
    ASSERT_EQ(metadata->inputs_size(), 2);
    EXPECT_EQ(metadata->inputs(0).datatype(), "INT32");
    EXPECT_EQ(metadata->inputs(1).datatype(), "INT64");

    const std::vector<int32_t> ids32 = {7, 0, 3, 3};
    const std::vector<int64_t> ids64 = {1, 6, 2, 7};
    const auto request = [&](int64_t last64) {
        inference::ModelInferRequest req;
        req.set_model_name("lookup");
        auto* a = req.add_inputs();
        a->set_name("ids32");
        a->set_datatype("INT32");
        a->add_shape(4);
        for (int32_t id : ids32) {
            a->mutable_contents()->add_int_contents(id);
        }
        auto* b = req.add_inputs();
        b->set_name("ids64");
        b->set_datatype("INT64");
        b->add_shape(4);
        for (int64_t id : ids64) {
            b->mutable_contents()->add_int64_contents(id == 7 ? last64 : id);
        }
        return req;
    };
    absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(engine, request(7));
    ASSERT_TRUE(response.ok()) << response.status();
    ASSERT_EQ(response->outputs_size(), 2);
    const std::vector<float> a = as_floats(response->raw_output_contents(0));
    const std::vector<float> b = as_floats(response->raw_output_contents(1));
    ASSERT_EQ(a.size(), 12u);
    ASSERT_EQ(b.size(), 12u);
    for (int t = 0; t < 4; ++t) {
        for (int e = 0; e < 3; ++e) {
            EXPECT_EQ(a[t * 3 + e], table[ids32[t] * 3 + e]) << "a token " << t;
            EXPECT_EQ(b[t * 3 + e], table[ids64[t] * 3 + e]) << "b token " << t;
        }
    }

    absl::StatusOr<inference::ModelInferResponse> refused =
        kserve_model_infer(engine, request(1'000'000'000'000));
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(),
                HasSubstr("input 'ids64' read by node 'b' (embedding): position 3 holds id "
                          "1000000000000, outside the table's 8 rows [0, 8)"));
    // The model still serves.
    EXPECT_TRUE(kserve_model_infer(engine, request(7)).ok());
}

} // namespace
} // namespace einsummable::server
