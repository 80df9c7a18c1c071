#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "runtime/backend.h"
#include "runtime/plan.h"
#include "runtime/resident_weights.h"
#include "server/model.h"
#include "server/plan_persistence.h"
#include "server/plan_store.h"

// Weight residency (docs/server.md, "How weights are placed"): a model's weights live on the
// devices once. The model's first plan — made while the model's other first requests wait —
// lays them out as it reads them (PlanKey::weights "defines"); every later plan on as many
// devices reads that layout in place ("resident:<fingerprint>"); a plan on another device count
// keeps its own copies ("own"). The layout is kept in the plan store, so that after a restart
// the model's weights are laid out as before and its stored plans are found again. An uploaded
// weight is written once into the resident memory, before the next run of any plan.
namespace einsummable::server {

// Every model's resident weights (thread-safe: one lock over the models, one per model).
class WeightResidency {
public:
    // Returns a non-OK status (deadline exceeded, cancelled) when the request should stop
    // waiting; null: never.
    using CancelCheck = std::function<absl::Status()>;
    // One model's resident weights: none, being laid out by its first plan, or ready. Opaque.
    struct State;

    // How a plan reads its model's weights (the compile options follow from it).
    struct Choice {
        // It lays them out: the caller must call end_defining once the plan is made or failed.
        bool defining = false;
        // The resident weights it reads: pinned to their layout, or (again) as the plan that
        // laid them out, made or restored again.
        std::shared_ptr<runtime::ResidentWeights> resident;
        bool again = false;
        std::shared_ptr<State> state; // the model's, for end_defining
    };

    // Layouts are kept in `persistence` as `version`'s (layout_identity), and allocated on
    // `backend`; both must outlive this object.
    WeightResidency(PlanPersistence& persistence, runtime::Backend& backend, std::string version);

    // How the plan of `key` reads `model`'s weights; sets key.weights. Waits, polling
    // `cancelled`, while another request's plan lays the model's weights out. The model's
    // first time, looks for a layout the plan store kept (a restart).
    absl::StatusOr<Choice> choose(const Model& model, PlanKey& key, const CancelCheck& cancelled);
    // The defining plan of `choice` is made (its `laid_out` weights) or failed (null): the
    // model's weights are resident as it laid them out, kept in the plan store, or, after a
    // failure, the next plan lays them out. Wakes the requests waiting in choose().
    void end_defining(const Choice& choice, const PlanKey& key,
                      std::shared_ptr<runtime::ResidentWeights> laid_out);
    // For a generation pool (generation_pool.h), whose plans read the weights and the pool's
    // key/value caches from one layout: the model's resident weights when they are laid out
    // (`resident`: the pool pins them, if its caches are there too), or, when they are not and
    // no plan is laying them out, the right to lay them out (`defining`): the pool's first
    // decode plan lays out the weights and the caches, and end_generation_defining makes that
    // the model's layout for every plan after, kept in the plan store. Waits, polling
    // `cancelled` (null: never), while another plan lays the weights out.
    absl::StatusOr<Choice> choose_for_generation(const Model& model, const CancelCheck& cancelled);
    // The defining plan of a generation pool's `choice` is made (`laid_out`) or failed (null).
    void end_generation_defining(const Choice& choice, const Model& model,
                                 std::shared_ptr<runtime::ResidentWeights> laid_out);
    // The defining key a generation pool's layout is kept with (no plan's key).
    static constexpr std::string_view kGenerationPoolDefiner = "generation pool";

    // Writes `snapshot`'s weights into the resident memory `plan` reads when its generation is
    // not the snapshot's: once for all the model's plans, one writer at a time.
    absl::Status write(const Model& model, const runtime::Plan& plan,
                       const WeightSnapshot& snapshot);
    // Forgets the model's weights (UnregisterModel); plans holding them keep them alive. With
    // `id`, only when they are the weights of the model with that id (a model replaced: the
    // new one's may be there already).
    void erase(const std::string& model, std::optional<uint64_t> id = std::nullopt);

private:
    // The model's state (created on first use; a model registered again gets a new one).
    std::shared_ptr<State> state(const Model& model);
    // The model's resident weights (`resident`, with the key of the plan that laid them out in
    // `defining_key`) or, when none are and no plan is laying them out, the right to lay them
    // out (`defining`); waits, polling `cancelled`, while another plan lays them out.
    absl::StatusOr<Choice> layout_or_define(const Model& model, const CancelCheck& cancelled,
                                            std::string* defining_key);
    // The layout `laid_out` (null: the defining plan failed) made the model's, kept in the plan
    // store under the model's identity with `defining_key`; wakes the waiting requests.
    void finish_defining(State& residency, std::string defining_key, const std::string& model,
                         const std::string& fingerprint,
                         std::shared_ptr<runtime::ResidentWeights> laid_out);
    // The layout the plan store kept for `model`, if any, made the model's resident weights.
    // Caller holds the state's mutex.
    void restore_layout(const Model& model, State& state);

    PlanPersistence& persistence_;
    runtime::Backend& backend_;
    const std::string version_;
    std::mutex mutex_;                                                          // guards states_
    std::map<std::string, std::pair<uint64_t, std::shared_ptr<State>>> states_; // by name
};

} // namespace einsummable::server
