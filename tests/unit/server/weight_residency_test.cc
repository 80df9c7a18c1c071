// server/weight_residency: a model's first plan lays its weights out while the model's other
// first requests wait; later plans read that layout in place, or keep their own copies on
// another device count; a layout the plan store kept comes back after a restart.
#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "compiler/physical/resident_layout.h"
#include "proto/graph_def.h"
#include "runtime/cpu/cpu_backend.h"
#include "server/model_store.h"
#include "server/plan_key.h"
#include "server/weight_residency.h"
#include "tests/unit/server/small_ffn.h"

namespace einsummable::server {
namespace {

using ::testing::StartsWith;

// The FFN's w1 (f32 4 × 8) whole on device 0 of 2.
constexpr char kLayoutRecord[] = "einsummable-resident-layout 1\n"
                                 "devices 2\n"
                                 "tensor \"w1\" f32 2 \"d_model\" 4 \"d_ff\" 8\n"
                                 "block 0 [0,4)x[0,8)\n"
                                 "end\n";

// A plan store that only keeps layouts, in memory.
class LayoutStore : public PlanPersistence {
public:
    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey&, ir::Graph, const runtime::CompileOptions&,
         std::shared_ptr<runtime::Backend>) override {
        return absl::NotFoundError("no plans");
    }
    absl::Status save(const PlanKey&, const runtime::Plan&) override { return absl::OkStatus(); }
    absl::Status save_layout(const std::string& identity, absl::string_view content) override {
        layouts[identity] = std::string(content);
        return absl::OkStatus();
    }
    absl::StatusOr<std::string> load_layout(const std::string& identity) const override {
        auto it = layouts.find(identity);
        if (it == layouts.end()) {
            return absl::NotFoundError(identity);
        }
        return it->second;
    }
    std::string describe() const override { return "layouts"; }

    std::map<std::string, std::string> layouts;
};

class WeightResidencyTest : public ::testing::Test {
protected:
    void SetUp() override { register_ffn(); }

    void register_ffn() {
        model_ =
            store_.register_model("ffn", graphdef::parse_text(testing::kFfn).value(), {"w1", "w2"})
                .value();
    }

    PlanKey key(int devices) const {
        PlanKey key;
        key.model = "ffn";
        key.graph_fingerprint = model_->fingerprint();
        key.dims = {{"tokens", 8}};
        key.devices = devices;
        key.version = "v";
        return key;
    }

    std::shared_ptr<runtime::Backend> backend_ = runtime::cpu::make_cpu_backend({2, 1});
    LayoutStore persistence_;
    WeightResidency residency_{persistence_, *backend_, "v"};
    ModelStore store_{ModelStoreLimits{}};
    std::shared_ptr<const Model> model_;
};

TEST_F(WeightResidencyTest, TheFirstPlanLaysTheWeightsOutWhileTheOthersWait) {
    PlanKey first = key(2);
    absl::StatusOr<WeightResidency::Choice> defining = residency_.choose(*model_, first, nullptr);
    ASSERT_TRUE(defining.ok()) << defining.status();
    EXPECT_TRUE(defining->defining);
    EXPECT_EQ(first.weights, "defines");

    std::atomic<bool> chosen{false};
    PlanKey second = key(2);
    absl::StatusOr<WeightResidency::Choice> waited;
    std::thread other([&] {
        waited = residency_.choose(*model_, second, nullptr);
        chosen = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(chosen);
    // The first plan failed: the next one lays the weights out.
    residency_.end_defining(*defining, first, nullptr);
    other.join();
    ASSERT_TRUE(waited.ok()) << waited.status();
    EXPECT_TRUE(waited->defining);
    EXPECT_EQ(second.weights, "defines");
    EXPECT_TRUE(persistence_.layouts.empty());
}

TEST_F(WeightResidencyTest, AWaitingRequestStopsWhenItIsCancelled) {
    PlanKey first = key(2);
    ASSERT_TRUE(residency_.choose(*model_, first, nullptr)->defining);
    PlanKey second = key(2);
    absl::Status status =
        residency_.choose(*model_, second, [] { return absl::DeadlineExceededError("too late"); })
            .status();
    EXPECT_EQ(status, absl::DeadlineExceededError("too late"));
}

TEST_F(WeightResidencyTest, AModelRegisteredAgainStartsOver) {
    PlanKey first = key(2);
    ASSERT_TRUE(residency_.choose(*model_, first, nullptr)->defining);
    ASSERT_TRUE(store_.unregister("ffn").ok());
    register_ffn();
    PlanKey again = key(2);
    EXPECT_TRUE(residency_.choose(*model_, again, nullptr)->defining);

    residency_.erase("ffn");
    PlanKey after_erase = key(2);
    EXPECT_TRUE(residency_.choose(*model_, after_erase, nullptr)->defining);
}

TEST_F(WeightResidencyTest, LaidOutWeightsAreKeptAndReadInPlaceOnAsManyDevices) {
    absl::StatusOr<physical::ResidentLayout> layout =
        physical::parse_resident_layout_record(kLayoutRecord);
    ASSERT_TRUE(layout.ok()) << layout.status();
    std::shared_ptr<runtime::ResidentWeights> weights =
        runtime::ResidentWeights::allocate(*layout, *backend_).value();

    PlanKey first = key(2);
    WeightResidency::Choice defining = residency_.choose(*model_, first, nullptr).value();
    residency_.end_defining(defining, first, weights);
    const std::string identity = layout_identity("ffn", model_->fingerprint(), "v");
    ASSERT_TRUE(persistence_.layouts.count(identity));
    EXPECT_EQ(persistence_.layouts[identity],
              absl::StrCat(first.to_string(), "\n", physical::resident_layout_record(*layout)));

    PlanKey same_devices = key(2);
    same_devices.dims = {{"tokens", 16}};
    WeightResidency::Choice in_place = residency_.choose(*model_, same_devices, nullptr).value();
    EXPECT_FALSE(in_place.defining);
    EXPECT_FALSE(in_place.again);
    EXPECT_EQ(in_place.resident, weights);
    EXPECT_EQ(same_devices.weights, absl::StrCat("resident:", layout->fingerprint()));

    PlanKey other_devices = key(1);
    WeightResidency::Choice own = residency_.choose(*model_, other_devices, nullptr).value();
    EXPECT_EQ(own.resident, nullptr);
    EXPECT_EQ(other_devices.weights, "own");
}

TEST_F(WeightResidencyTest, ALayoutThePlanStoreKeptComesBackAfterARestart) {
    PlanKey definer = key(2);
    definer.weights = "defines";
    persistence_.layouts[layout_identity("ffn", model_->fingerprint(), "v")] =
        absl::StrCat(definer.to_string(), "\n", kLayoutRecord);

    // The defining plan made again reads the layout it defined.
    PlanKey again = key(2);
    WeightResidency::Choice choice = residency_.choose(*model_, again, nullptr).value();
    EXPECT_FALSE(choice.defining);
    EXPECT_TRUE(choice.again);
    ASSERT_NE(choice.resident, nullptr);
    EXPECT_EQ(again.weights, "defines");
    PlanKey other = key(2);
    other.dims = {{"tokens", 4}};
    EXPECT_EQ(residency_.choose(*model_, other, nullptr)->resident, choice.resident);
    EXPECT_THAT(other.weights, StartsWith("resident:"));
}

TEST_F(WeightResidencyTest, AnUnusableStoredLayoutIsLaidOutAgain) {
    persistence_.layouts[layout_identity("ffn", model_->fingerprint(), "v")] = "no key line";
    PlanKey first = key(2);
    EXPECT_TRUE(residency_.choose(*model_, first, nullptr)->defining);
}

} // namespace
} // namespace einsummable::server
