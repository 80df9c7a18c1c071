// server/plan_key: a request's PlanKey, the batcher's key and a weights layout's identity in the
// plan store: what makes two requests' plans one.
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "proto/graph_def.h"
#include "runtime/plan.h"
#include "server/model_store.h"
#include "server/plan_key.h"
#include "server/request_shapes.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

using testing::kFfn;

class PlanKeyTest : public ::testing::Test {
protected:
    void SetUp() override {
        const v1::GraphDef graph = graphdef::parse_text(kFfn).value();
        v1::Batching batching;
        batching.set_dimension("tokens");
        model_ = store_.register_model("ffn", graph, {"w1", "w2"}, &batching).value();
    }

    RequestShape shape(int64_t tokens, const v1::CompileOptions& options = {},
                       std::vector<int64_t> sequence_ends = {}) const {
        const RequestShapes shapes(2, runtime::default_topology(2), EngineSettings());
        google::protobuf::Map<std::string, int64_t> dims;
        dims["tokens"] = tokens;
        return shapes
            .shape(model_, dims, options,
                   google::protobuf::RepeatedField<int64_t>(sequence_ends.begin(),
                                                            sequence_ends.end()))
            .value();
    }

    ModelStore store_{ModelStoreLimits{}};
    std::shared_ptr<const Model> model_;
};

TEST_F(PlanKeyTest, TheKeyNamesEverythingThePlanDependsOn) {
    v1::CompileOptions options;
    options.set_devices(1);
    options.set_planner("greedy");
    options.set_objective("search");
    options.set_seed(3);
    options.set_schedule("naive");
    const PlanKey key = plan_key(shape(8, options, {3, 8}), "dgx-a100", 1024, "1.2.3");
    EXPECT_EQ(key.model, "ffn");
    EXPECT_EQ(key.graph_fingerprint, model_->fingerprint());
    EXPECT_EQ(key.dims, (std::map<std::string, int64_t>{{"tokens", 8}}));
    EXPECT_EQ(key.devices, 1);
    EXPECT_EQ(key.planner, "greedy");
    // greedy gives its own plan whatever the objective: keyed as the bytes objective's.
    EXPECT_EQ(key.objective, "bytes");
    EXPECT_EQ(key.seed, 3u);
    EXPECT_EQ(key.schedule, "naive");
    EXPECT_EQ(key.synthesis_iterations, EngineSettings().synthesis_iterations);
    EXPECT_EQ(key.topology, "dgx-a100");
    EXPECT_EQ(key.device_memory, 1024);
    EXPECT_EQ(key.version, "1.2.3");
    EXPECT_THAT(key.sequence_ends, ElementsAre(3, 8));
    EXPECT_EQ(key.weights, ""); // WeightResidency's to set
}

TEST_F(PlanKeyTest, EqualShapesHaveEqualKeysAndAnyDifferenceShows) {
    const PlanKey key = plan_key(shape(8), "t", 0, "v");
    EXPECT_EQ(plan_key(shape(8), "t", 0, "v"), key);
    EXPECT_NE(plan_key(shape(16), "t", 0, "v"), key);
    EXPECT_NE(plan_key(shape(8, {}, {4, 8}), "t", 0, "v"), key);
    v1::CompileOptions seeded;
    seeded.set_seed(1);
    EXPECT_NE(plan_key(shape(8, seeded), "t", 0, "v"), key);
    EXPECT_NE(plan_key(shape(8), "u", 0, "v"), key);
    EXPECT_NE(plan_key(shape(8), "t", 1, "v"), key);
    EXPECT_NE(plan_key(shape(8), "t", 0, "w"), key);
}

TEST_F(PlanKeyTest, DpPlansOfEachObjectiveHaveTheirOwnKey) {
    // No objective is the time objective, the default.
    const PlanKey by_default = plan_key(shape(8), "t", 0, "v");
    EXPECT_EQ(by_default.objective, "time");
    EXPECT_THAT(by_default.to_string(), HasSubstr(" planner=dp objective=time seed=0 "));
    std::set<std::string> keys = {by_default.to_string()};
    std::set<std::string> batch_keys = {batch_key(shape(8))};
    for (const char* objective : {"bytes", "search"}) {
        v1::CompileOptions options;
        options.set_objective(objective);
        const PlanKey key = plan_key(shape(8, options), "t", 0, "v");
        EXPECT_EQ(key.objective, objective);
        keys.insert(key.to_string());
        batch_keys.insert(batch_key(shape(8, options)));
    }
    EXPECT_EQ(keys.size(), 3u);
    EXPECT_EQ(batch_keys.size(), 3u);
    // "cost" is the bytes objective's old name: the same key (spelled without objective=).
    v1::CompileOptions cost;
    cost.set_objective("cost");
    const PlanKey by_cost = plan_key(shape(8, cost), "t", 0, "v");
    EXPECT_EQ(by_cost.objective, "bytes");
    EXPECT_EQ(by_cost.to_string().find("objective"), std::string::npos);
    // A baseline's plan is its own rule's whatever the objective: one key.
    v1::CompileOptions megatron;
    megatron.set_planner("megatron");
    const PlanKey baseline = plan_key(shape(8, megatron), "t", 0, "v");
    megatron.set_objective("search");
    EXPECT_EQ(plan_key(shape(8, megatron), "t", 0, "v"), baseline);
    EXPECT_EQ(baseline.objective, "bytes");
}

TEST_F(PlanKeyTest, RequestsBatchWhenTheirPlansWouldBeOne) {
    const std::string key = batch_key(shape(8));
    EXPECT_THAT(key, StartsWith(absl::StrCat(model_->id(), " tokens=8 devices=2 planner=dp ")));
    EXPECT_EQ(batch_key(shape(8)), key);
    EXPECT_NE(batch_key(shape(4)), key);
    EXPECT_NE(batch_key(shape(8, {}, {4, 8})), key);
    v1::CompileOptions options;
    options.set_seed(1);
    EXPECT_NE(batch_key(shape(8, options)), key);
    options.set_seed(0);
    options.set_devices(1);
    EXPECT_NE(batch_key(shape(8, options)), key);

    // The same name registered again is another model: its requests never join the old one's.
    ASSERT_TRUE(store_.unregister("ffn").ok());
    v1::Batching batching;
    batching.set_dimension("tokens");
    model_ =
        store_.register_model("ffn", graphdef::parse_text(kFfn).value(), {"w1", "w2"}, &batching)
            .value();
    EXPECT_NE(batch_key(shape(8)), key);
}

TEST(LayoutIdentity, NamesTheModelItsGraphAndTheVersion) {
    EXPECT_EQ(layout_identity("ffn", "00ff", "0.1.0"), "model=ffn graph=00ff version=0.1.0");
}

} // namespace
} // namespace einsummable::server
