// server::ModelRepository on the CPU backend: a repository written to a temporary directory
// (graph.pbtxt, safetensors weights, config.pbtxt) loaded into an Engine and executed against
// the reference; the version rules; each bad weight file making its model UNAVAILABLE with a
// message naming the file and the tensor while a good model beside it serves; RegisterModel
// still working beside the repository; loads at run time (RepositoryModelLoad) swapping a new
// version in, a bad new version leaving the old serving and naming the culprit, unloads, the
// index, and the name space shared with RegisterModel.
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "server/engine.h"
#include "server/kserve.h"
#include "server/model_repository.h"
#include "server/safetensors.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

namespace fs = std::filesystem;
using testing::as_bytes;
using testing::as_floats;
using ::testing::HasSubstr;
using testing::kFf;
using testing::kFfn;
using testing::kModel;
using testing::random_values;
using testing::reference;

void write_text(const fs::path& path, const std::string& text) {
    fs::create_directories(path.parent_path());
    std::ofstream(path) << text;
}

std::span<const std::byte> bytes_of(const std::vector<float>& values) {
    return {reinterpret_cast<const std::byte*>(values.data()), values.size() * sizeof(float)};
}

// The file mapped at `address` in this process (/proc/self/maps), or "" when none is.
std::string mapped_file(const void* address) {
    const auto at = reinterpret_cast<uintptr_t>(address);
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream fields(line);
        std::string range, perms, offset, device, inode, path;
        fields >> range >> perms >> offset >> device >> inode;
        std::getline(fields >> std::ws, path);
        const size_t dash = range.find('-');
        const uintptr_t begin = std::stoull(range.substr(0, dash), nullptr, 16);
        const uintptr_t end = std::stoull(range.substr(dash + 1), nullptr, 16);
        if (begin <= at && at < end) {
            return path;
        }
    }
    return "";
}

class ModelRepositoryTest : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() /
                ("model_repository_test_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_);
        EngineOptions options;
        options.version = "test";
        options.topology = runtime::default_topology(2);
        options.plan_cache_entries = 8;
        options.synthesis_iterations = 50;
        metrics_ = std::make_shared<Metrics>();
        engine_ = std::make_shared<Engine>(options, runtime::cpu::make_cpu_backend({2, 1}), nullptr,
                                           metrics_);
    }
    void TearDown() override { fs::remove_all(root_); }

    // The FFN at DIR/<model>/<version>/ with `tensors` as model.safetensors (default: w1, w2).
    void write_model(const std::string& model, const std::string& version,
                     std::vector<SafetensorsTensor> tensors = {}) {
        const fs::path dir = root_ / model / version;
        write_text(dir / "graph.pbtxt", kFfn);
        if (tensors.empty()) {
            tensors = default_tensors();
        }
        ASSERT_TRUE(write_safetensors(dir / "model.safetensors", tensors).ok());
    }
    std::vector<SafetensorsTensor> default_tensors() const {
        return {{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(w1_)},
                {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}};
    }

    std::map<std::string, RepositoryModel> load() {
        repository_ = std::make_unique<ModelRepository>(root_, engine_, metrics_);
        EXPECT_TRUE(repository_->load_all().ok());
        EXPECT_TRUE(repository_->settled());
        std::map<std::string, RepositoryModel> by_name;
        for (const RepositoryModel& model : repository_->models()) {
            by_name[model.name] = model;
        }
        return by_name;
    }

    // Executes `model` on 3 tokens and compares with the reference of `w1` (default w1_), w2_.
    void expect_serves(const std::string& model, const std::vector<float>* w1 = nullptr) {
        const int tokens = 3;
        const std::vector<float> x = random_values(tokens * kModel, 7);
        absl::StatusOr<v1::ExecuteResponse> resp =
            engine_->execute(testing::ffn_execute_request(model, tokens, x));
        ASSERT_TRUE(resp.ok()) << model << ": " << resp.status();
        ASSERT_EQ(resp->outputs_size(), 1);
        const std::vector<float> got = as_floats(resp->outputs(0).tensor().data());
        const std::vector<float> want = reference(x, w1 != nullptr ? *w1 : w1_, w2_, tokens);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i) {
            EXPECT_NEAR(got[i], want[i], 1e-5) << model << " element " << i;
        }
    }

    void expect_unavailable(const std::map<std::string, RepositoryModel>& models,
                            const std::string& model, const std::string& file,
                            const std::string& message) {
        ASSERT_EQ(models.count(model), 1u) << model;
        const RepositoryModel& got = models.at(model);
        EXPECT_EQ(got.state, RepositoryModel::State::unavailable) << model;
        EXPECT_THAT(got.reason, HasSubstr(file)) << model;
        EXPECT_THAT(got.reason, HasSubstr(message)) << model;
        EXPECT_FALSE(engine_->find_model(model).ok()) << model << " is registered";
    }

    fs::path root_;
    std::shared_ptr<Metrics> metrics_;
    std::shared_ptr<Engine> engine_;
    std::unique_ptr<ModelRepository> repository_;
    std::vector<float> w1_ = random_values(kModel * kFf, 1);
    std::vector<float> w2_ = random_values(kFf * kModel, 2);
    std::vector<float> wrong_ = random_values(kModel * kFf, 3);
};

std::map<std::string, RepositoryModel> by_name(const std::vector<RepositoryModel>& models) {
    std::map<std::string, RepositoryModel> out;
    for (const RepositoryModel& model : models) {
        out[model.name] = model;
    }
    return out;
}

TEST_F(ModelRepositoryTest, LoadSwapsInTheNewVersion) {
    write_model("ffn", "1");
    load();
    expect_serves("ffn");
    const std::shared_ptr<const Model> old = engine_->find_model("ffn").value();

    // Version 2 holds other weights: w1 is wrong_.
    write_model("ffn", "2",
                {{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(wrong_)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("ffn");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->state, RepositoryModel::State::ready);
    EXPECT_EQ(loaded->version, 2);
    EXPECT_EQ(loaded->reason, "");
    const std::shared_ptr<const Model> now = engine_->find_model("ffn").value();
    EXPECT_NE(now->id(), old->id());
    EXPECT_EQ(loaded->id, now->id());
    expect_serves("ffn", &wrong_);
    // A request that found the old version before the swap still holds it, whole.
    EXPECT_FALSE(old->missing_weight().has_value());
    EXPECT_EQ(*old->weights_snapshot().values.at("w1"),
              std::vector<std::byte>(bytes_of(w1_).begin(), bytes_of(w1_).end()));
    EXPECT_EQ(engine_->list_models().models_size(), 1);
    EXPECT_EQ(by_name(repository_->index(false)).at("ffn").version, 2);
}

// The swap leaves no gap: executes running on other threads while versions 2..5 are loaded one
// after another never fail (no NOT_FOUND, no missing weight) and each answers with the weights
// of one version whole (w1_ for odd versions, wrong_ for even ones).
TEST_F(ModelRepositoryTest, ExecutesDuringReloadsSeeOneVersionWhole) {
    write_model("ffn", "1");
    load();
    const int tokens = 3;
    const std::vector<float> x = random_values(tokens * kModel, 11);
    const std::vector<float> odd = reference(x, w1_, w2_, tokens);
    const std::vector<float> even = reference(x, wrong_, w2_, tokens);
    auto matches = [](const std::vector<float>& got, const std::vector<float>& want) {
        if (got.size() != want.size()) {
            return false;
        }
        for (size_t i = 0; i < got.size(); ++i) {
            if (std::abs(got[i] - want[i]) > 1e-5) {
                return false;
            }
        }
        return true;
    };
    std::atomic<bool> done{false};
    std::atomic<int> executed{0};
    std::vector<std::string> failures(2);
    std::vector<std::thread> threads;
    for (int t = 0; t < 2; ++t) {
        threads.emplace_back([&, t] {
            while (!done.load() && failures[t].empty()) {
                absl::StatusOr<v1::ExecuteResponse> resp =
                    engine_->execute(testing::ffn_execute_request("ffn", tokens, x));
                if (!resp.ok()) {
                    failures[t] = std::string(resp.status().message());
                    break;
                }
                const std::vector<float> got = as_floats(resp->outputs(0).tensor().data());
                if (!matches(got, odd) && !matches(got, even)) {
                    failures[t] = "an answer of neither version's weights";
                }
                ++executed;
            }
        });
    }
    // Each version is swapped in once an execute has finished since the last swap, so the
    // executes run on every version and across every swap, whatever the threads' timing.
    auto executes_since = [&](int before) {
        while (executed.load() <= before && failures[0].empty() && failures[1].empty()) {
            std::this_thread::yield();
        }
    };
    for (int version = 2; version <= 5; ++version) {
        executes_since(executed.load());
        const std::vector<float>& w1 = version % 2 == 0 ? wrong_ : w1_;
        write_model("ffn", std::to_string(version),
                    {{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(w1)},
                     {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
        absl::StatusOr<RepositoryModel> loaded = repository_->load_model("ffn");
        ASSERT_TRUE(loaded.ok()) << loaded.status();
        EXPECT_EQ(loaded->version, version);
    }
    executes_since(executed.load());
    done = true;
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(failures[0], "");
    EXPECT_EQ(failures[1], "");
    expect_serves("ffn"); // version 5: w1_
}

TEST_F(ModelRepositoryTest, BadNewVersionKeepsTheOldServing) {
    write_model("ffn", "1");
    load();
    const uint64_t old_id = engine_->find_model("ffn").value()->id();
    // Version 2's w1 is transposed.
    write_model("ffn", "2",
                {{"w1", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w1_)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("ffn");
    ASSERT_FALSE(loaded.ok());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(loaded.status().message(), HasSubstr("2/model.safetensors: tensor 'w1' has shape"));
    EXPECT_EQ(engine_->find_model("ffn").value()->id(), old_id);
    expect_serves("ffn");
    const RepositoryModel state = by_name(repository_->index(false)).at("ffn");
    EXPECT_EQ(state.state, RepositoryModel::State::ready);
    EXPECT_EQ(state.version, 1);
    EXPECT_THAT(state.reason, HasSubstr("loading version 2 failed, version 1 serves"));
    EXPECT_THAT(state.reason, HasSubstr("tensor 'w1'"));

    // Fixed on disk, the next load swaps it in and clears the reason.
    write_model("ffn", "2");
    loaded = repository_->load_model("ffn");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->version, 2);
    EXPECT_EQ(loaded->reason, "");
    EXPECT_NE(engine_->find_model("ffn").value()->id(), old_id);
    expect_serves("ffn");
}

TEST_F(ModelRepositoryTest, UnloadThenLoadAgain) {
    write_model("ffn", "1");
    write_model("other", "1");
    load();
    ASSERT_TRUE(repository_->unload_model("ffn").ok());
    EXPECT_FALSE(engine_->find_model("ffn").ok());
    std::map<std::string, RepositoryModel> index = by_name(repository_->index(false));
    EXPECT_EQ(index.at("ffn").state, RepositoryModel::State::unavailable);
    EXPECT_EQ(index.at("ffn").reason, "unloaded");
    EXPECT_EQ(index.at("other").state, RepositoryModel::State::ready);
    index = by_name(repository_->index(true));
    EXPECT_EQ(index.count("ffn"), 0u);
    EXPECT_EQ(index.count("other"), 1u);
    EXPECT_EQ(repository_->unload_model("nothing").code(), absl::StatusCode::kNotFound);

    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("ffn");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->state, RepositoryModel::State::ready);
    expect_serves("ffn");
}

TEST_F(ModelRepositoryTest, IndexAndLoadOfModelsAddedSinceStart) {
    write_model("ffn", "1");
    load();
    write_model("later", "3");
    std::map<std::string, RepositoryModel> index = by_name(repository_->index(false));
    ASSERT_EQ(index.count("later"), 1u);
    EXPECT_EQ(index.at("later").state, RepositoryModel::State::unavailable);
    EXPECT_EQ(index.at("later").reason, "not loaded");
    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("later");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->version, 3);
    expect_serves("later");
    EXPECT_EQ(repository_->load_model("absent").status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(repository_->load_model("..").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ModelRepositoryTest, SharesTheNameSpaceWithRegisterModel) {
    load();
    v1::RegisterModelRequest req;
    req.set_model("ffn");
    *req.mutable_graph() = graphdef::parse_text(kFfn).value();
    req.add_weights("w1");
    req.add_weights("w2");
    ASSERT_TRUE(engine_->register_model(req).ok());
    const uint64_t id = engine_->find_model("ffn").value()->id();
    write_model("ffn", "1");
    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("ffn");
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kAlreadyExists);
    EXPECT_THAT(loaded.status().message(), HasSubstr("registered over RegisterModel"));
    EXPECT_EQ(engine_->find_model("ffn").value()->id(), id);
    EXPECT_EQ(by_name(repository_->index(false)).at("ffn").state,
              RepositoryModel::State::unavailable);
    // Unloading does not unregister what the repository did not register.
    ASSERT_TRUE(repository_->unload_model("ffn").ok());
    EXPECT_EQ(engine_->find_model("ffn").value()->id(), id);
}

TEST_F(ModelRepositoryTest, LoadsAndServesWithoutAClient) {
    write_model("ffn", "1");
    const std::map<std::string, RepositoryModel> models = load();
    ASSERT_EQ(models.count("ffn"), 1u);
    EXPECT_EQ(models.at("ffn").state, RepositoryModel::State::ready) << models.at("ffn").reason;
    EXPECT_EQ(models.at("ffn").version, 1);
    EXPECT_EQ(models.at("ffn").bytes, 2 * kModel * kFf * 4);
    expect_serves("ffn");
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_repository_models{state=\"READY\"} 1"));
    EXPECT_THAT(text, HasSubstr("einsummable_repository_models{state=\"LOADING\"} 0"));
    EXPECT_THAT(text, HasSubstr("einsummable_repository_load_seconds{model=\"ffn\"}"));
}

TEST_F(ModelRepositoryTest, ServesTheGreatestNumericVersion) {
    // Version 1 holds wrong weights, 2 the right ones; "01" and "abc" are not versions (and
    // hold files that would fail to load).
    write_model("ffn", "1",
                {{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(wrong_)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    write_model("ffn", "2");
    write_text(root_ / "ffn" / "01" / "graph.pbtxt", "not a graph");
    write_text(root_ / "ffn" / "abc" / "graph.pbtxt", "not a graph");
    write_text(root_ / "ffn" / "100", "a file, not a version directory");
    EXPECT_EQ(latest_version(root_ / "ffn").value(), 2);
    const std::map<std::string, RepositoryModel> models = load();
    EXPECT_EQ(models.at("ffn").state, RepositoryModel::State::ready) << models.at("ffn").reason;
    EXPECT_EQ(models.at("ffn").version, 2);
    expect_serves("ffn");
}

TEST_F(ModelRepositoryTest, NoVersionIsUnavailable) {
    write_text(root_ / "empty" / "01" / "graph.pbtxt", kFfn);
    write_model("good", "1");
    const std::map<std::string, RepositoryModel> models = load();
    expect_unavailable(models, "empty", "empty", "no version directory");
    expect_serves("good");
}

TEST_F(ModelRepositoryTest, BadWeightsMakeOnlyTheirModelUnavailable) {
    const std::vector<float> half(kModel * kFf / 2, 0.5f);
    const std::vector<float> extra(3, 1.0f);
    write_model("good", "1");
    // Without a config w2 would be an input Execute gives; the config makes it a weight.
    write_model("missing", "1", {{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(w1_)}});
    write_text(root_ / "missing" / "config.pbtxt", R"pb(weights: [ "w1", "w2" ])pb");
    std::vector<SafetensorsTensor> with_extra = default_tensors();
    with_extra.push_back({"bias", SafetensorsDtype::f32, {3}, bytes_of(extra)});
    write_model("extra", "1", with_extra);
    write_model("shape", "1",
                {{"w1", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w1_)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    write_model("dtype", "1",
                {{"w1", SafetensorsDtype::f16, {kModel, kFf}, bytes_of(half)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    write_model("integer", "1",
                {{"w1", SafetensorsDtype::i32, {kModel, kFf}, bytes_of(w1_)},
                 {"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}});
    // w2 in a second file as well as the first.
    write_model("twice", "1");
    ASSERT_TRUE(write_safetensors(root_ / "twice" / "1" / "more.safetensors",
                                  {{{"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}}})
                    .ok());
    write_model("graph", "1");
    write_text(root_ / "graph" / "1" / "graph.pbtxt", "inputs { name: ");

    const std::map<std::string, RepositoryModel> models = load();
    ASSERT_EQ(models.size(), 8u);
    EXPECT_EQ(models.at("good").state, RepositoryModel::State::ready) << models.at("good").reason;
    expect_unavailable(models, "missing", "missing/1",
                       "weight 'w2' of the graph is in no "
                       "safetensors file (files: "
                       "model.safetensors)");
    expect_unavailable(models, "extra", "extra/1/model.safetensors",
                       "tensor 'bias' is not a weight of the graph");
    expect_unavailable(models, "shape", "shape/1/model.safetensors",
                       "tensor 'w1' has shape [8, 4], but the graph declares [4, 8]");
    expect_unavailable(models, "dtype", "dtype/1/model.safetensors",
                       "tensor 'w1' is F16, but the graph declares F32");
    expect_unavailable(models, "integer", "integer/1/model.safetensors",
                       "tensor 'w1' is I32, but the graph declares F32");
    expect_unavailable(models, "twice", "twice/1/model.safetensors", "tensor 'w2' is also in");
    expect_unavailable(models, "graph", "graph/1/graph.pbtxt", "line 1");
    expect_serves("good");
    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_repository_models{state=\"READY\"} 1"));
    EXPECT_THAT(text, HasSubstr("einsummable_repository_models{state=\"UNAVAILABLE\"} 7"));
}

TEST_F(ModelRepositoryTest, ConfigGivesWeightsAndBatching) {
    write_model("ffn", "1");
    write_text(root_ / "ffn" / "config.pbtxt", R"pb(
      weights: [ "w1", "w2" ]
      batching { dimension: "tokens" max_batch_size: 4 }
    )pb");
    // A config naming an input that is not in the graph.
    write_model("typo", "1");
    write_text(root_ / "typo" / "config.pbtxt", R"pb(weights: [ "w1", "w3" ])pb");
    // A config leaving w2 an input Execute gives: the file's w2 is then an extra tensor.
    write_model("input", "1");
    write_text(root_ / "input" / "config.pbtxt", R"pb(weights: "w1")pb");
    // A config giving the graph.
    write_model("graphful", "1");
    write_text(root_ / "graphful" / "config.pbtxt", R"pb(model: "x")pb");

    const std::map<std::string, RepositoryModel> models = load();
    EXPECT_EQ(models.at("ffn").state, RepositoryModel::State::ready) << models.at("ffn").reason;
    ASSERT_TRUE(engine_->find_model("ffn").ok());
    ASSERT_TRUE((*engine_->find_model("ffn"))->batching().has_value());
    EXPECT_EQ((*engine_->find_model("ffn"))->batching()->max_size, 4);
    expect_serves("ffn");
    expect_unavailable(models, "typo", "typo/config.pbtxt",
                       "weight 'w3' is not an input of the graph");
    expect_unavailable(models, "input", "input/1/model.safetensors",
                       "tensor 'w2' is not a weight of the graph (config.pbtxt makes it an "
                       "input Execute gives)");
    expect_unavailable(models, "graphful", "graphful/config.pbtxt", "gives `model` or `graph`");
}

// config.pbtxt's `options` are the model's compile options: its requests' defaults. Bad ones
// make only their model unavailable, naming the model and the field.
TEST_F(ModelRepositoryTest, ConfigGivesCompileOptions) {
    write_model("ffn", "1");
    write_text(root_ / "ffn" / "config.pbtxt", R"pb(options { planner: "megatron" })pb");
    write_model("bad", "1");
    write_text(root_ / "bad" / "config.pbtxt", R"pb(options { schedule: "fast" })pb");
    const std::map<std::string, RepositoryModel> models = load();
    EXPECT_EQ(models.at("ffn").state, RepositoryModel::State::ready) << models.at("ffn").reason;
    ASSERT_TRUE(engine_->find_model("ffn").ok());
    EXPECT_EQ((*engine_->find_model("ffn"))->options().planner(), "megatron");
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 3;
    absl::StatusOr<v1::CompileResponse> compiled = engine_->compile(compile);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_THAT(compiled->plan_key(), HasSubstr(" planner=megatron "));
    expect_serves("ffn");
    expect_unavailable(models, "bad", "bad",
                       "model 'bad': options.schedule: 'fast' is not a schedule");
}

TEST_F(ModelRepositoryTest, RegisteringBesideTheRepositoryStillWorks) {
    write_model("ffn", "1");
    EXPECT_EQ(load().at("ffn").state, RepositoryModel::State::ready);
    v1::RegisterModelRequest req;
    req.set_model("client");
    *req.mutable_graph() = graphdef::parse_text(kFfn).value();
    req.add_weights("w1");
    req.add_weights("w2");
    ASSERT_TRUE(engine_->register_model(req).ok());
    ASSERT_TRUE(testing::upload_f32(*engine_, "client", "w1", w1_, {kModel, kFf}).ok());
    ASSERT_TRUE(testing::upload_f32(*engine_, "client", "w2", w2_, {kFf, kModel}).ok());
    expect_serves("client");
    expect_serves("ffn");
}

// A loaded weight is a view into its safetensors file's mapping, not a copy: its bytes lie
// inside the mapping of that file, which the weight keeps alive after the load returned (and
// after the file is removed from the directory), and the model serves from it.
TEST_F(ModelRepositoryTest, WeightsAreViewsIntoTheMappedFileThatStayMapped) {
    write_model("ffn", "1");
    ASSERT_EQ(load().at("ffn").state, RepositoryModel::State::ready);
    const fs::path file = fs::canonical(root_ / "ffn" / "1" / "model.safetensors");
    {
        const WeightSnapshot snapshot = engine_->find_model("ffn").value()->weights_snapshot();
        ASSERT_EQ(snapshot.values.size(), 2u);
        for (const auto& [name, bytes] : snapshot.values) {
            EXPECT_FALSE(bytes->owns_bytes()) << name;
            EXPECT_EQ(mapped_file(bytes->data()), file.string()) << name;
            EXPECT_EQ(mapped_file(bytes->data() + bytes->size() - 1), file.string()) << name;
        }
        EXPECT_TRUE(*snapshot.values.at("w1") ==
                    std::vector<std::byte>(bytes_of(w1_).begin(), bytes_of(w1_).end()));
    }
    // The directory entry is gone; the mapping (and the inode) stay while the weights live.
    fs::remove(file);
    expect_serves("ffn");
    ASSERT_TRUE(repository_->unload_model("ffn").ok());
    // Unloaded and unreferenced: the mapping goes with the last weight that read it.
    std::ifstream maps("/proc/self/maps");
    const std::string all((std::istreambuf_iterator<char>(maps)), std::istreambuf_iterator<char>());
    EXPECT_THAT(all, ::testing::Not(HasSubstr(file.string())));
}

// An upload over gRPC still owns its bytes.
TEST_F(ModelRepositoryTest, UploadedWeightsOwnTheirBytes) {
    v1::RegisterModelRequest req;
    req.set_model("client");
    *req.mutable_graph() = graphdef::parse_text(kFfn).value();
    req.add_weights("w1");
    req.add_weights("w2");
    ASSERT_TRUE(engine_->register_model(req).ok());
    ASSERT_TRUE(testing::upload_f32(*engine_, "client", "w1", w1_, {kModel, kFf}).ok());
    const WeightSnapshot snapshot = engine_->find_model("client").value()->weights_snapshot();
    EXPECT_TRUE(snapshot.values.at("w1")->owns_bytes());
    EXPECT_THAT(mapped_file(snapshot.values.at("w1")->data()),
                ::testing::Not(HasSubstr(".safetensors")));
}

TEST_F(ModelRepositoryTest, GraphJsonIsAcceptedAndBothGraphsAreAnError) {
    write_model("json", "1");
    fs::remove(root_ / "json" / "1" / "graph.pbtxt");
    write_text(root_ / "json" / "1" / "graph.json",
               graphdef::to_json(graphdef::parse_text(kFfn).value()).value());
    write_model("both", "1");
    write_text(root_ / "both" / "1" / "graph.json",
               graphdef::to_json(graphdef::parse_text(kFfn).value()).value());
    write_model("neither", "1");
    fs::remove(root_ / "neither" / "1" / "graph.pbtxt");
    write_model("badjson", "1");
    fs::remove(root_ / "badjson" / "1" / "graph.pbtxt");
    write_text(root_ / "badjson" / "1" / "graph.json", R"({"inputs": [{"nme": "x"}]})");

    const std::map<std::string, RepositoryModel> models = load();
    EXPECT_EQ(models.at("json").state, RepositoryModel::State::ready) << models.at("json").reason;
    expect_serves("json");
    expect_unavailable(models, "both", "both/1", "both graph.pbtxt and graph.json; keep one");
    expect_unavailable(models, "neither", "neither/1",
                       "no graph.pbtxt (text format) or graph.json (JSON)");
    expect_unavailable(models, "badjson", "badjson/1/graph.json", "nme");
}

// A sharded checkpoint as transformers writes it: model.safetensors.index.json maps every
// tensor to its file, and must match the files exactly.
TEST_F(ModelRepositoryTest, ShardedCheckpointIndexIsChecked) {
    const std::string first = "model-00001-of-00002.safetensors";
    const std::string second = "model-00002-of-00002.safetensors";
    const std::vector<float> extra(3, 1.0f);
    const auto write_sharded = [&](const std::string& model, const std::string& index) {
        const fs::path dir = root_ / model / "1";
        write_text(dir / "graph.pbtxt", kFfn);
        ASSERT_TRUE(
            write_safetensors(dir / first,
                              {{{"w1", SafetensorsDtype::f32, {kModel, kFf}, bytes_of(w1_)}}})
                .ok());
        ASSERT_TRUE(
            write_safetensors(dir / second,
                              {{{"w2", SafetensorsDtype::f32, {kFf, kModel}, bytes_of(w2_)}}})
                .ok());
        write_text(dir / "model.safetensors.index.json", index);
    };
    const auto index = [](const std::string& map) {
        return R"({"metadata": {"total_size": 256}, "weight_map": {)" + map + "}}";
    };
    write_sharded("good", index(R"("w1": ")" + first + R"(", "w2": ")" + second + R"(")"));
    write_sharded("nofile",
                  index(R"("w1": ")" + first + R"(", "w2": "model-00003-of-00003.safetensors")"));
    write_sharded("wrongfile", index(R"("w1": ")" + second + R"(", "w2": ")" + second + R"(")"));
    write_sharded("unmapped", index(R"("w1": ")" + first + R"(")"));
    write_sharded("absent", index(R"("w1": ")" + first + R"(", "w2": ")" + second +
                                  R"(", "bias": ")" + first + R"(")"));
    write_sharded("twice", index(R"("w1": ")" + first + R"(", "w1": ")" + second + R"(")"));
    write_sharded("outside", index(R"("w1": "../../good/1/)" + first + R"(")"));
    write_sharded("nomap", R"({"metadata": {}})");
    write_sharded("notjson", "{");

    const std::map<std::string, RepositoryModel> models = load();
    EXPECT_EQ(models.at("good").state, RepositoryModel::State::ready) << models.at("good").reason;
    expect_serves("good");
    expect_unavailable(models, "nofile", "nofile/1/model.safetensors.index.json",
                       "tensor 'w2' is mapped to model-00003-of-00003.safetensors, which does "
                       "not exist");
    expect_unavailable(models, "wrongfile", "wrongfile/1/model.safetensors.index.json",
                       "tensor 'w1' is mapped to " + second + ", which does not hold it (" + first +
                           " does)");
    expect_unavailable(models, "unmapped", "unmapped/1/" + second,
                       "tensor 'w2' is not in model.safetensors.index.json's weight_map");
    expect_unavailable(models, "absent", "absent/1/model.safetensors.index.json",
                       "tensor 'bias' is mapped to " + first + ", which does not hold it");
    expect_unavailable(models, "twice", "twice/1/model.safetensors.index.json",
                       "duplicate key 'w1'");
    expect_unavailable(models, "outside", "outside/1/model.safetensors.index.json",
                       "not a .safetensors file of the version directory");
    expect_unavailable(models, "nomap", "nomap/1/model.safetensors.index.json",
                       "has no `weight_map` object");
    expect_unavailable(models, "notjson", "notjson/1/model.safetensors.index.json", "not JSON");
}

// Integer weights (i32/i64 tensors, e.g. fixed ids) load like float ones.
TEST_F(ModelRepositoryTest, IntegerWeightsAreServed) {
    const fs::path dir = root_ / "lookup" / "1";
    write_text(dir / "graph.pbtxt", R"pb(
      inputs {
        name: "table"
        dtype: F32
        dims { name: "vocab" fixed: 8 }
        dims { name: "d" fixed: 3 }
      }
      inputs {
        name: "ids"
        dtype: I32
        dims { name: "tokens" fixed: 4 }
      }
      operators { name: "rows" kind: "embedding" inputs: [ "table", "ids" ] }
      saved: [ "rows" ]
    )pb");
    const std::vector<int32_t> ids = {5, 0, 7, 5};
    ASSERT_TRUE(write_safetensors(dir / "model.safetensors",
                                  {{{"ids",
                                     SafetensorsDtype::i32,
                                     {4},
                                     {reinterpret_cast<const std::byte*>(ids.data()), 16}}}})
                    .ok());
    const std::map<std::string, RepositoryModel> models = load();
    ASSERT_EQ(models.at("lookup").state, RepositoryModel::State::ready)
        << models.at("lookup").reason;
    std::vector<float> table(24);
    for (int i = 0; i < 24; ++i) {
        table[i] = static_cast<float>(i);
    }
    v1::ExecuteRequest req;
    req.set_model("lookup");
    v1::NamedTensor* input = req.add_inputs();
    input->set_name("table");
    input->mutable_tensor()->set_dtype(v1::F32);
    input->mutable_tensor()->add_shape(8);
    input->mutable_tensor()->add_shape(3);
    input->mutable_tensor()->set_data(as_bytes(table));
    absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    const std::vector<float> got = as_floats(resp->outputs(0).tensor().data());
    ASSERT_EQ(got.size(), 12u);
    for (int t = 0; t < 4; ++t) {
        for (int e = 0; e < 3; ++e) {
            EXPECT_EQ(got[t * 3 + e], table[ids[t] * 3 + e]) << "token " << t;
        }
    }
}

// Loading in the background (the daemon's loader): after scan() every model is LOADING and none
// is registered; load_scanned() registers each whole. A load called meanwhile takes its model in
// hand (the loader leaves it), and after stop() the models not loaded yet are UNAVAILABLE.
TEST_F(ModelRepositoryTest, ScanShowsLoadingThenLoadScannedRegistersWholeModels) {
    write_model("a", "1");
    write_model("b", "2");
    write_model("c", "1");
    repository_ = std::make_unique<ModelRepository>(root_, engine_, metrics_);
    ASSERT_TRUE(repository_->scan().ok());
    EXPECT_FALSE(repository_->settled());
    std::map<std::string, RepositoryModel> index = by_name(repository_->index(false));
    ASSERT_EQ(index.size(), 3u);
    for (const auto& [name, model] : index) {
        EXPECT_EQ(model.state, RepositoryModel::State::loading) << name;
    }
    EXPECT_TRUE(repository_->index(true).empty());
    EXPECT_EQ(engine_->list_models().models_size(), 0);
    EXPECT_THAT(metrics_->text(), HasSubstr("einsummable_repository_models{state=\"LOADING\"} 3"));

    // A RepositoryModelLoad of "b" while the repository loads: loaded by the call.
    absl::StatusOr<RepositoryModel> loaded = repository_->load_model("b");
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const uint64_t b_id = loaded->id;
    EXPECT_EQ(by_name(repository_->index(true)).count("b"), 1u);
    EXPECT_EQ(engine_->list_models().models_size(), 1);

    repository_->load_scanned();
    EXPECT_TRUE(repository_->settled());
    index = by_name(repository_->index(false));
    for (const auto& [name, model] : index) {
        EXPECT_EQ(model.state, RepositoryModel::State::ready) << name << ": " << model.reason;
    }
    EXPECT_EQ(index.at("b").id, b_id) << "the loader loaded b a second time";
    expect_serves("a");
    expect_serves("b");
    expect_serves("c");

    // Stopped before loading: the models scanned and not loaded are UNAVAILABLE.
    auto stopped = std::make_unique<ModelRepository>(root_, engine_, nullptr);
    write_model("d", "1");
    ASSERT_TRUE(stopped->scan().ok());
    stopped->stop();
    stopped->load_scanned();
    const RepositoryModel d = by_name(stopped->models()).at("d");
    EXPECT_EQ(d.state, RepositoryModel::State::unavailable);
    EXPECT_EQ(d.reason, "the server stopped before loading it");
    EXPECT_FALSE(engine_->find_model("d").ok());
}

// KServe knows a repository model by its directory's version, a registered model as "1".
TEST_F(ModelRepositoryTest, KServeReportsTheDirectoryVersion) {
    write_model("ffn", "1");
    write_model("ffn", "7");
    ASSERT_EQ(load().at("ffn").version, 7);
    inference::ModelMetadataRequest metadata;
    metadata.set_name("ffn");
    absl::StatusOr<inference::ModelMetadataResponse> got =
        kserve_model_metadata(*engine_, metadata);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_THAT(got->versions(), ::testing::ElementsAre("7"));
    metadata.set_version("1");
    EXPECT_THAT(kserve_model_metadata(*engine_, metadata).status().message(),
                HasSubstr("model 'ffn' has no version '1' (versions: 7)"));
    for (const auto& [version, ready] :
         std::vector<std::pair<std::string, bool>>{{"", true}, {"7", true}, {"1", false}}) {
        inference::ModelReadyRequest req;
        req.set_name("ffn");
        req.set_version(version);
        EXPECT_EQ(kserve_model_ready(*engine_, req), ready) << "version '" << version << "'";
    }
    const std::vector<float> x = random_values(3 * kModel, 7);
    for (const std::string version : {"", "7", "1"}) {
        inference::ModelInferRequest req;
        req.set_model_name("ffn");
        req.set_model_version(version);
        auto* input = req.add_inputs();
        input->set_name("x");
        input->set_datatype("FP32");
        input->add_shape(3);
        input->add_shape(kModel);
        *req.add_raw_input_contents() = as_bytes(x);
        absl::StatusOr<inference::ModelInferResponse> response = kserve_model_infer(*engine_, req);
        if (version == "1") {
            EXPECT_EQ(response.status().code(), absl::StatusCode::kNotFound);
            continue;
        }
        ASSERT_TRUE(response.ok()) << version << ": " << response.status();
        EXPECT_EQ(response->model_version(), "7");
    }
}

TEST_F(ModelRepositoryTest, MissingRootIsAnError) {
    ModelRepository repository(root_ / "nowhere", engine_, nullptr);
    const absl::Status status = repository.load_all();
    EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(status.message(), HasSubstr("nowhere"));
}

} // namespace
} // namespace einsummable::server
