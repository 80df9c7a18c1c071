// server::ModelStore: registration checks, signatures, upload atomicity, offsets, checksums
// and the budget of uploads in progress, unregistering.
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_format.h"
#include "proto/graph_def.h"
#include "server/model_store.h"
#include "server/tensor_limits.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using testing::kFfn;

v1::GraphDef ffn() {
    return graphdef::parse_text(kFfn).value();
}

std::vector<std::byte> bytes_of(size_t n, unsigned char value) {
    return std::vector<std::byte>(n, std::byte{value});
}

ModelStore store() {
    return ModelStore(ModelStoreLimits{1 << 20, 100});
}

TEST(ModelStoreTest, RegistersAndDescribesAModel) {
    ModelStore models = store();
    absl::StatusOr<std::shared_ptr<const Model>> model =
        models.register_model("ffn", ffn(), {"w2", "w1"});
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_THAT((*model)->symbols(), ElementsAre("tokens"));
    EXPECT_THAT((*model)->inputs(), ElementsAre("x"));
    EXPECT_THAT((*model)->weights(), ElementsAre("w1", "w2")); // graph order
    EXPECT_THAT((*model)->saved(), ElementsAre("y"));
    EXPECT_EQ((*model)->fingerprint().size(), 32u);
    EXPECT_EQ((*model)->missing_weight(), "w1");
    ASSERT_NE((*model)->weight_type("w1"), nullptr);
    EXPECT_EQ((*model)->weight_type("w1")->bytes(), 4 * 8 * 4);
    EXPECT_EQ((*model)->weight_type("x"), nullptr);
}

// The model repository's path (Engine::load_model): a model staged and given its weights is not
// registered until replace publishes it, in place of the model with the id given only.
TEST(ModelStoreTest, StagedModelsReplaceOnlyTheModelNamed) {
    ModelStore models = store();
    absl::StatusOr<std::shared_ptr<Model>> staged = models.stage("ffn", ffn(), {"w1", "w2"});
    ASSERT_TRUE(staged.ok()) << staged.status();
    EXPECT_FALSE(models.find("ffn").ok());
    absl::Status wrong = models.set_staged_weight(
        **staged, "w1", std::make_shared<const WeightData>(bytes_of(3, 1)));
    EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(wrong.message(), HasSubstr("weight 'w1' of model 'ffn' takes 128 bytes; got 3"));
    EXPECT_EQ(
        models.set_staged_weight(**staged, "x", std::make_shared<const WeightData>(bytes_of(3, 1)))
            .code(),
        absl::StatusCode::kInvalidArgument);
    ASSERT_TRUE(
        models
            .set_staged_weight(**staged, "w1", std::make_shared<const WeightData>(bytes_of(128, 1)))
            .ok());
    EXPECT_EQ((*staged)->missing_weight(), "w2");
    absl::StatusOr<std::shared_ptr<const Model>> old = models.replace(*staged, 0);
    ASSERT_TRUE(old.ok()) << old.status();
    EXPECT_EQ(*old, nullptr);
    const uint64_t first = models.find("ffn").value()->id();
    EXPECT_NE(first, 0u);
    EXPECT_EQ(models.model_count(), 1);
    const int64_t bytes = models.model_bytes();

    // A second version replaces the first, named by its id, in one step.
    std::shared_ptr<Model> second = models.stage("ffn", ffn(), {"w1", "w2"}).value();
    EXPECT_EQ(models.replace(second, 0).status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(models.replace(second, first + 100).status().code(),
              absl::StatusCode::kAlreadyExists);
    EXPECT_EQ(models.find("ffn").value()->id(), first);
    old = models.replace(second, first);
    ASSERT_TRUE(old.ok()) << old.status();
    ASSERT_NE(*old, nullptr);
    EXPECT_EQ((*old)->id(), first);
    EXPECT_NE(models.find("ffn").value()->id(), first);
    EXPECT_EQ(models.model_count(), 1);
    EXPECT_EQ(models.model_bytes(), bytes);
}

TEST(ModelStoreTest, TheGraphsItBuildsMarkItsWeights) {
    // The planner's index roles (compiler/ir/index_role.h) find x's tokens by its weights.
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    absl::StatusOr<ir::Graph> graph = model->build({{"tokens", 8}});
    ASSERT_TRUE(graph.ok()) << graph.status();
    EXPECT_FALSE(graph->tensor(*graph->find_tensor("x")).weight);
    EXPECT_TRUE(graph->tensor(*graph->find_tensor("w1")).weight);
    EXPECT_TRUE(graph->tensor(*graph->find_tensor("w2")).weight);
}

TEST(ModelStoreTest, SignaturesMarkDimensionsThatDependOnSymbols) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    ASSERT_EQ(model->input_signatures().size(), 1u);
    EXPECT_EQ(model->input_signatures()[0].name, "x");
    EXPECT_EQ(model->input_signatures()[0].dtype, ir::DType::f32);
    EXPECT_THAT(model->input_signatures()[0].shape, ElementsAre(-1, 4));
    ASSERT_EQ(model->output_signatures().size(), 1u);
    EXPECT_EQ(model->output_signatures()[0].name, "y");
    EXPECT_THAT(model->output_signatures()[0].shape, ElementsAre(-1, 4));

    // With every dimension fixed, nothing is -1.
    v1::GraphDef fixed = ffn();
    fixed.mutable_inputs(0)->mutable_dims(0)->set_fixed(6);
    auto fixed_model = models.register_model("fixed", fixed, {"w1", "w2"}).value();
    EXPECT_THAT(fixed_model->input_signatures()[0].shape, ElementsAre(6, 4));
    EXPECT_THAT(fixed_model->output_signatures()[0].shape, ElementsAre(6, 4));
}

TEST(ModelStoreTest, FingerprintDependsOnTheGraphOnly) {
    ModelStore models = store();
    v1::GraphDef other = ffn();
    other.mutable_inputs(1)->mutable_dims(1)->set_fixed(16);
    other.mutable_inputs(2)->mutable_dims(0)->set_fixed(16);
    auto a = models.register_model("a", ffn(), {}).value();
    auto b = models.register_model("b", ffn(), {}).value();
    auto c = models.register_model("c", other, {}).value();
    EXPECT_EQ(a->fingerprint(), b->fingerprint());
    EXPECT_NE(a->fingerprint(), c->fingerprint());
    EXPECT_NE(a->id(), b->id());
}

TEST(ModelStoreTest, RejectsBadRegistrationsNamingTheCulprit) {
    ModelStore models = store();
    struct Case {
        std::string name;
        std::function<void(v1::GraphDef&)> edit;
        std::vector<std::string> weights;
        absl::StatusCode code;
        std::string message;
    };
    const std::vector<Case> cases = {
        {"bad name!", nullptr, {}, absl::StatusCode::kInvalidArgument, "not a valid name"},
        {"", nullptr, {}, absl::StatusCode::kInvalidArgument, "empty"},
        {std::string(129, 'm'), nullptr, {}, absl::StatusCode::kInvalidArgument, "129"},
        {"m", nullptr, {"w3"}, absl::StatusCode::kInvalidArgument, "'w3' is not an input"},
        {"m", nullptr, {"w1", "w1"}, absl::StatusCode::kInvalidArgument, "'w1' is listed twice"},
        {"m",
         nullptr,
         {"x"},
         absl::StatusCode::kInvalidArgument,
         "weight 'x' dimension 0 ('tokens') is symbolic"},
        {"m",
         [](v1::GraphDef& g) { g.mutable_operators(0)->set_kind("conv2d"); },
         {},
         absl::StatusCode::kInvalidArgument,
         "conv2d"},
        {"m",
         [](v1::GraphDef& g) { g.mutable_operators(2)->set_inputs(1, "w9"); },
         {},
         absl::StatusCode::kInvalidArgument,
         "w9"},
        {"m",
         [](v1::GraphDef& g) { g.mutable_inputs(2)->mutable_dims(0)->set_fixed(9); },
         {},
         absl::StatusCode::kInvalidArgument,
         "'y'"},
        {"m",
         [](v1::GraphDef& g) { g.clear_saved(); },
         {},
         absl::StatusCode::kInvalidArgument,
         "saves no tensor"},
        {"m",
         [](v1::GraphDef& g) { g.mutable_inputs(0)->set_dtype(v1::DTYPE_UNSPECIFIED); },
         {},
         absl::StatusCode::kInvalidArgument,
         "'x'"},
        {"m",
         [](v1::GraphDef& g) { g.mutable_inputs(1)->mutable_dims(1)->set_fixed(1 << 20); },
         {"w1"},
         absl::StatusCode::kResourceExhausted,
         "weight 'w1'"},
        {"m",
         [](v1::GraphDef& g) {
             for (int i = 0; i < 4; ++i) {
                 g.mutable_inputs(0)->add_dims()->set_fixed(int64_t{1} << 40);
             }
         },
         {},
         absl::StatusCode::kResourceExhausted,
         "'x'"},
    };
    for (const Case& c : cases) {
        v1::GraphDef graph = ffn();
        if (c.edit) {
            c.edit(graph);
        }
        absl::StatusOr<std::shared_ptr<const Model>> model =
            models.register_model(c.name, graph, c.weights);
        ASSERT_FALSE(model.ok()) << c.message;
        EXPECT_EQ(model.status().code(), c.code) << model.status();
        EXPECT_THAT(std::string(model.status().message()), HasSubstr(c.message));
    }
    EXPECT_TRUE(models.list().empty());
}

TEST(ModelStoreTest, LimitsTheOperatorCount) {
    ModelStore models(ModelStoreLimits{1 << 20, 2});
    absl::StatusOr<std::shared_ptr<const Model>> model = models.register_model("m", ffn(), {});
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(model.status().message()), HasSubstr("3 operators"));
}

// --max_models and --max_model_bytes: a registration past either is refused naming the flag,
// its value and what is registered, the models already there keep their weights, and
// unregistering makes room again. A model counts its serialized graph and every weight it
// declares, uploaded or not.
TEST(ModelStoreTest, LimitsTheModelsAndTheirBytes) {
    const v1::GraphDef graph = ffn();
    const int64_t graph_bytes = static_cast<int64_t>(graph.ByteSizeLong());
    const int64_t weight_bytes = 2 * 4 * 8 * 4; // w1 [4, 8] and w2 [8, 4], f32
    const int64_t model_bytes = graph_bytes + weight_bytes;
    ModelStoreLimits limits{1 << 20, 100};
    limits.max_models = 3;
    limits.max_model_bytes = 2 * model_bytes + graph_bytes; // two, and a third's graph alone
    int64_t gauge_models = 0;
    int64_t gauge_bytes = 0;
    ModelStore models(limits, nullptr, [&](int64_t count, int64_t bytes) {
        gauge_models += count;
        gauge_bytes += bytes;
    });

    auto a = models.register_model("a", graph, {"w1", "w2"});
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ((*a)->graph_bytes(), graph_bytes);
    EXPECT_EQ((*a)->weight_bytes(), weight_bytes);
    auto upload = models.begin_upload("a", "w1", v1::F32, {4, 8});
    ASSERT_TRUE(upload.ok()) << upload.status();
    ASSERT_TRUE((*upload)->append(bytes_of(4 * 8 * 4, 0x3c)).ok());
    ASSERT_TRUE((*upload)->commit().ok());
    ASSERT_TRUE(models.register_model("b", graph, {"w1", "w2"}).ok());
    EXPECT_EQ(models.model_bytes(), 2 * model_bytes);

    absl::StatusOr<std::shared_ptr<const Model>> over =
        models.register_model("c", graph, {"w1", "w2"});
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(over.status().message(),
              absl::StrFormat("model 'c' takes %d bytes (graph %d, weights %d); the 2 models "
                              "registered take %d of the %d bytes the server holds "
                              "(--max_model_bytes=%d); unregister one first",
                              model_bytes, graph_bytes, weight_bytes, 2 * model_bytes,
                              limits.max_model_bytes, limits.max_model_bytes));
    // Without its weights the graph alone fits the bytes; then the count is full.
    ASSERT_TRUE(models.register_model("c", graph, {}).ok());
    over = models.register_model("d", graph, {});
    ASSERT_FALSE(over.ok());
    EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(over.status().message(),
              "model 'd': 3 models are registered, the most the server holds (--max_models=3); "
              "unregister one first");
    // A name already taken is still told so, not that the store is full.
    EXPECT_EQ(models.register_model("a", graph, {}).status().code(),
              absl::StatusCode::kAlreadyExists);

    // Nothing registered was touched: a's weight is the one uploaded.
    EXPECT_EQ(models.model_count(), 3);
    EXPECT_EQ(gauge_models, 3);
    EXPECT_EQ(gauge_bytes, models.model_bytes());
    EXPECT_THAT(models.find("a").value()->weights_loaded(), ElementsAre("w1"));
    EXPECT_EQ(models.find("a").value()->weights_snapshot().values.at("w1")->data()[5],
              std::byte{0x3c});

    // Unregistering frees both the count and the bytes.
    ASSERT_TRUE(models.unregister("b").ok());
    EXPECT_EQ(models.model_bytes(), model_bytes + graph_bytes);
    EXPECT_TRUE(models.register_model("d", graph, {"w1", "w2"}).ok());
    EXPECT_EQ(gauge_models, 3);
    EXPECT_EQ(gauge_bytes, 2 * model_bytes + graph_bytes);
    EXPECT_EQ(gauge_bytes, models.model_bytes());
}

// A packed-attention GraphDef: q, k, v [length, 1, 2] and `ends` one-token
// sequences.
v1::GraphDef packed_attention(int64_t ends) {
    v1::GraphDef graph;
    for (const char* name : {"q", "k", "v"}) {
        v1::TensorDesc* input = graph.add_inputs();
        input->set_name(name);
        input->set_dtype(v1::F32);
        for (auto [dim, size] :
             {std::pair<const char*, int64_t>{"sequence", ends}, {"heads", 1}, {"head_dim", 2}}) {
            v1::Dimension* d = input->add_dims();
            d->set_name(dim);
            d->set_fixed(size);
        }
    }
    v1::OperatorDef* op = graph.add_operators();
    op->set_name("attn");
    op->set_kind("attention");
    op->add_inputs("q");
    op->add_inputs("k");
    op->add_inputs("v");
    v1::IntList* list = (*op->mutable_attributes())["sequence_ends"].mutable_int_list();
    for (int64_t end = 1; end <= ends; ++end) {
        list->add_values(end);
    }
    graph.add_saved("attn");
    return graph;
}

TEST(ModelStoreTest, LimitsTheSequenceEndsOfAnOperator) {
    ModelStoreLimits limits{int64_t{1} << 30, 100};
    limits.max_sequence_ends = 1000;
    ModelStore models(limits);
    EXPECT_TRUE(models.register_model("at_limit", packed_attention(1000), {}).ok());
    absl::StatusOr<std::shared_ptr<const Model>> model =
        models.register_model("over", packed_attention(1001), {});
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(model.status().message(),
              "model 'over': operator 'attn': sequence_ends has 1001 entries; the server accepts "
              "at most 1000 (--max_sequence_ends)");
}

// The 65,536 ends the default allows register in well under a second: the graph built at
// registration cuts nothing, and nothing about it is quadratic in the ends (the plan
// of such a graph once took 26 s; tests/unit/ir/interval_request_test.cc bounds the split itself).
TEST(ModelStoreTest, RegistersTheMostSequenceEndsQuickly) {
    ModelStore models(ModelStoreLimits{int64_t{1} << 30, 100});
    const auto start = std::chrono::steady_clock::now();
    EXPECT_TRUE(
        models.register_model("packed", packed_attention(ModelStoreLimits{}.max_sequence_ends), {})
            .ok());
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(),
              10.0);
}

// A fixed input over --max_tensor_bytes is refused at registration, not only at Compile.
TEST(ModelStoreTest, RefusesAFixedInputOverTheTensorLimit) {
    ModelStore models = store(); // 1 MiB
    v1::GraphDef graph = ffn();
    graph.mutable_inputs(0)->mutable_dims(0)->set_fixed(int64_t{1} << 17); // 2 MiB of f32[·, 4]
    absl::StatusOr<std::shared_ptr<const Model>> model = models.register_model("m", graph, {});
    ASSERT_FALSE(model.ok());
    EXPECT_EQ(model.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(model.status().message(),
              "model 'm': input 'x' takes 2097152 bytes; the server accepts tensors of at most "
              "1048576 bytes (--max_tensor_bytes)");
    // Symbolic inputs are bounded at Compile, with their bindings.
    EXPECT_TRUE(models.register_model("symbolic", ffn(), {}).ok());
    graph.mutable_inputs(0)->mutable_dims(0)->set_fixed(int64_t{1} << 16); // exactly 1 MiB
    EXPECT_TRUE(models.register_model("at_limit", graph, {}).ok());
}

// Names are capped and may hold no control character, in the graph and in the
// weights list; messages show them escaped and cut, on one line.
TEST(ModelStoreTest, RefusesLongNamesAndControlCharacters) {
    ModelStore models = store();
    const auto refused = [&](const std::string& name, const v1::GraphDef& graph,
                             const std::vector<std::string>& weights) {
        absl::StatusOr<std::shared_ptr<const Model>> model =
            models.register_model(name, graph, weights);
        EXPECT_FALSE(model.ok());
        EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
        const std::string message(model.status().message());
        EXPECT_LT(message.size(), 300u) << message.substr(0, 400);
        EXPECT_EQ(message.find_first_of(std::string("\n\r\t\x1b\0", 5)), std::string::npos)
            << message;
        return message;
    };
    v1::GraphDef graph = ffn();
    graph.mutable_inputs(1)->set_name(std::string(20000, 'w'));
    EXPECT_THAT(refused("m", graph, {}),
                AllOf(HasSubstr("input tensor name 'wwww"), HasSubstr("(20000 characters)"),
                      HasSubstr("at most 256")));
    graph = ffn();
    graph.mutable_inputs(1)->set_name("w\n1");
    graph.mutable_operators(0)->set_inputs(1, "w\n1");
    EXPECT_EQ(refused("m", graph, {"w\n1"}),
              "model 'm': input tensor name 'w\\n1' contains control character \\x0a");
    EXPECT_EQ(refused("m", ffn(), {std::string("w1\x1b[2J")}),
              "weights: weight name 'w1\\x1b[2J' contains control character \\x1b");
    EXPECT_THAT(refused("m", ffn(), {std::string(300, 'w')}), HasSubstr("(300 characters)"));
    graph = ffn();
    graph.mutable_operators(1)->set_name(std::string("a\0b", 3));
    EXPECT_THAT(refused("m", graph, {}), HasSubstr("operator 1 name 'a\\x00b'"));
    EXPECT_THAT(refused("bad\nname", ffn(), {}), HasSubstr("model: 'bad\\nname' is not a valid"));
    EXPECT_THAT(std::string(models.find("bad\nname").status().message()),
                HasSubstr("'bad\\nname' is not registered"));
    EXPECT_TRUE(models.list().empty());
}

TEST(ModelStoreTest, OperatorsTimesDevicesIsBounded) {
    EXPECT_TRUE(check_operator_devices(640, 8, 65536).ok());
    EXPECT_TRUE(check_operator_devices(8192, 8, 65536).ok());
    const absl::Status status = check_operator_devices(8193, 8, 65536);
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(status.message(),
              "the graph has 8193 operators and the compile is for 8 devices; operators x devices "
              "is over the 65536 the server compiles (--max_operator_devices)");
    EXPECT_FALSE(check_operator_devices(int64_t{1} << 62, 8, 65536).ok()) << "overflow";
}

TEST(ModelStoreTest, ANameIsRegisteredOnce) {
    ModelStore models = store();
    ASSERT_TRUE(models.register_model("ffn", ffn(), {}).ok());
    absl::StatusOr<std::shared_ptr<const Model>> again = models.register_model("ffn", ffn(), {});
    EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
    ASSERT_TRUE(models.unregister("ffn").ok());
    EXPECT_TRUE(models.register_model("ffn", ffn(), {}).ok());
}

TEST(ModelStoreTest, UnknownModelsAreNotFound) {
    ModelStore models = store();
    EXPECT_EQ(models.find("nope").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(models.unregister("nope").code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(models.begin_upload("nope", "w1", v1::F32, {4, 8}).status().code(),
              absl::StatusCode::kNotFound);
}

TEST(ModelStoreTest, UploadHeaderMustMatchTheWeight) {
    ModelStore models = store();
    ASSERT_TRUE(models.register_model("ffn", ffn(), {"w1", "w2"}).ok());
    auto not_weight = models.begin_upload("ffn", "x", v1::F32, {4, 4});
    EXPECT_EQ(not_weight.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(not_weight.status().message()), HasSubstr("'x' is not a weight"));
    auto dtype = models.begin_upload("ffn", "w1", v1::F16, {4, 8});
    EXPECT_EQ(dtype.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(dtype.status().message()), HasSubstr("weight 'w1' is f32; got f16"));
    auto shape = models.begin_upload("ffn", "w1", v1::F32, {8, 4});
    EXPECT_EQ(shape.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(shape.status().message()), HasSubstr("got [8, 4]"));
}

TEST(ModelStoreTest, AWeightIsVisibleOnlyAfterACompleteUpload) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    const uint64_t generation = model->weights_snapshot().generation;

    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(100, 1)).ok());
    EXPECT_TRUE(model->weights_loaded().empty()); // in progress: not visible
    absl::Status short_commit = upload->commit();
    EXPECT_EQ(short_commit.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(short_commit.message()),
                HasSubstr("takes 128 bytes; the upload sent 100"));
    EXPECT_TRUE(model->weights_loaded().empty());
    EXPECT_EQ(model->weights_snapshot().generation, generation);
    // A failed commit ends the upload too: its bytes are given back, it takes no more.
    EXPECT_EQ(models.upload_bytes_in_flight(), 0);
    EXPECT_EQ(upload->append(bytes_of(28, 1)).code(), absl::StatusCode::kFailedPrecondition);

    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(64, 1)).ok());
    ASSERT_TRUE(upload->append(bytes_of(64, 1)).ok());
    ASSERT_TRUE(upload->commit().ok());
    EXPECT_EQ(upload->received_bytes(), 128);
    EXPECT_THAT(model->weights_loaded(), ElementsAre("w1"));
    EXPECT_EQ(model->missing_weight(), "w2");
    WeightSnapshot first = model->weights_snapshot();
    EXPECT_NE(first.generation, generation);
    EXPECT_EQ(*first.values.at("w1"), bytes_of(128, 1));

    // Too many bytes: rejected, and the good weight stays.
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(120, 2)).ok());
    EXPECT_EQ(upload->append(bytes_of(9, 2)).code(), absl::StatusCode::kInvalidArgument);
    upload.reset(); // abandoned
    WeightSnapshot after = model->weights_snapshot();
    EXPECT_EQ(after.generation, first.generation);
    EXPECT_EQ(*after.values.at("w1"), bytes_of(128, 1));

    // A replacement bumps the generation; a snapshot taken before keeps the old bytes.
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(128, 3)).ok());
    ASSERT_TRUE(upload->commit().ok());
    EXPECT_NE(model->weights_snapshot().generation, first.generation);
    EXPECT_EQ(*model->weights_snapshot().values.at("w1"), bytes_of(128, 3));
    EXPECT_EQ(*first.values.at("w1"), bytes_of(128, 1));
}

TEST(ModelStoreTest, AnUploadToAnUnregisteredModelIsNeverVisible) {
    ModelStore models = store();
    auto old_model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(128, 1)).ok());
    ASSERT_TRUE(models.unregister("ffn").ok());
    auto new_model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    absl::Status commit = upload->commit();
    EXPECT_EQ(commit.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(commit.message()), HasSubstr("unregistered during the upload of 'w1'"));
    EXPECT_TRUE(new_model->weights_loaded().empty());
    EXPECT_TRUE(old_model->weights_loaded().empty());
    // The old model object stays usable by whoever holds it.
    EXPECT_EQ(old_model->name(), "ffn");
}

TEST(ModelStoreTest, ConcurrentUploadsEachCommitWhole) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&, t] {
            auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
            for (int chunk = 0; chunk < 4; ++chunk) {
                ASSERT_TRUE(upload->append(bytes_of(32, static_cast<unsigned char>(t))).ok());
            }
            ASSERT_TRUE(upload->commit().ok());
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    const WeightBytes weight = model->weights_snapshot().values.at("w1");
    const absl::Span<const std::byte> bytes = weight->span();
    ASSERT_EQ(bytes.size(), 128u);
    EXPECT_EQ(std::count(bytes.begin(), bytes.end(), bytes[0]), 128); // one upload, not a mix
}

// CRC-32 (IEEE, reflected, as zlib computes it), bit by bit: an independent reference for the
// store's zlib-based check.
uint32_t reference_crc32(const std::vector<std::byte>& bytes) {
    uint32_t crc = 0xffffffffu;
    for (std::byte byte : bytes) {
        crc ^= static_cast<uint32_t>(byte);
        for (int bit = 0; bit < 8; ++bit) {
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1u)));
        }
    }
    return ~crc;
}

std::vector<std::byte> counting_bytes(size_t n) {
    std::vector<std::byte> bytes(n);
    for (size_t i = 0; i < n; ++i) {
        bytes[i] = std::byte{static_cast<unsigned char>(i * 7 + 1)};
    }
    return bytes;
}

absl::Span<const std::byte> slice(const std::vector<std::byte>& bytes, size_t begin, size_t n) {
    return absl::Span<const std::byte>(bytes).subspan(begin, n);
}

TEST(ModelStoreTest, ReferenceCrc32IsZlibs) {
    const std::string check = "123456789"; // the CRC-32 catalogue's check value
    std::vector<std::byte> bytes(check.size());
    std::memcpy(bytes.data(), check.data(), check.size());
    EXPECT_EQ(reference_crc32(bytes), 0xcbf43926u);
}

TEST(ModelStoreTest, ChunksWithOffsetsMustFollowEachOther) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    const std::vector<std::byte> bytes = counting_bytes(128);

    // In order: accepted.
    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append({}, 0).ok()); // a header chunk without data
    for (int64_t offset = 0; offset < 128; offset += 32) {
        ASSERT_TRUE(upload->append(slice(bytes, offset, 32), offset).ok()) << offset;
    }
    ASSERT_TRUE(upload->commit().ok());
    EXPECT_EQ(upload->chunks(), 5);
    EXPECT_EQ(*model->weights_snapshot().values.at("w1"), bytes);

    // Chunk 2 repeated, chunk 3 lost: the right total, refused at the repeat.
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(slice(bytes, 0, 32), 0).ok());
    ASSERT_TRUE(upload->append(slice(bytes, 32, 32), 32).ok());
    absl::Status repeated = upload->append(slice(bytes, 32, 32), 32);
    EXPECT_EQ(repeated.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(repeated.message(), "chunk 2 of the upload of 'w1' starts at byte 32; expected 64 "
                                  "(a chunk was lost or repeated)");

    // A lost chunk: the next one starts too far.
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(slice(bytes, 0, 32), 0).ok());
    absl::Status lost = upload->append(slice(bytes, 64, 32), 64);
    EXPECT_EQ(lost.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(lost.message()),
                HasSubstr("chunk 1 of the upload of 'w1' starts at byte 64; expected 32"));

    // Offsets on some chunks only: refused either way round.
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(slice(bytes, 0, 32), 0).ok());
    absl::Status missing = upload->append(slice(bytes, 32, 32));
    EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(missing.message()),
                HasSubstr("chunk 1 of the upload of 'w1' carries no offset; the first chunk "
                          "carried one"));
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(slice(bytes, 0, 32)).ok());
    absl::Status extra = upload->append(slice(bytes, 32, 32), 32);
    EXPECT_EQ(extra.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(extra.message()),
                HasSubstr("chunk 1 of the upload of 'w1' carries an offset; the first chunk "
                          "carried none"));
    upload.reset();

    // None of the refused uploads replaced the weight.
    EXPECT_EQ(*model->weights_snapshot().values.at("w1"), bytes);
}

TEST(ModelStoreTest, UploadsWithoutOffsetsOrChecksumStillWork) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    const std::vector<std::byte> bytes = counting_bytes(128);
    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(slice(bytes, 0, 100)).ok());
    ASSERT_TRUE(upload->append(slice(bytes, 100, 28)).ok());
    ASSERT_TRUE(upload->commit().ok());
    EXPECT_EQ(*model->weights_snapshot().values.at("w1"), bytes);
}

TEST(ModelStoreTest, AChecksumMismatchIsDataLossAndReplacesNothing) {
    ModelStore models = store();
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    const std::vector<std::byte> bytes = counting_bytes(128);
    const uint32_t crc = reference_crc32(bytes);

    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}, crc).value();
    for (int64_t offset = 0; offset < 128; offset += 64) {
        ASSERT_TRUE(upload->append(slice(bytes, offset, 64), offset).ok());
    }
    ASSERT_TRUE(upload->commit().ok());
    const uint64_t generation = model->weights_snapshot().generation;

    // One byte flipped on the way: the right length and offsets, the wrong checksum.
    std::vector<std::byte> corrupted = bytes;
    corrupted[77] ^= std::byte{0x10};
    upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}, crc).value();
    ASSERT_TRUE(upload->append(slice(corrupted, 0, 64), 0).ok());
    ASSERT_TRUE(upload->append(slice(corrupted, 64, 64), 64).ok());
    absl::Status mismatch = upload->commit();
    EXPECT_EQ(mismatch.code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(mismatch.message(),
              absl::StrFormat("weight 'w1' of model 'ffn': the bytes received have CRC-32 0x%08x; "
                              "the upload's header gave 0x%08x (the data was corrupted on the "
                              "way; the weight is unchanged)",
                              reference_crc32(corrupted), crc));
    EXPECT_EQ(models.upload_bytes_in_flight(), 0); // given back at commit, success or not
    upload.reset();
    EXPECT_EQ(model->weights_snapshot().generation, generation);
    EXPECT_EQ(*model->weights_snapshot().values.at("w1"), bytes);
}

TEST(ModelStoreTest, UploadsInProgressHoldAtMostTheBudget) {
    int64_t gauge = 0; // what the metrics callback was told, summed
    ModelStore models(ModelStoreLimits{1 << 20, 100, 150}, [&](int64_t delta) { gauge += delta; });
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();

    auto first = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    auto second = models.begin_upload("ffn", "w2", v1::F32, {8, 4}).value();
    EXPECT_EQ(models.upload_bytes_in_flight(), 0); // a header alone holds nothing
    ASSERT_TRUE(first->append(bytes_of(100, 1), 0).ok());
    EXPECT_EQ(first->reserved_bytes(), 100);
    EXPECT_EQ(models.upload_bytes_in_flight(), 100);
    EXPECT_EQ(gauge, 100);

    absl::Status refused = second->append(bytes_of(64, 2), 0);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(refused.message(),
              "chunk 0 of the upload of 'w2' needs 64 more bytes, but uploads in progress hold "
              "100 bytes; the server holds at most 150 (--max_upload_bytes_in_flight); retry "
              "when they finish");
    EXPECT_EQ(second->received_bytes(), 0);
    EXPECT_EQ(models.upload_bytes_in_flight(), 100);

    // The first grows within the budget and commits: its bytes now belong to the weight.
    ASSERT_TRUE(first->append(bytes_of(28, 1), 100).ok());
    EXPECT_EQ(models.upload_bytes_in_flight(), 128);
    ASSERT_TRUE(first->commit().ok());
    EXPECT_EQ(models.upload_bytes_in_flight(), 0);
    EXPECT_EQ(gauge, 0);

    // The budget is free again; an abandoned upload gives its bytes back when dropped.
    auto third = models.begin_upload("ffn", "w2", v1::F32, {8, 4}).value();
    ASSERT_TRUE(third->append(bytes_of(128, 3)).ok());
    EXPECT_EQ(models.upload_bytes_in_flight(), 128);
    third.reset();
    EXPECT_EQ(models.upload_bytes_in_flight(), 0);
    // A failed append (past the weight's size) reserves nothing.
    auto fourth = models.begin_upload("ffn", "w2", v1::F32, {8, 4}).value();
    EXPECT_EQ(fourth->append(bytes_of(129, 4)).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(models.upload_bytes_in_flight(), 0);
    fourth.reset();
    EXPECT_EQ(gauge, 0);
    EXPECT_THAT(model->weights_loaded(), ElementsAre("w1"));
}

TEST(ModelStoreTest, AChunkThatFitsTheBudgetOnlyWithoutDoublingIsAccepted) {
    ModelStore models(ModelStoreLimits{1 << 20, 100, 150});
    auto model = models.register_model("ffn", ffn(), {"w1", "w2"}).value();
    auto other = models.begin_upload("ffn", "w2", v1::F32, {8, 4}).value();
    ASSERT_TRUE(other->append(bytes_of(100, 2)).ok());
    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
    ASSERT_TRUE(upload->append(bytes_of(40, 1), 0).ok());
    // 140 held: doubling to 80 would take 40 more, past 150; this chunk alone takes 10.
    ASSERT_TRUE(upload->append(bytes_of(10, 1), 40).ok());
    EXPECT_EQ(upload->reserved_bytes(), 50);
    EXPECT_EQ(models.upload_bytes_in_flight(), 150);
    EXPECT_EQ(upload->append(bytes_of(1, 1), 50).code(), absl::StatusCode::kResourceExhausted);
}

TEST(ModelStoreTest, AWeightLargerThanTheWholeBudgetIsRefusedAtItsHeader) {
    ModelStore models(ModelStoreLimits{1 << 20, 100, 100});
    ASSERT_TRUE(models.register_model("ffn", ffn(), {"w1", "w2"}).ok());
    auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8});
    EXPECT_EQ(upload.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(upload.status().message()),
                HasSubstr("weight 'w1' takes 128 bytes; uploads in progress may hold at most 100 "
                          "bytes together (--max_upload_bytes_in_flight)"));
}

TEST(ModelStoreTest, ConcurrentUploadsNeverExceedTheBudget) {
    // 8 threads, each uploading a 128-byte weight in 32-byte chunks against a 300-byte budget:
    // some are refused, the budget is never overdrawn, and all of it comes back.
    std::atomic<int64_t> gauge{0};
    std::atomic<int64_t> peak{0};
    ModelStore models(ModelStoreLimits{1 << 20, 100, 300}, [&](int64_t delta) { gauge += delta; });
    auto sample = [&] {
        const int64_t now = models.upload_bytes_in_flight();
        int64_t seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
    };
    ASSERT_TRUE(models.register_model("ffn", ffn(), {"w1", "w2"}).ok());
    std::atomic<int> committed{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
        threads.emplace_back([&] {
            for (int round = 0; round < 50; ++round) {
                auto upload = models.begin_upload("ffn", "w1", v1::F32, {4, 8}).value();
                bool ok = true;
                for (int64_t offset = 0; offset < 128 && ok; offset += 32) {
                    ok = upload->append(bytes_of(32, 1), offset).ok();
                    sample();
                }
                if (ok && upload->commit().ok()) {
                    ++committed;
                }
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_GT(committed.load(), 0);
    EXPECT_LE(peak.load(), 300);
    EXPECT_EQ(gauge.load(), 0);
    EXPECT_EQ(models.upload_bytes_in_flight(), 0);
}

} // namespace
} // namespace einsummable::server
