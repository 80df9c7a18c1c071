// server::Engine without gRPC: register, upload, compile, execute and explain on the CPU
// backend, every bad request's status, weights reloaded after a change, concurrent executes on
// one plan, persistence through a fake PlanPersistence.
#include <atomic>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/failing_backend.h"
#include "server/engine.h"
#include "tests/unit/eventually.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

using testing::as_bytes;
using testing::as_floats;
using testing::kFf;
using testing::kFfn;
using testing::kModel;
using testing::random_values;
using testing::reference;

void expect_close(const std::vector<float>& got, const std::vector<float>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-5) << "element " << i;
    }
}

// Counts loads and saves; "stores" plans by compiling them again on load, which is what a
// real store's load returns: a plan for the key.
class FakePersistence : public PlanPersistence {
public:
    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
         std::shared_ptr<runtime::Backend> backend) override {
        ++loads;
        if (data_loss) {
            return absl::DataLossError("checksum mismatch");
        }
        if (!saved_keys.count(key.to_string())) {
            return absl::NotFoundError("no file");
        }
        return runtime::Plan::compile(std::move(graph), options, std::move(backend));
    }
    absl::Status save(const PlanKey& key, const runtime::Plan&) override {
        ++saves;
        saved_keys.insert(key.to_string());
        return absl::OkStatus();
    }
    std::string describe() const override { return "fake"; }

    std::atomic<int> loads{0};
    std::atomic<int> saves{0};
    bool data_loss = false;
    std::set<std::string> saved_keys;
};

class EngineTest : public ::testing::Test {
protected:
    void SetUp() override { engine_ = make_engine(nullptr); }

    std::unique_ptr<Engine> make_engine(std::unique_ptr<PlanPersistence> persistence,
                                        int64_t max_tensor_bytes = 1 << 20,
                                        bool share_weights = true,
                                        std::shared_ptr<runtime::Backend> backend = nullptr) {
        EngineOptions options;
        options.share_weights = share_weights;
        options.version = "test";
        options.topology = runtime::default_topology(2);
        options.plan_cache_entries = 8;
        options.max_tensor_bytes = max_tensor_bytes;
        options.synthesis_iterations = 50;
        metrics_ = std::make_shared<Metrics>();
        return std::make_unique<Engine>(
            options, backend != nullptr ? backend : runtime::cpu::make_cpu_backend({2, 1}),
            std::move(persistence), metrics_);
    }

    void register_ffn(Engine& engine) {
        v1::RegisterModelRequest req;
        req.set_model("ffn");
        *req.mutable_graph() = graphdef::parse_text(kFfn).value();
        req.add_weights("w1");
        req.add_weights("w2");
        absl::StatusOr<v1::RegisterModelResponse> resp = engine.register_model(req);
        ASSERT_TRUE(resp.ok()) << resp.status();
        EXPECT_THAT(resp->symbols(), ::testing::ElementsAre("tokens"));
        EXPECT_THAT(resp->inputs(), ::testing::ElementsAre("x"));
    }

    absl::Status upload(Engine& engine, const std::string& name, const std::vector<float>& values,
                        std::vector<int64_t> shape) {
        return testing::upload_f32(engine, "ffn", name, values, shape);
    }

    void upload_weights(Engine& engine) {
        ASSERT_TRUE(upload(engine, "w1", w1_, {kModel, kFf}).ok());
        ASSERT_TRUE(upload(engine, "w2", w2_, {kFf, kModel}).ok());
    }

    v1::ExecuteRequest execute_request(int tokens, const std::vector<float>& x) {
        return testing::ffn_execute_request("ffn", tokens, x);
    }

    std::unique_ptr<Engine> engine_;
    std::shared_ptr<Metrics> metrics_;
    std::vector<float> w1_ = random_values(kModel * kFf, 1);
    std::vector<float> w2_ = random_values(kFf * kModel, 2);
};

TEST_F(EngineTest, CompilesOncePerShapeAndExecutesCorrectly) {
    register_ffn(*engine_);
    upload_weights(*engine_);

    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::CompileResponse> first = engine_->compile(compile);
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_FALSE(first->cache_hit());
    EXPECT_THAT(first->plan_key(), HasSubstr("model=ffn"));
    EXPECT_THAT(first->plan_key(), HasSubstr("tokens:4"));
    EXPECT_FALSE(first->strategy().empty());
    absl::StatusOr<v1::CompileResponse> second = engine_->compile(compile);
    ASSERT_TRUE(second.ok());
    EXPECT_TRUE(second->cache_hit());
    EXPECT_EQ(second->plan_key(), first->plan_key());

    for (int tokens : {4, 6, 4}) {
        const std::vector<float> x = random_values(tokens * kModel, 10 + tokens);
        absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(execute_request(tokens, x));
        ASSERT_TRUE(resp.ok()) << resp.status();
        ASSERT_EQ(resp->outputs_size(), 1);
        EXPECT_EQ(resp->outputs(0).name(), "y");
        EXPECT_EQ(resp->outputs(0).tensor().dtype(), v1::F32);
        EXPECT_THAT(resp->outputs(0).tensor().shape(), ::testing::ElementsAre(tokens, kModel));
        expect_close(as_floats(resp->outputs(0).tensor().data()), reference(x, w1_, w2_, tokens));
    }
    EXPECT_EQ(engine_->compiles(), 2);
    v1::ListModelsResponse list = engine_->list_models();
    ASSERT_EQ(list.models_size(), 1);
    EXPECT_EQ(list.models(0).plans(), 2);
    EXPECT_THAT(list.models(0).weights_loaded(), ::testing::ElementsAre("w1", "w2"));

    const std::string text = metrics_->text();
    EXPECT_THAT(text, HasSubstr("einsummable_plan_cache_hits_total 3"));
    EXPECT_THAT(text, HasSubstr("einsummable_plan_cache_misses_total 2"));
    EXPECT_THAT(text, HasSubstr("einsummable_plan_cache_entries 2"));
    EXPECT_THAT(text, HasSubstr("einsummable_compile_duration_seconds_count 2"));
    EXPECT_THAT(text, HasSubstr("einsummable_execute_duration_seconds_count{model=\"ffn\"} 3"));
    EXPECT_THAT(text, HasSubstr("einsummable_device_memory_bytes{device=\"1\"}"));
    EXPECT_THAT(text, HasSubstr("einsummable_predicted_exchange_seconds{model=\"ffn\"}"));
}

// The value of an unlabelled series in the metrics text; -1 when it is missing.
double series_value(const std::string& text, const std::string& name) {
    const std::string prefix = name + " ";
    for (size_t at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
        if (at == 0 || text[at - 1] == '\n') {
            return std::stod(text.substr(at + prefix.size()));
        }
    }
    return -1.0;
}

// Every compile shares the engine's exchange-program cache and reports its totals: the first
// compile searches, compiling the same shape's graph again (a second model) only hits.
TEST_F(EngineTest, ExchangeCacheIsSharedAcrossCompilesAndExported) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 4;
    ASSERT_TRUE(engine_->compile(compile).ok());
    std::string text = metrics_->text();
    const double misses = series_value(text, "einsummable_exchange_cache_misses_total");
    EXPECT_GT(misses, 0.0) << text;
    EXPECT_GT(series_value(text, "einsummable_exchange_cache_entries"), 0.0);
    EXPECT_GT(series_value(text, "einsummable_exchange_cache_bytes"), 0.0);
    EXPECT_EQ(series_value(text, "einsummable_exchange_cache_evictions_total"), 0.0);

    v1::RegisterModelRequest again;
    again.set_model("ffn_again");
    *again.mutable_graph() = graphdef::parse_text(kFfn).value();
    again.add_weights("w1");
    again.add_weights("w2");
    ASSERT_TRUE(engine_->register_model(again).ok());
    ASSERT_TRUE(testing::upload_f32(*engine_, "ffn_again", "w1", w1_, {kModel, kFf}).ok());
    ASSERT_TRUE(testing::upload_f32(*engine_, "ffn_again", "w2", w2_, {kFf, kModel}).ok());
    compile.set_model("ffn_again");
    ASSERT_TRUE(engine_->compile(compile).ok());
    text = metrics_->text();
    EXPECT_EQ(series_value(text, "einsummable_exchange_cache_misses_total"), misses);
    EXPECT_GT(series_value(text, "einsummable_exchange_cache_hits_total"), 0.0);
}

// A backend that fails beyond recovery (on CUDA a sticky error such as an illegal address,
// docs/cuda.md "Errors") on its second run: that execute fails UNAVAILABLE saying the server
// restarts, the listener (the daemon's: stop serving, exit 3) hears the error once, and nothing
// that needs the devices runs after it.
TEST_F(EngineTest, AnUnrecoverableBackendErrorFailsEveryRequestFromThenOn) {
    const absl::Status injected =
        absl::InternalError("running the plan's CUDA graph: cudaErrorIllegalAddress (an illegal "
                            "memory access was encountered)");
    auto engine = make_engine(
        nullptr, 1 << 20, true,
        runtime::fail_unrecoverably_after(runtime::cpu::make_cpu_backend({2, 1}), 1, injected));
    std::vector<absl::Status> heard;
    engine->set_unrecoverable_listener([&](const absl::Status& error) { heard.push_back(error); });
    register_ffn(*engine);
    upload_weights(*engine);

    const std::vector<float> x = random_values(4 * kModel, 40);
    absl::StatusOr<v1::ExecuteResponse> first = engine->execute(execute_request(4, x));
    ASSERT_TRUE(first.ok()) << first.status();
    expect_close(as_floats(first->outputs(0).tensor().data()), reference(x, w1_, w2_, 4));
    EXPECT_TRUE(engine->unrecoverable_error().ok());
    EXPECT_TRUE(heard.empty());

    absl::StatusOr<v1::ExecuteResponse> failed = engine->execute(execute_request(4, x));
    ASSERT_FALSE(failed.ok());
    EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
    EXPECT_THAT(failed.status().message(), HasSubstr("model 'ffn': "));
    EXPECT_THAT(failed.status().message(), HasSubstr("cudaErrorIllegalAddress"));
    EXPECT_THAT(failed.status().message(),
                HasSubstr("the cpu backend cannot run again in this process; the server stops "
                          "serving and exits for its supervisor to restart it"));
    ASSERT_EQ(heard.size(), 1u);
    EXPECT_EQ(heard[0], injected);
    EXPECT_EQ(engine->unrecoverable_error(), injected);

    // Nothing that needs the devices runs any more: the same plan, a new shape, an explain.
    absl::StatusOr<v1::ExecuteResponse> later = engine->execute(execute_request(4, x));
    ASSERT_FALSE(later.ok());
    EXPECT_EQ(later.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_THAT(later.status().message(),
                HasSubstr("the cpu backend failed beyond recovery (running the plan's CUDA "
                          "graph: cudaErrorIllegalAddress"));
    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 6;
    absl::StatusOr<v1::CompileResponse> compiled = engine->compile(compile);
    ASSERT_FALSE(compiled.ok());
    EXPECT_EQ(compiled.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_EQ(engine->compiles(), 1);
    v1::ExplainRequest explain;
    explain.set_model("ffn");
    (*explain.mutable_dims())["tokens"] = 4;
    EXPECT_EQ(engine->explain(explain).status().code(), absl::StatusCode::kUnavailable);
    // What needs no device still answers.
    EXPECT_EQ(engine->list_models().models_size(), 1);
    EXPECT_EQ(heard.size(), 1u) << "the listener hears the failure once";

    // A listener set afterwards hears it at once.
    int late = 0;
    engine->set_unrecoverable_listener([&](const absl::Status&) { ++late; });
    EXPECT_EQ(late, 1);
}

TEST_F(EngineTest, EachObjectiveIsAnotherPlanOfTheSameShape) {
    auto persistence = std::make_unique<FakePersistence>();
    FakePersistence* store = persistence.get();
    auto engine = make_engine(std::move(persistence));
    register_ffn(*engine);
    upload_weights(*engine);

    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::CompileResponse> by_default = engine->compile(compile);
    ASSERT_TRUE(by_default.ok()) << by_default.status();
    EXPECT_THAT(by_default->plan_key(), HasSubstr(" planner=dp objective=time seed=0 "));
    compile.mutable_options()->set_objective("time"); // the default, named: the same plan
    absl::StatusOr<v1::CompileResponse> named_time = engine->compile(compile);
    ASSERT_TRUE(named_time.ok()) << named_time.status();
    EXPECT_TRUE(named_time->cache_hit());
    EXPECT_EQ(named_time->plan_key(), by_default->plan_key());

    compile.mutable_options()->set_objective("bytes");
    absl::StatusOr<v1::CompileResponse> by_bytes = engine->compile(compile);
    ASSERT_TRUE(by_bytes.ok()) << by_bytes.status();
    EXPECT_FALSE(by_bytes->cache_hit());
    EXPECT_THAT(by_bytes->plan_key(), ::testing::Not(HasSubstr("objective")));
    compile.mutable_options()->set_objective("cost"); // the bytes objective's old name
    absl::StatusOr<v1::CompileResponse> by_cost = engine->compile(compile);
    ASSERT_TRUE(by_cost.ok()) << by_cost.status();
    EXPECT_TRUE(by_cost->cache_hit());
    EXPECT_EQ(by_cost->plan_key(), by_bytes->plan_key());

    compile.mutable_options()->set_objective("search");
    absl::StatusOr<v1::CompileResponse> by_search = engine->compile(compile);
    ASSERT_TRUE(by_search.ok()) << by_search.status();
    EXPECT_FALSE(by_search->cache_hit());
    EXPECT_THAT(by_search->plan_key(), HasSubstr(" planner=dp objective=search seed=0 "));
    EXPECT_EQ(engine->compiles(), 3);
    EXPECT_EQ(engine->list_models().models(0).plans(), 3);
    // Persisted under their own keys.
    EXPECT_EQ(store->saved_keys,
              (std::set<std::string>{by_default->plan_key(), by_bytes->plan_key(),
                                     by_search->plan_key()}));
    absl::StatusOr<v1::CompileResponse> again = engine->compile(compile);
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_TRUE(again->cache_hit());
    EXPECT_EQ(again->plan_key(), by_search->plan_key());

    // Executes with the search objective use that plan and compute the same function.
    const std::vector<float> x = random_values(4 * kModel, 21);
    v1::ExecuteRequest execute = execute_request(4, x);
    execute.mutable_options()->set_objective("search");
    absl::StatusOr<v1::ExecuteResponse> resp = engine->execute(execute);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->cache_hit());
    expect_close(as_floats(resp->outputs(0).tensor().data()), reference(x, w1_, w2_, 4));
    EXPECT_EQ(engine->compiles(), 3);
}

// A model's registered options are its requests' defaults, field by field: a request that
// names no planner compiles with the model's (megatron), one that names dp gets dp, and a
// request's other fields still apply. Bad model options are refused at registration, naming
// the model and the field.
TEST_F(EngineTest, ModelOptionsAreTheDefaultsOfItsRequests) {
    v1::RegisterModelRequest req;
    req.set_model("ffn");
    *req.mutable_graph() = graphdef::parse_text(kFfn).value();
    req.add_weights("w1");
    req.add_weights("w2");
    req.mutable_options()->set_planner("nope");
    absl::StatusOr<v1::RegisterModelResponse> refused = engine_->register_model(req);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(refused.status().message(),
                HasSubstr("model 'ffn': options.planner: 'nope' is not a planner"));
    req.mutable_options()->set_planner("megatron");
    req.mutable_options()->set_devices(3);
    EXPECT_THAT(engine_->register_model(req).status().message(),
                HasSubstr("model 'ffn': options.devices: 3 is not between 1 and the server's 2"));
    req.mutable_options()->set_devices(0);
    ASSERT_TRUE(engine_->register_model(req).ok());
    upload_weights(*engine_);

    v1::CompileRequest compile;
    compile.set_model("ffn");
    (*compile.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::CompileResponse> by_model = engine_->compile(compile);
    ASSERT_TRUE(by_model.ok()) << by_model.status();
    EXPECT_THAT(by_model->plan_key(), HasSubstr(" planner=megatron "));
    compile.mutable_options()->set_planner("megatron"); // named as the model does: the same plan
    absl::StatusOr<v1::CompileResponse> named = engine_->compile(compile);
    ASSERT_TRUE(named.ok()) << named.status();
    EXPECT_TRUE(named->cache_hit());
    compile.mutable_options()->set_planner("dp"); // the request's field wins
    absl::StatusOr<v1::CompileResponse> by_request = engine_->compile(compile);
    ASSERT_TRUE(by_request.ok()) << by_request.status();
    EXPECT_THAT(by_request->plan_key(), HasSubstr(" planner=dp "));
    compile.clear_options();
    compile.mutable_options()->set_devices(1); // another field: the model's planner stays
    absl::StatusOr<v1::CompileResponse> one_device = engine_->compile(compile);
    ASSERT_TRUE(one_device.ok()) << one_device.status();
    EXPECT_THAT(one_device->plan_key(), HasSubstr(" devices=1 planner=megatron "));

    const std::vector<float> x = random_values(4 * kModel, 22);
    absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(execute_request(4, x));
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->cache_hit()); // the model's megatron plan compiled above
    expect_close(as_floats(resp->outputs(0).tensor().data()), reference(x, w1_, w2_, 4));
}

TEST_F(EngineTest, ExplainsAPlan) {
    register_ffn(*engine_);
    v1::ExplainRequest req;
    req.set_model("ffn");
    (*req.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::ExplainResponse> resp = engine_->explain(req);
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_THAT(resp->text(), HasSubstr("peak memory per device"));
    EXPECT_GT(resp->predicted_cost_bytes(), 0.0);
    EXPECT_GE(resp->simulated_exchange_seconds(), 0.0);
}

TEST_F(EngineTest, ExecuteNeedsEveryWeight) {
    register_ffn(*engine_);
    ASSERT_TRUE(upload(*engine_, "w1", w1_, {kModel, kFf}).ok());
    absl::StatusOr<v1::ExecuteResponse> resp =
        engine_->execute(execute_request(4, random_values(16, 3)));
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(resp.status().message()), HasSubstr("weight 'w2'"));
    EXPECT_EQ(engine_->compiles(), 0); // rejected before compiling
}

TEST_F(EngineTest, AReplacedWeightIsUsedByTheNextExecute) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    const std::vector<float> x = random_values(16, 4);
    ASSERT_TRUE(engine_->execute(execute_request(4, x)).ok());
    const std::vector<float> new_w2 = random_values(kFf * kModel, 99);
    ASSERT_TRUE(upload(*engine_, "w2", new_w2, {kFf, kModel}).ok());
    absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(execute_request(4, x));
    ASSERT_TRUE(resp.ok()) << resp.status();
    EXPECT_TRUE(resp->cache_hit());
    expect_close(as_floats(resp->outputs(0).tensor().data()), reference(x, w1_, new_w2, 4));
}

TEST_F(EngineTest, RejectsBadRequestsNamingTheCulprit) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    const std::vector<float> x = random_values(16, 5);
    struct Case {
        std::string what;
        std::function<void(v1::ExecuteRequest&)> edit;
        absl::StatusCode code;
        std::string message;
    };
    const std::vector<Case> cases = {
        {"unknown model", [](v1::ExecuteRequest& r) { r.set_model("nope"); },
         absl::StatusCode::kNotFound, "model 'nope'"},
        {"unbound symbol",
         [](v1::ExecuteRequest& r) {
             r.mutable_dims()->clear();
             r.clear_inputs();
         },
         absl::StatusCode::kInvalidArgument, "symbol 'tokens'"},
        {"dims disagreeing with an input",
         [](v1::ExecuteRequest& r) { r.mutable_inputs(0)->mutable_tensor()->set_shape(0, 5); },
         absl::StatusCode::kInvalidArgument,
         "dims: symbol 'tokens' is bound to 4, but input 'x' dimension 0 ('tokens') is 5"},
        {"unknown symbol", [](v1::ExecuteRequest& r) { (*r.mutable_dims())["tokns"] = 4; },
         absl::StatusCode::kInvalidArgument, "'tokns' is not a symbol"},
        {"zero size", [](v1::ExecuteRequest& r) { (*r.mutable_dims())["tokens"] = 0; },
         absl::StatusCode::kInvalidArgument, "'tokens' is bound to 0"},
        {"huge size",
         [](v1::ExecuteRequest& r) {
             (*r.mutable_dims())["tokens"] = 1 << 30;
             r.mutable_inputs(0)->mutable_tensor()->set_shape(0, 1 << 30);
         },
         absl::StatusCode::kResourceExhausted, "tensor 'x'"},
        {"dtype",
         [](v1::ExecuteRequest& r) { r.mutable_inputs(0)->mutable_tensor()->set_dtype(v1::F16); },
         absl::StatusCode::kInvalidArgument, "input 'x' is f32"},
        {"shape",
         [](v1::ExecuteRequest& r) { r.mutable_inputs(0)->mutable_tensor()->set_shape(1, 5); },
         absl::StatusCode::kInvalidArgument, "input 'x' has shape [4, 4]"},
        {"bytes",
         [](v1::ExecuteRequest& r) {
             r.mutable_inputs(0)->mutable_tensor()->mutable_data()->pop_back();
         },
         absl::StatusCode::kInvalidArgument, "takes 64 bytes; got 63"},
        {"missing input", [](v1::ExecuteRequest& r) { r.clear_inputs(); },
         absl::StatusCode::kInvalidArgument, "input 'x' of model 'ffn' is missing"},
        {"unknown input", [](v1::ExecuteRequest& r) { r.mutable_inputs(0)->set_name("z"); },
         absl::StatusCode::kInvalidArgument, "'z' is not an input"},
        {"weight as input", [](v1::ExecuteRequest& r) { r.mutable_inputs(0)->set_name("w1"); },
         absl::StatusCode::kInvalidArgument, "'w1' is a weight"},
        {"twice", [](v1::ExecuteRequest& r) { *r.add_inputs() = r.inputs(0); },
         absl::StatusCode::kInvalidArgument, "input 'x' is given twice"},
        {"unknown output", [](v1::ExecuteRequest& r) { r.add_outputs("h"); },
         absl::StatusCode::kInvalidArgument, "output 'h' is not a saved tensor"},
        {"planner", [](v1::ExecuteRequest& r) { r.mutable_options()->set_planner("magic"); },
         absl::StatusCode::kInvalidArgument, "options.planner: 'magic'"},
        {"objective", [](v1::ExecuteRequest& r) { r.mutable_options()->set_objective("speed"); },
         absl::StatusCode::kInvalidArgument,
         "options.objective: 'speed' is not an objective (bytes, time, search; cost means "
         "bytes)"},
        {"schedule", [](v1::ExecuteRequest& r) { r.mutable_options()->set_schedule("fast"); },
         absl::StatusCode::kInvalidArgument, "options.schedule: 'fast'"},
        {"devices", [](v1::ExecuteRequest& r) { r.mutable_options()->set_devices(3); },
         absl::StatusCode::kInvalidArgument, "options.devices: 3"},
        {"negative devices", [](v1::ExecuteRequest& r) { r.mutable_options()->set_devices(-1); },
         absl::StatusCode::kInvalidArgument, "options.devices: -1"},
    };
    for (const Case& c : cases) {
        v1::ExecuteRequest req = execute_request(4, x);
        c.edit(req);
        absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(req);
        ASSERT_FALSE(resp.ok()) << c.what;
        EXPECT_EQ(resp.status().code(), c.code) << c.what << ": " << resp.status();
        EXPECT_THAT(std::string(resp.status().message()), HasSubstr(c.message)) << c.what;
    }
    EXPECT_EQ(engine_->compiles(), 0);
    absl::StatusOr<v1::ExecuteResponse> good = engine_->execute(execute_request(4, x));
    ASSERT_TRUE(good.ok()) << good.status();
    expect_close(as_floats(good->outputs(0).tensor().data()), reference(x, w1_, w2_, 4));
}

TEST_F(EngineTest, StopsACancelledRequestBeforeCompiling) {
    register_ffn(*engine_);
    v1::CompileRequest req;
    req.set_model("ffn");
    (*req.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::CompileResponse> resp =
        engine_->compile(req, [] { return absl::CancelledError("gone"); });
    EXPECT_EQ(resp.status().code(), absl::StatusCode::kCancelled);
    EXPECT_EQ(engine_->compiles(), 0);
}

TEST_F(EngineTest, ConcurrentExecutesOnOnePlanEachGetTheirOwnOutputs) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    constexpr int kThreads = 8;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int repeat = 0; repeat < 5; ++repeat) {
                const std::vector<float> x = random_values(16, 1000 + t * 10 + repeat);
                absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(execute_request(4, x));
                ASSERT_TRUE(resp.ok()) << resp.status();
                expect_close(as_floats(resp->outputs(0).tensor().data()),
                             reference(x, w1_, w2_, 4));
            }
        });
    }
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(engine_->compiles(), 1);
}

TEST_F(EngineTest, AnExecuteWaitingForAnInstanceStopsWhenItsCallIsCancelled) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    ASSERT_TRUE(engine_->execute(execute_request(4, random_values(16, 7))).ok());
    const std::vector<std::shared_ptr<CachedPlan>> plans = engine_->plan_cache().entries();
    ASSERT_EQ(plans.size(), 1u);
    runtime::Plan& plan = *plans.front()->plan;
    // Every instance taken, as by executes in flight.
    std::vector<runtime::Plan::Lease> held;
    for (int i = 0; i < plan.instances(); ++i) {
        held.push_back(plan.acquire());
    }
    std::atomic<bool> cancel{false};
    absl::Status waited;
    std::thread request([&] {
        waited = engine_
                     ->execute(execute_request(4, random_values(16, 8)),
                               [&] {
                                   return cancel ? absl::CancelledError("the call was cancelled")
                                                 : absl::OkStatus();
                               })
                     .status();
    });
    while (plan.waiting() < 1) { // queued for an instance (no time bound)
        std::this_thread::yield();
    }
    cancel = true;
    request.join(); // returns while every instance is still held
    EXPECT_EQ(waited.code(), absl::StatusCode::kCancelled) << waited;
    EXPECT_EQ(plan.waiting(), 0);
    held.clear();
    // The instances were not handed to the request that left: the next execute runs.
    const std::vector<float> x = random_values(16, 9);
    absl::StatusOr<v1::ExecuteResponse> next = engine_->execute(execute_request(4, x));
    ASSERT_TRUE(next.ok()) << next.status();
    expect_close(as_floats(next->outputs(0).tensor().data()), reference(x, w1_, w2_, 4));
}

TEST_F(EngineTest, UnregisterWhileExecutingIsSafe) {
    register_ffn(*engine_);
    upload_weights(*engine_);
    ASSERT_TRUE(engine_->execute(execute_request(4, random_values(16, 6))).ok());
    constexpr int kThreads = 4;
    std::atomic<bool> stop{false};
    // Per thread, the executes it has finished: the unregister comes once every thread has
    // finished one, and the threads stop once each has run one that began after it.
    std::vector<std::atomic<int>> finished(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            int repeat = 0;
            while (!stop) {
                const std::vector<float> x = random_values(16, 2000 + t * 100 + repeat++);
                absl::StatusOr<v1::ExecuteResponse> resp = engine_->execute(execute_request(4, x));
                if (resp.ok()) {
                    expect_close(as_floats(resp->outputs(0).tensor().data()),
                                 reference(x, w1_, w2_, 4));
                } else {
                    EXPECT_THAT(resp.status().code(),
                                ::testing::AnyOf(absl::StatusCode::kNotFound,
                                                 absl::StatusCode::kFailedPrecondition))
                        << resp.status();
                }
                ++finished[t];
            }
        });
    }
    // Every thread has finished at least `counts[t]` executes.
    auto each_finished = [&](const std::vector<int>& counts) {
        return einsummable::testing::eventually([&] {
            for (int t = 0; t < kThreads; ++t) {
                if (finished[t] < counts[t]) {
                    return false;
                }
            }
            return true;
        });
    };
    EXPECT_TRUE(each_finished(std::vector<int>(kThreads, 1)));
    v1::UnregisterModelRequest unregister;
    unregister.set_model("ffn");
    EXPECT_TRUE(engine_->unregister_model(unregister).ok());
    // The execute a thread has in flight now may have begun before the unregister; the one
    // after it began after.
    std::vector<int> after(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        after[t] = finished[t] + 2;
    }
    EXPECT_TRUE(each_finished(after));
    stop = true;
    for (std::thread& thread : threads) {
        thread.join();
    }
    EXPECT_EQ(engine_->plan_cache().size(), 0);
    EXPECT_EQ(engine_->list_models().models_size(), 0);
    EXPECT_EQ(engine_->unregister_model(unregister).code(), absl::StatusCode::kNotFound);
}

TEST_F(EngineTest, PersistedPlansAreLoadedInsteadOfCompiled) {
    auto persistence = std::make_unique<FakePersistence>();
    FakePersistence* store = persistence.get();
    auto first = make_engine(std::move(persistence));
    register_ffn(*first);
    v1::CompileRequest req;
    req.set_model("ffn");
    (*req.mutable_dims())["tokens"] = 4;
    absl::StatusOr<v1::CompileResponse> compiled = first->compile(req);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    EXPECT_FALSE(compiled->cache_hit());
    EXPECT_EQ(store->saves.load(), 1);
    EXPECT_EQ(first->compiles(), 1);

    // A second engine over the same "directory": the plan comes from the store.
    auto again = std::make_unique<FakePersistence>();
    again->saved_keys = store->saved_keys;
    FakePersistence* again_store = again.get();
    auto second = make_engine(std::move(again));
    register_ffn(*second);
    absl::StatusOr<v1::CompileResponse> loaded = second->compile(req);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_TRUE(loaded->cache_hit());
    EXPECT_EQ(loaded->plan_key(), compiled->plan_key());
    EXPECT_EQ(second->compiles(), 0);
    EXPECT_EQ(again_store->saves.load(), 0);
    EXPECT_THAT(metrics_->text(), HasSubstr("einsummable_compile_duration_seconds_count 0"));

    // A corrupt file: recompiled, saved again.
    auto corrupt = std::make_unique<FakePersistence>();
    corrupt->data_loss = true;
    FakePersistence* corrupt_store = corrupt.get();
    auto third = make_engine(std::move(corrupt));
    register_ffn(*third);
    absl::StatusOr<v1::CompileResponse> recompiled = third->compile(req);
    ASSERT_TRUE(recompiled.ok()) << recompiled.status();
    EXPECT_FALSE(recompiled->cache_hit());
    EXPECT_EQ(third->compiles(), 1);
    EXPECT_EQ(corrupt_store->saves.load(), 1);
}

// --share_weights=false: every plan keeps its own copies of the weights (what memory sharing
// saves is measured against it in bench/serving); the answers are the same.
TEST_F(EngineTest, WithoutSharedWeightsEveryPlanKeepsItsOwnCopies) {
    auto held = [](const Engine& engine) {
        // Held by name: a range-for over a member of the temporary would outlive it.
        const v1::GetServerInfoResponse info = engine.server_info();
        int64_t total = 0;
        for (int64_t bytes : info.device_memory_bytes()) {
            total += bytes;
        }
        return total;
    };
    std::vector<int64_t> totals;
    for (bool share : {true, false}) {
        std::unique_ptr<Engine> engine = make_engine(nullptr, 1 << 20, share);
        register_ffn(*engine);
        upload_weights(*engine);
        for (int tokens : {4, 8}) {
            v1::CompileRequest compile;
            compile.set_model("ffn");
            (*compile.mutable_dims())["tokens"] = tokens;
            absl::StatusOr<v1::CompileResponse> compiled = engine->compile(compile);
            ASSERT_TRUE(compiled.ok()) << compiled.status();
            EXPECT_EQ(absl::StrContains(compiled->plan_key(), "weights=own"), !share)
                << compiled->plan_key();
            const std::vector<float> x = random_values(tokens * kModel, tokens);
            absl::StatusOr<v1::ExecuteResponse> run = engine->execute(execute_request(tokens, x));
            ASSERT_TRUE(run.ok()) << run.status();
            expect_close(as_floats(run->outputs(0).tensor().data()),
                         reference(x, w1_, w2_, tokens));
        }
        totals.push_back(held(*engine));
    }
    // Two plans each holding the weights hold them once more than one shared copy.
    EXPECT_GE(totals[1] - totals[0], int64_t{(kModel * kFf + kFf * kModel) * 4});
}

TEST_F(EngineTest, ReportsTheServer) {
    v1::GetServerInfoResponse info = engine_->server_info();
    EXPECT_EQ(info.version(), "test");
    EXPECT_EQ(info.backend(), "cpu");
    EXPECT_EQ(info.devices(), 2);
    EXPECT_EQ(info.topology(), "dgx-a100");
}

} // namespace
} // namespace einsummable::server
