#include "server/weight_residency.h"

#include <chrono>
#include <condition_variable>

#include "absl/strings/str_cat.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/support/status_macros.h"
#include "server/plan_key.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {

struct WeightResidency::State {
    std::mutex mutex;
    std::condition_variable changed;
    bool defining = false; // guarded by mutex; a first plan is being made
    std::shared_ptr<runtime::ResidentWeights> weights; // guarded by mutex
    // Guarded by mutex, once ready: PlanKey::to_string of the plan that laid them out.
    std::string defining_key;
    bool store_checked = false; // guarded by mutex; the plan store was asked for a layout
    std::mutex write_mutex;     // held while weights are written into the resident memory
};

WeightResidency::WeightResidency(PlanPersistence& persistence, runtime::Backend& backend,
                                 std::string version)
    : persistence_(persistence), backend_(backend), version_(std::move(version)) {}

std::shared_ptr<WeightResidency::State> WeightResidency::state(const Model& model) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& [id, state] = states_[model.name()];
    if (state == nullptr || id != model.id()) {
        id = model.id();
        state = std::make_shared<State>();
    }
    return state;
}

void WeightResidency::erase(const std::string& model, std::optional<uint64_t> id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = states_.find(model);
    if (it != states_.end() && (!id.has_value() || it->second.first == *id)) {
        states_.erase(it);
    }
}

void WeightResidency::restore_layout(const Model& model, State& residency) {
    // A layout the store kept from an earlier run: its first line is the defining key.
    absl::StatusOr<std::string> stored =
        persistence_.load_layout(layout_identity(model.name(), model.fingerprint(), version_));
    if (stored.ok()) {
        const size_t newline = stored->find('\n');
        absl::StatusOr<physical::ResidentLayout> layout =
            newline == std::string::npos ? absl::DataLossError("no defining key line")
                                         : physical::parse_resident_layout_record(
                                               absl::string_view(*stored).substr(newline + 1));
        absl::StatusOr<std::shared_ptr<runtime::ResidentWeights>> weights =
            layout.ok() ? runtime::ResidentWeights::allocate(*std::move(layout), backend_)
                        : layout.status();
        if (weights.ok()) {
            residency.weights = *std::move(weights);
            residency.defining_key = stored->substr(0, newline);
            spdlog::info("model '{}': weights laid out as the plan store kept them (layout "
                         "{}, defined by {})",
                         model.name(), residency.weights->layout().fingerprint(),
                         residency.defining_key);
        } else {
            spdlog::warn("model '{}': the stored weights layout is unusable, its first plan "
                         "lays them out again: {}",
                         model.name(), weights.status().ToString());
        }
    } else if (!absl::IsNotFound(stored.status())) {
        spdlog::warn("model '{}': cannot read the stored weights layout: {}", model.name(),
                     stored.status().ToString());
    }
}

absl::StatusOr<WeightResidency::Choice>
WeightResidency::layout_or_define(const Model& model, const CancelCheck& cancelled,
                                  std::string* defining_key) {
    std::shared_ptr<State> residency = state(model);
    std::unique_lock<std::mutex> lock(residency->mutex);
    if (!residency->store_checked) {
        residency->store_checked = true;
        restore_layout(model, *residency);
    }
    for (;;) {
        Choice choice;
        if (residency->weights != nullptr) {
            choice.resident = residency->weights;
            *defining_key = residency->defining_key;
            return choice;
        }
        if (!residency->defining) {
            residency->defining = true;
            choice.defining = true;
            choice.state = residency;
            return choice;
        }
        // Another request's plan is laying the weights out: wait for it, as a request waits for
        // a compile (its deadline and cancellation still apply).
        residency->changed.wait_for(lock, std::chrono::milliseconds(20));
        if (cancelled) {
            EINSUMMABLE_RETURN_IF_ERROR(cancelled());
        }
    }
}

absl::StatusOr<WeightResidency::Choice> WeightResidency::choose(const Model& model, PlanKey& key,
                                                                const CancelCheck& cancelled) {
    std::string defining_key;
    EINSUMMABLE_ASSIGN_OR_RETURN(Choice choice, layout_or_define(model, cancelled, &defining_key));
    if (choice.defining) {
        key.weights = "defines";
        return choice;
    }
    PlanKey as_definer = key;
    as_definer.weights = "defines";
    if (as_definer.to_string() == defining_key) {
        key.weights = "defines"; // the plan that laid them out, made or found again
        choice.again = true;
    } else if (choice.resident->layout().devices == key.devices) {
        key.weights = absl::StrCat("resident:", choice.resident->layout().fingerprint());
    } else {
        key.weights = "own";
        choice.resident = nullptr;
    }
    return choice;
}

void WeightResidency::end_defining(const Choice& choice, const PlanKey& key,
                                   std::shared_ptr<runtime::ResidentWeights> laid_out) {
    finish_defining(*choice.state, key.to_string(), key.model, key.graph_fingerprint,
                    std::move(laid_out));
}

absl::StatusOr<WeightResidency::Choice>
WeightResidency::choose_for_generation(const Model& model, const CancelCheck& cancelled) {
    std::string defining_key;
    return layout_or_define(model, cancelled, &defining_key);
}

void WeightResidency::end_generation_defining(const Choice& choice, const Model& model,
                                              std::shared_ptr<runtime::ResidentWeights> laid_out) {
    finish_defining(*choice.state, std::string(kGenerationPoolDefiner), model.name(),
                    model.fingerprint(), std::move(laid_out));
}

void WeightResidency::finish_defining(State& residency, std::string defining_key,
                                      const std::string& model, const std::string& fingerprint,
                                      std::shared_ptr<runtime::ResidentWeights> laid_out) {
    {
        std::lock_guard<std::mutex> lock(residency.mutex);
        residency.defining = false;
        if (laid_out != nullptr) {
            residency.weights = std::move(laid_out);
            residency.defining_key = std::move(defining_key);
            if (absl::Status saved = persistence_.save_layout(
                    layout_identity(model, fingerprint, version_),
                    absl::StrCat(residency.defining_key, "\n",
                                 physical::resident_layout_record(residency.weights->layout())));
                !saved.ok()) {
                spdlog::warn("model '{}': cannot keep the weights layout in the plan store "
                             "(a restart lays them out again): {}",
                             model, saved.ToString());
            }
            spdlog::info("model '{}': weights resident, {} B over {} devices (layout {}, laid out "
                         "by {})",
                         model, residency.weights->layout().total_bytes(),
                         residency.weights->layout().devices,
                         residency.weights->layout().fingerprint(), residency.defining_key);
        }
    }
    residency.changed.notify_all();
}

absl::Status WeightResidency::write(const Model& model, const runtime::Plan& plan,
                                    const WeightSnapshot& snapshot) {
    const auto generation = static_cast<int64_t>(snapshot.generation);
    const std::shared_ptr<runtime::ResidentWeights>& resident = plan.resident();
    if (resident == nullptr || resident->generation() == generation) {
        return absl::OkStatus();
    }
    // One writer at a time, so the memory never holds an older generation than it says.
    std::shared_ptr<State> residency = state(model);
    std::lock_guard<std::mutex> lock(residency->write_mutex);
    if (resident->generation() != generation) {
        for (const auto& [name, bytes] : snapshot.values) {
            if (!plan.is_resident(name)) {
                continue;
            }
            if (absl::Status status = resident->write(name, bytes->span()); !status.ok()) {
                return absl::Status(
                    status.code(), absl::StrCat("writing weight '", name, "': ", status.message()));
            }
        }
        resident->set_generation(generation);
    }
    return absl::OkStatus();
}

} // namespace einsummable::server
