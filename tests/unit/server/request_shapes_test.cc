// server/request_shapes: a request's options, dims and sequence ends checked against its model,
// its graph built and bounded, and Execute's inputs and outputs checked, each error naming the
// field at fault (or the limit and its flag).
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/graph_def.h"
#include "runtime/plan.h"
#include "server/model_store.h"
#include "server/request_shapes.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using testing::kFf;
using testing::kFfn;
using testing::kModel;

class RequestShapesTest : public ::testing::Test {
protected:
    void SetUp() override {
        const v1::GraphDef graph = graphdef::parse_text(kFfn).value();
        ffn_ = store_.register_model("ffn", graph, {"w1", "w2"}).value();
        v1::Batching batching;
        batching.set_dimension("tokens");
        batched_ = store_.register_model("batched", graph, {"w1", "w2"}, &batching).value();
        settings_.max_sequence_ends = 2;
    }

    RequestShapes shapes() const {
        return RequestShapes(kDevices, runtime::default_topology(kDevices), settings_);
    }

    static google::protobuf::Map<std::string, int64_t> dims(int64_t tokens) {
        google::protobuf::Map<std::string, int64_t> out;
        out["tokens"] = tokens;
        return out;
    }

    static google::protobuf::RepeatedField<int64_t> ends(std::vector<int64_t> values) {
        return google::protobuf::RepeatedField<int64_t>(values.begin(), values.end());
    }

    void upload(const std::string& name, size_t floats) {
        const std::vector<int64_t> shape =
            name == "w1" ? std::vector<int64_t>{kModel, kFf} : std::vector<int64_t>{kFf, kModel};
        std::unique_ptr<WeightUpload> upload =
            store_.begin_upload("ffn", name, v1::F32, shape).value();
        const std::vector<std::byte> bytes(floats * 4);
        ASSERT_TRUE(upload->append(bytes).ok());
        ASSERT_TRUE(upload->commit().ok());
    }

    // An Execute of the FFN with x [tokens, 4] of zeros.
    static v1::ExecuteRequest execute(int tokens) {
        v1::ExecuteRequest req;
        req.set_model("ffn");
        (*req.mutable_dims())["tokens"] = tokens;
        v1::NamedTensor* x = req.add_inputs();
        x->set_name("x");
        x->mutable_tensor()->set_dtype(v1::F32);
        x->mutable_tensor()->add_shape(tokens);
        x->mutable_tensor()->add_shape(kModel);
        x->mutable_tensor()->set_data(std::string(tokens * kModel * 4, '\0'));
        return req;
    }

    static constexpr int kDevices = 2;
    ModelStore store_{ModelStoreLimits{}};
    std::shared_ptr<const Model> ffn_;
    std::shared_ptr<const Model> batched_;
    EngineSettings settings_;
};

TEST_F(RequestShapesTest, CompileOptionsDefaultToEveryDeviceAndNameTheBadOption) {
    const exprog::Topology topology = runtime::default_topology(kDevices);
    v1::CompileOptions wire;
    wire.set_seed(7);
    absl::StatusOr<runtime::CompileOptions> options = compile_options(wire, kDevices, topology, 33);
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->devices, kDevices);
    EXPECT_EQ(options->seed, 7u);
    EXPECT_EQ(options->synthesis_iterations, 33);
    ASSERT_TRUE(options->topology.has_value());
    EXPECT_EQ(options->topology->name(), topology.name());

    wire.set_devices(3);
    EXPECT_EQ(compile_options(wire, kDevices, topology, 33).status().message(),
              "options.devices: 3 is not between 1 and the server's 2 devices (0 = all)");
    wire.set_devices(1);
    wire.set_planner("nope");
    EXPECT_THAT(std::string(compile_options(wire, kDevices, topology, 33).status().message()),
                StartsWith("options.planner: 'nope' is not a planner (dp, "));
    wire.set_planner("greedy");
    wire.set_schedule("fast");
    EXPECT_EQ(compile_options(wire, kDevices, topology, 33).status().message(),
              "options.schedule: 'fast' is not a schedule (optimized, naive, ai)");
    wire.set_schedule("naive");
    wire.set_objective("speed");
    EXPECT_EQ(compile_options(wire, kDevices, topology, 33).status().message(),
              "options.objective: 'speed' is not an objective (bytes, time, search; cost means "
              "bytes)");
    wire.set_objective("search");
    options = compile_options(wire, kDevices, topology, 33);
    ASSERT_TRUE(options.ok()) << options.status();
    EXPECT_EQ(options->devices, 1);
    EXPECT_EQ(options->planner, logical::Planner::greedy);
    EXPECT_EQ(options->schedule, exprog::SynthesisMode::naive);
    EXPECT_EQ(options->objective, logical::Objective::search);
    // "cost", the bytes objective's old name; no objective is the default, time.
    wire.set_objective("cost");
    EXPECT_EQ(compile_options(wire, kDevices, topology, 33)->objective, logical::Objective::bytes);
    wire.set_objective("");
    EXPECT_EQ(compile_options(wire, kDevices, topology, 33)->objective, logical::Objective::time);
}

// Two inputs sharing the symbol `tokens`: z = x + y, both [tokens, 2].
constexpr char kSum[] = R"pb(
  inputs {
    name: "x"
    dtype: F32
    dims { name: "tokens" symbol: "tokens" }
    dims { name: "d" fixed: 2 }
  }
  inputs {
    name: "y"
    dtype: F32
    dims { symbol: "tokens" }
    dims { name: "d" fixed: 2 }
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
    inputs: [ "x", "y" ]
  }
  saved: "z"
)pb";

google::protobuf::RepeatedPtrField<v1::NamedTensor>
inputs_of(std::vector<std::pair<std::string, std::vector<int64_t>>> shapes) {
    google::protobuf::RepeatedPtrField<v1::NamedTensor> inputs;
    for (const auto& [name, shape] : shapes) {
        v1::NamedTensor* named = inputs.Add();
        named->set_name(name);
        named->mutable_tensor()->set_dtype(v1::F32);
        for (int64_t size : shape) {
            named->mutable_tensor()->add_shape(size);
        }
    }
    return inputs;
}

TEST_F(RequestShapesTest, InputsShapesBindTheSymbolsDimsLeaveOut) {
    // No dims: x's shape says tokens.
    absl::StatusOr<graphdef::Bindings> bindings =
        bindings_for(*ffn_, {}, inputs_of({{"x", {6, kModel}}}));
    ASSERT_TRUE(bindings.ok()) << bindings.status();
    EXPECT_EQ(*bindings, (graphdef::Bindings{{"tokens", 6}}));
    // Dims may still say it, and agree.
    bindings = bindings_for(*ffn_, dims(6), inputs_of({{"x", {6, kModel}}}));
    ASSERT_TRUE(bindings.ok()) << bindings.status();
    EXPECT_EQ(*bindings, (graphdef::Bindings{{"tokens", 6}}));
    // Dims that disagree: the symbol, the input, its dimension and both sizes.
    EXPECT_EQ(bindings_for(*ffn_, dims(4), inputs_of({{"x", {6, kModel}}})).status().message(),
              "dims: symbol 'tokens' is bound to 4, but input 'x' dimension 0 ('tokens') is 6");
    EXPECT_EQ(bindings_for(*ffn_, {}, inputs_of({{"x", {0, kModel}}})).status().message(),
              "input 'x' dimension 0 ('tokens') binds symbol 'tokens' to 0; sizes must be "
              "between 1 and 1099511627776");
    // Inputs that cannot bind are left to Execute's input checks: the symbol stays unbound.
    for (const auto& inputs : {inputs_of({{"x", {6}}}), inputs_of({{"w1", {6, kFf}}}),
                               inputs_of({{"q", {6, kModel}}})}) {
        EXPECT_EQ(bindings_for(*ffn_, {}, inputs).status().message(),
                  "dims: symbol 'tokens' of model 'ffn' is not bound");
    }

    const v1::GraphDef sum_graph = graphdef::parse_text(kSum).value();
    std::shared_ptr<const Model> sum = store_.register_model("sum", sum_graph, {}).value();
    bindings = bindings_for(*sum, {}, inputs_of({{"x", {3, 2}}, {"y", {3, 2}}}));
    ASSERT_TRUE(bindings.ok()) << bindings.status();
    EXPECT_EQ(*bindings, (graphdef::Bindings{{"tokens", 3}}));
    EXPECT_EQ(bindings_for(*sum, {}, inputs_of({{"x", {3, 2}}, {"y", {5, 2}}})).status().message(),
              "input 'y' dimension 0 binds symbol 'tokens' to 5, but input 'x' dimension 0 "
              "('tokens') binds it to 3");
}

TEST_F(RequestShapesTest, AnExecuteWithoutDimsIsShapedByItsInputs) {
    const RequestShapes checks = shapes();
    const v1::ExecuteRequest req = execute(3);
    absl::StatusOr<RequestShape> shape =
        checks.shape(ffn_, {}, req.inputs(), req.options(), req.sequence_ends());
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->bindings, (graphdef::Bindings{{"tokens", 3}}));
    // A model with batching: one sequence of the tokens the input gives.
    shape = checks.shape(batched_, {}, req.inputs(), req.options(), req.sequence_ends());
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_THAT(shape->sequence_ends, ElementsAre(3));
}

TEST_F(RequestShapesTest, BindingsBindEverySymbolOfTheModelAndNothingElse) {
    absl::StatusOr<graphdef::Bindings> bindings = bindings_for(*ffn_, dims(16));
    ASSERT_TRUE(bindings.ok()) << bindings.status();
    EXPECT_EQ(*bindings, (graphdef::Bindings{{"tokens", 16}}));

    google::protobuf::Map<std::string, int64_t> extra = dims(16);
    extra["heads"] = 2;
    EXPECT_EQ(bindings_for(*ffn_, extra).status().message(),
              "dims: 'heads' is not a symbol of model 'ffn' (symbols: tokens)");
    EXPECT_EQ(bindings_for(*ffn_, dims(0)).status().message(),
              "dims: symbol 'tokens' is bound to 0; sizes must be between 1 and 1099511627776");
    EXPECT_EQ(bindings_for(*ffn_, {}).status().message(),
              "dims: symbol 'tokens' of model 'ffn' is not bound");
}

TEST_F(RequestShapesTest, SequenceEndsCoverTheRequestOfAModelWithBatching) {
    const graphdef::Bindings eight = {{"tokens", 8}};
    EXPECT_THAT(std::string(sequence_ends_for(*ffn_, eight, ends({8}), 2).status().message()),
                HasSubstr("sequence_ends: model 'ffn' has no batching"));
    EXPECT_TRUE(sequence_ends_for(*ffn_, eight, ends({}), 2)->empty());

    EXPECT_THAT(*sequence_ends_for(*batched_, eight, ends({}), 2), ElementsAre(8));
    EXPECT_THAT(*sequence_ends_for(*batched_, eight, ends({3, 8}), 2), ElementsAre(3, 8));
    absl::Status too_many = sequence_ends_for(*batched_, eight, ends({2, 4, 8}), 2).status();
    EXPECT_TRUE(absl::IsResourceExhausted(too_many));
    EXPECT_EQ(too_many.message(),
              "sequence_ends: 3 entries; the server accepts at most 2 (--max_sequence_ends)");
    EXPECT_EQ(sequence_ends_for(*batched_, eight, ends({4, 4}), 2).status().message(),
              "sequence_ends: entry 1 (4) must be greater than entry 0 (4) and at most "
              "'tokens' = 8");
    EXPECT_EQ(sequence_ends_for(*batched_, eight, ends({0, 8}), 2).status().message(),
              "sequence_ends: entry 0 (0) must be greater than 0 and at most 'tokens' = 8");
    EXPECT_EQ(sequence_ends_for(*batched_, eight, ends({4}), 2).status().message(),
              "sequence_ends: the last entry (4) must be 'tokens' = 8: the sequences cover the "
              "request");
}

TEST_F(RequestShapesTest, AShapeIsTheGraphBuiltAndBoundedForTheRequest) {
    absl::StatusOr<RequestShape> shape = shapes().shape(ffn_, dims(16), {}, ends({}));
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->model, ffn_);
    EXPECT_EQ(shape->options.devices, kDevices);
    EXPECT_EQ(shape->bindings, (graphdef::Bindings{{"tokens", 16}}));
    EXPECT_TRUE(shape->sequence_ends.empty());
    const ir::Graph& graph = shape->graph;
    EXPECT_EQ(graph.tensor(*graph.find_tensor("x")).type.shape(),
              (std::vector<int64_t>{16, kModel}));

    absl::StatusOr<RequestShape> batched = shapes().shape(batched_, dims(16), {}, ends({}));
    ASSERT_TRUE(batched.ok()) << batched.status();
    EXPECT_THAT(batched->sequence_ends, ElementsAre(16));
}

TEST_F(RequestShapesTest, AShapeOverTheLimitsNamesTheLimitAndItsFlag) {
    settings_.max_tensor_bytes = 1000;
    absl::Status big = shapes().shape(ffn_, dims(1000), {}, ends({})).status();
    EXPECT_TRUE(absl::IsResourceExhausted(big));
    EXPECT_THAT(std::string(big.message()), StartsWith("model 'ffn' with tokens=1000: tensor '"));
    EXPECT_THAT(std::string(big.message()),
                HasSubstr("the server accepts tensors of at most 1000 bytes "
                          "(--max_tensor_bytes)"));

    settings_.max_tensor_bytes = int64_t{1} << 30;
    settings_.max_operator_devices = 5;
    absl::Status wide = shapes().shape(ffn_, dims(4), {}, ends({})).status();
    EXPECT_TRUE(absl::IsResourceExhausted(wide));
    EXPECT_THAT(std::string(wide.message()), StartsWith("model 'ffn' with tokens=4: "));
    EXPECT_THAT(std::string(wide.message()), HasSubstr("--max_operator_devices"));

    v1::CompileOptions bad;
    bad.set_devices(-1);
    EXPECT_THAT(std::string(shapes().shape(ffn_, dims(4), bad, ends({})).status().message()),
                StartsWith("options.devices: -1 is not between 1"));
}

TEST_F(RequestShapesTest, ExecuteNeedsEveryWeightUploaded) {
    const RequestShape shape = shapes().shape(ffn_, dims(2), {}, ends({})).value();
    absl::Status missing = shapes().execute_outputs(execute(2), *ffn_, shape.graph).status();
    EXPECT_TRUE(absl::IsFailedPrecondition(missing));
    EXPECT_EQ(missing.message(), "weight 'w1' of model 'ffn' has not been uploaded (UploadTensor)");
}

TEST_F(RequestShapesTest, ExecuteInputsAreTheModelsInputsWithTheirTypes) {
    upload("w1", kModel * kFf);
    upload("w2", kFf * kModel);
    const RequestShapes checks = shapes();
    const RequestShape shape = checks.shape(ffn_, dims(2), {}, ends({})).value();
    auto message = [&](const v1::ExecuteRequest& req) {
        return std::string(checks.execute_outputs(req, *ffn_, shape.graph).status().message());
    };
    EXPECT_THAT(*checks.execute_outputs(execute(2), *ffn_, shape.graph), ElementsAre("y"));

    v1::ExecuteRequest req = execute(2);
    req.mutable_inputs(0)->set_name("w1");
    EXPECT_EQ(message(req), "input 'w1' is a weight of model 'ffn'; weights are uploaded with "
                            "UploadTensor, not sent with Execute");
    req.mutable_inputs(0)->set_name("z");
    EXPECT_EQ(message(req), "'z' is not an input of model 'ffn' (inputs: x)");
    req = execute(2);
    *req.add_inputs() = req.inputs(0);
    EXPECT_EQ(message(req), "input 'x' is given twice");
    req = execute(2);
    req.mutable_inputs(0)->mutable_tensor()->set_dtype(v1::F16);
    EXPECT_EQ(message(req), "input 'x' is f32 (f32[tokens=2, d_model=4]); got f16");
    req = execute(2);
    req.mutable_inputs(0)->mutable_tensor()->set_shape(0, 3);
    EXPECT_EQ(message(req), "input 'x' has shape [2, 4] (f32[tokens=2, d_model=4]); got [3, 4]");
    req = execute(2);
    req.mutable_inputs(0)->mutable_tensor()->mutable_data()->pop_back();
    EXPECT_EQ(message(req), "input 'x' f32[tokens=2, d_model=4] takes 32 bytes; got 31");
    req = execute(2);
    req.clear_inputs();
    EXPECT_EQ(message(req), "input 'x' of model 'ffn' is missing (inputs: x)");
}

TEST_F(RequestShapesTest, ExecuteOutputsAreSavedTensorsThatFitInAReply) {
    upload("w1", kModel * kFf);
    upload("w2", kFf * kModel);
    settings_.max_message_bytes = 100;
    const RequestShapes checks = shapes();
    const RequestShape shape = checks.shape(ffn_, dims(2), {}, ends({})).value();
    v1::ExecuteRequest req = execute(2);
    req.add_outputs("y");
    EXPECT_THAT(*checks.execute_outputs(req, *ffn_, shape.graph), ElementsAre("y"));
    req.add_outputs("y");
    EXPECT_EQ(checks.execute_outputs(req, *ffn_, shape.graph).status().message(),
              "output 'y' is requested twice");
    req.clear_outputs();
    req.add_outputs("h");
    EXPECT_EQ(checks.execute_outputs(req, *ffn_, shape.graph).status().message(),
              "output 'h' is not a saved tensor of model 'ffn' (saved: y)");

    const RequestShape large = checks.shape(ffn_, dims(8), {}, ends({})).value();
    absl::Status too_large = checks.execute_outputs(execute(8), *ffn_, large.graph).status();
    EXPECT_TRUE(absl::IsResourceExhausted(too_large));
    EXPECT_EQ(too_large.message(), "the outputs (y) take 128 bytes; a reply may take at most "
                                   "100 (--max_message_bytes)");
}

TEST(RequestText, BindingsAndNamesReadAsAList) {
    EXPECT_EQ(bindings_string({}), "no symbols");
    EXPECT_EQ(bindings_string({{"d", 64}, {"tokens", 128}}), "d=64, tokens=128");
    EXPECT_EQ(names_or_none({}), "none");
    EXPECT_EQ(names_or_none({"a", "b"}), "a, b");
}

} // namespace
} // namespace einsummable::server
