#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "einsummable/v1/graph.pb.h"
#include "einsummable/v1/service.pb.h"
#include "server/model.h"
#include "server/weight_upload.h"

// The registered models: registration (its checks in server/model_registration.h), lookup,
// unregistration, the limits on what registrations may hold, and the start of weight uploads
// (server/weight_upload.h). The models themselves are server/model.h.
namespace einsummable::server {

struct ModelStoreLimits {
    int64_t max_tensor_bytes = int64_t{1} << 32;
    int max_graph_operators = 10000;
    // Bytes all uploads in progress may hold together (--max_upload_bytes_in_flight).
    int64_t max_upload_bytes_in_flight = int64_t{4} << 30;
    // Entries of one operator's `sequence_ends` attribute (--max_sequence_ends): far above any
    // real packing (the paper's llama-block packs 128 sequences), far below what makes a
    // request's work large for its size.
    int64_t max_sequence_ends = 65536;
    // Models registered at once (--max_models), and the Model::bytes() of them all together
    // (--max_model_bytes): the memory registrations may make the daemon hold, which nothing
    // else bounds (a client may register models without end).
    int max_models = 256;
    int64_t max_model_bytes = int64_t{64} << 30;
};

// The registered models (thread-safe). Models are handed out as shared_ptr, so a request that
// found a model keeps it alive after UnregisterModel.
class ModelStore {
public:
    // `on_upload_bytes_change` is told every change of the bytes uploads in progress hold
    // (UploadBudget); `on_models_change` every change of the models registered and their
    // bytes (as deltas, under the store's lock). Either may be null.
    explicit ModelStore(
        ModelStoreLimits limits,
        std::function<void(int64_t delta)> on_upload_bytes_change = nullptr,
        std::function<void(int64_t models_delta, int64_t bytes_delta)> on_models_change = nullptr)
        : limits_(limits),
          upload_budget_(limits.max_upload_bytes_in_flight, std::move(on_upload_bytes_change)),
          on_models_change_(std::move(on_models_change)) {}

    // Validates and registers. InvalidArgument names the model name, weight, tensor, operator
    // or dimension at fault, also for a name over graphdef::kMaxNameLength or with a control
    // character (graphdef::check_names); ResourceExhausted over max_graph_operators,
    // max_sequence_ends (naming the operator) or max_tensor_bytes (a weight, or an input whose
    // size depends on no symbol), or over max_models or max_model_bytes with this model (naming
    // the flag, its value and what is registered; the models registered are untouched);
    // AlreadyExists when the name is taken. The graph is checked by
    // building it with every symbol bound to a probe size (kProbeSizes: the first that builds wins,
    // else the first one's error), so errors that do not depend on the symbols' values surface
    // here.
    //
    // With `batching` (may be null), the graph must batch along its dimension (v1::Batching):
    // InvalidArgument naming the setting, input, saved tensor or operator that does not.
    absl::StatusOr<std::shared_ptr<const Model>>
    register_model(const std::string& name, const v1::GraphDef& graph,
                   const std::vector<std::string>& weights, const v1::Batching* batching = nullptr,
                   const v1::CompileOptions* options = nullptr);
    // A model checked and built as register_model does, not registered: its weights are given
    // with set_staged_weight, then it is published by replace (the model repository's loads,
    // server/model_repository.h, which must not show a model without its weights).
    // `version`: Model::version().
    absl::StatusOr<std::shared_ptr<Model>> stage(const std::string& name, const v1::GraphDef& graph,
                                                 const std::vector<std::string>& weights,
                                                 const v1::Batching* batching = nullptr,
                                                 int64_t version = 0,
                                                 const v1::CompileOptions* options = nullptr);
    // Weight `weight` of the staged `model`: InvalidArgument naming it when it is not a weight
    // or its size is not the graph's.
    absl::Status set_staged_weight(Model& model, const std::string& weight, WeightBytes bytes);
    // Publishes the staged `model` under its name in one step, in place of the model registered
    // there now, if any, which must be the one with id `replaces` (0: the name must be free);
    // otherwise AlreadyExists. The limits count the new model without the one it replaces.
    // Returns the model replaced (null if none): requests that found it keep it.
    absl::StatusOr<std::shared_ptr<const Model>> replace(std::shared_ptr<Model> model,
                                                         uint64_t replaces);
    // NotFound naming the model.
    absl::StatusOr<std::shared_ptr<const Model>> find(absl::string_view name) const;
    absl::Status unregister(absl::string_view name);
    // By name.
    std::vector<std::shared_ptr<const Model>> list() const;

    // From an upload's header: NotFound (model), InvalidArgument (not a weight of the model,
    // dtype or shape different from the graph's), ResourceExhausted (over max_tensor_bytes, or
    // larger than max_upload_bytes_in_flight, so it could never be held). `crc32`: the CRC-32
    // the whole tensor's bytes must have, checked at commit.
    absl::StatusOr<std::unique_ptr<WeightUpload>>
    begin_upload(absl::string_view model, absl::string_view name, v1::DType dtype,
                 absl::Span<const int64_t> shape, std::optional<uint32_t> crc32 = std::nullopt);

    const ModelStoreLimits& limits() const { return limits_; }
    // Models registered now, and their Model::bytes() together.
    int64_t model_count() const;
    int64_t model_bytes() const;
    // Bytes held by uploads in progress now.
    int64_t upload_bytes_in_flight() const { return upload_budget_.held(); }

    static constexpr int64_t kProbeSizes[] = {5040, 4096};

private:
    friend class WeightUpload;
    // Publishes an uploaded weight (WeightUpload::commit, server/weight_upload.cc).
    absl::Status commit(WeightUpload& upload);
    // The last step of register_model: the name still free and room left, checked and taken
    // under one lock; the model gets its id.
    absl::StatusOr<std::shared_ptr<const Model>> publish(std::shared_ptr<Model> model);
    // OK when `model` (null: its size not known yet, only the count is checked), to be
    // registered as `name`, fits beside those registered; else ResourceExhausted naming the
    // limit, its value and what is registered. Caller holds mutex_.
    absl::Status check_room(const std::string& name, const Model* model) const;

    const ModelStoreLimits limits_;
    UploadBudget upload_budget_;
    const std::function<void(int64_t, int64_t)> on_models_change_;
    mutable std::mutex mutex_; // guards models_, model_bytes_ and next_id_
    std::map<std::string, std::shared_ptr<Model>, std::less<>> models_;
    int64_t model_bytes_ = 0; // the Model::bytes() of models_
    uint64_t next_id_ = 1;
    std::atomic<uint64_t> next_generation_{1};
};

} // namespace einsummable::server
