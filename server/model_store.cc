#include "server/model_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "proto/graph_def.h"
#include "server/model_registration.h"

namespace einsummable::server {

absl::StatusOr<std::shared_ptr<const Model>>
ModelStore::register_model(const std::string& name, const v1::GraphDef& graph,
                           const std::vector<std::string>& weights, const v1::Batching* batching,
                           const v1::CompileOptions* options) {
    ModelRegistration registration(name, graph, weights, batching, limits_);
    EINSUMMABLE_RETURN_IF_ERROR(registration.check_request());
    // A full store refuses before the graph is built (a 10,000-operator graph takes a while);
    // the bytes, known once it is, are checked with the count again at the end.
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (models_.count(name) == 0) {
            EINSUMMABLE_RETURN_IF_ERROR(check_room(name, nullptr));
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, registration.build());
    if (options != nullptr) {
        model->options_ = *options;
    }
    return publish(std::move(model));
}

absl::StatusOr<std::shared_ptr<Model>>
ModelStore::stage(const std::string& name, const v1::GraphDef& graph,
                  const std::vector<std::string>& weights, const v1::Batching* batching,
                  int64_t version, const v1::CompileOptions* options) {
    ModelRegistration registration(name, graph, weights, batching, limits_);
    EINSUMMABLE_RETURN_IF_ERROR(registration.check_request());
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Model> model, registration.build());
    model->version_ = version;
    if (options != nullptr) {
        model->options_ = *options;
    }
    return model;
}

absl::Status ModelStore::set_staged_weight(Model& model, const std::string& weight,
                                           WeightBytes bytes) {
    const ir::TensorType* type = model.weight_type(weight);
    if (type == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            graphdef::quote_name(weight), " is not a weight of model '", model.name(), "'"));
    }
    if (static_cast<int64_t>(bytes->size()) != type->bytes()) {
        return absl::InvalidArgumentError(absl::StrCat("weight '", weight, "' of model '",
                                                       model.name(), "' takes ", type->bytes(),
                                                       " bytes; got ", bytes->size()));
    }
    std::lock_guard<std::mutex> model_lock(model.mutex_);
    model.weight_values_.values[weight] = std::move(bytes);
    model.weight_values_.generation = next_generation_++;
    return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> ModelStore::replace(std::shared_ptr<Model> model,
                                                                 uint64_t replaces) {
    const std::string name = model->name();
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = models_.find(name);
    std::shared_ptr<Model> old = it == models_.end() ? nullptr : it->second;
    if (old != nullptr && old->id() != replaces) {
        return absl::AlreadyExistsError(absl::StrCat("model '", name, "' is already registered",
                                                     replaces == 0 ? "" : " by another load",
                                                     " (unregister it first to replace it)"));
    }
    const int64_t old_bytes = old == nullptr ? 0 : old->bytes();
    if (old != nullptr) {
        // Counted without the model replaced, which goes in the same step.
        models_.erase(it);
        model_bytes_ -= old_bytes;
    }
    absl::Status room = check_room(name, model.get());
    if (!room.ok()) {
        if (old != nullptr) {
            models_[name] = old;
            model_bytes_ += old_bytes;
        }
        return room;
    }
    model->id_ = next_id_++;
    models_[name] = model;
    model_bytes_ += model->bytes();
    if (on_models_change_) {
        on_models_change_(old == nullptr ? 1 : 0, model->bytes() - old_bytes);
    }
    return std::shared_ptr<const Model>(old);
}

absl::StatusOr<std::shared_ptr<const Model>> ModelStore::publish(std::shared_ptr<Model> model) {
    const std::string& name = model->name();
    std::lock_guard<std::mutex> lock(mutex_);
    if (models_.count(name)) {
        return absl::AlreadyExistsError(absl::StrCat(
            "model '", name, "' is already registered (unregister it first to replace it)"));
    }
    // Checked and counted under one lock: concurrent registrations cannot both take the last
    // room.
    EINSUMMABLE_RETURN_IF_ERROR(check_room(name, model.get()));
    model->id_ = next_id_++;
    models_[name] = model;
    model_bytes_ += model->bytes();
    if (on_models_change_) {
        on_models_change_(1, model->bytes());
    }
    return std::shared_ptr<const Model>(model);
}

absl::Status ModelStore::check_room(const std::string& name, const Model* model) const {
    const int64_t count = static_cast<int64_t>(models_.size());
    if (count >= limits_.max_models) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "model '", name, "': ", count,
            " models are registered, the most the server holds (--max_models=", limits_.max_models,
            "); unregister one first"));
    }
    if (model != nullptr && model->bytes() > limits_.max_model_bytes - model_bytes_) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "model '", name, "' takes ", model->bytes(), " bytes (graph ", model->graph_bytes(),
            ", weights ", model->weight_bytes(), "); the ", count, " models registered take ",
            model_bytes_, " of the ", limits_.max_model_bytes,
            " bytes the server holds (--max_model_bytes=", limits_.max_model_bytes,
            "); unregister one first"));
    }
    return absl::OkStatus();
}

int64_t ModelStore::model_count() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int64_t>(models_.size());
}

int64_t ModelStore::model_bytes() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return model_bytes_;
}

absl::StatusOr<std::shared_ptr<const Model>> ModelStore::find(absl::string_view name) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = models_.find(name);
    if (it == models_.end()) {
        return absl::NotFoundError(
            absl::StrCat("model ", graphdef::quote_name(name), " is not registered"));
    }
    return std::shared_ptr<const Model>(it->second);
}

absl::Status ModelStore::unregister(absl::string_view name) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = models_.find(name);
    if (it == models_.end()) {
        return absl::NotFoundError(
            absl::StrCat("model ", graphdef::quote_name(name), " is not registered"));
    }
    const int64_t bytes = it->second->bytes();
    models_.erase(it);
    model_bytes_ -= bytes;
    if (on_models_change_) {
        on_models_change_(-1, -bytes);
    }
    return absl::OkStatus();
}

std::vector<std::shared_ptr<const Model>> ModelStore::list() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::shared_ptr<const Model>> out;
    for (const auto& [name, model] : models_) {
        out.push_back(model);
    }
    return out;
}

} // namespace einsummable::server
