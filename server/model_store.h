#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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
#include "compiler/ir/tensor_type.h"
#include "einsummable/v1/graph.pb.h"
#include "proto/graph_def.h"

namespace einsummable::server {

// One weight's bytes as uploaded (the dtype's little-endian bytes, row-major). Shared, never
// modified: plans load from it and a newer upload replaces the pointer, not the bytes.
using WeightBytes = std::shared_ptr<const std::vector<std::byte>>;

// The weights of a model at one moment. `generation` is unique across the whole store and
// changes with every committed upload, so a plan that loaded generation g is up to date exactly
// when the model's generation is still g.
struct WeightSnapshot {
    uint64_t generation = 0;
    std::map<std::string, WeightBytes> values;
};

// A tensor of a model's interface as metadata shows it (KServe ModelMetadata): dtype and shape,
// -1 for a dimension that depends on the model's symbols.
struct TensorSignature {
    std::string name;
    ir::DType dtype = ir::DType::f32;
    std::vector<int64_t> shape;
};

// A registered model: its graph (immutable) and the weights uploaded so far.
class Model {
public:
    const std::string& name() const { return name_; }
    const v1::GraphDef& graph_def() const { return graph_def_; }
    // Hex of a 128-bit FNV-1a hash of the GraphDef's deterministic serialization: stable across
    // processes, so persisted plans of the same graph are found again (server::PlanKey).
    const std::string& fingerprint() const { return fingerprint_; }
    // Unique per registration: a model registered again under the same name gets a new id.
    uint64_t id() const { return id_; }
    const std::vector<std::string>& symbols() const { return symbols_; }
    // Graph inputs given with every Execute, in graph order.
    const std::vector<std::string>& inputs() const { return inputs_; }
    // Graph inputs uploaded once, in graph order; their types are fixed.
    const std::vector<std::string>& weights() const { return weights_; }
    const std::vector<std::string>& saved() const { return saved_; }
    // The inputs() and the saved() tensors with their types; an input's dimension is -1 when
    // the GraphDef names a symbol for it, a saved tensor's when it differs between the graph
    // built at two probe bindings of the symbols (all of them -1 if the second does not build).
    const std::vector<TensorSignature>& input_signatures() const { return input_signatures_; }
    const std::vector<TensorSignature>& output_signatures() const { return output_signatures_; }
    // nullptr when `name` is not a weight of the model.
    const ir::TensorType* weight_type(absl::string_view name) const;
    bool is_weight(absl::string_view name) const { return weight_type(name) != nullptr; }

    WeightSnapshot weights_snapshot() const;
    // Weights uploaded so far, in graph order.
    std::vector<std::string> weights_loaded() const;
    // The first weight (graph order) not uploaded yet; nullopt when all are.
    std::optional<std::string> missing_weight() const;

private:
    friend class ModelStore;
    Model() = default;

    std::string name_;
    v1::GraphDef graph_def_;
    std::string fingerprint_;
    uint64_t id_ = 0;
    std::vector<std::string> symbols_;
    std::vector<std::string> inputs_;
    std::vector<std::string> weights_;
    std::map<std::string, ir::TensorType, std::less<>> weight_types_;
    std::vector<std::string> saved_;
    std::vector<TensorSignature> input_signatures_;
    std::vector<TensorSignature> output_signatures_;

    mutable std::mutex mutex_; // guards weight_values_
    WeightSnapshot weight_values_;
};

struct ModelStoreLimits {
    int64_t max_tensor_bytes = int64_t{1} << 32;
    int max_graph_operators = 10000;
};

class ModelStore;

// One upload in progress (UploadTensor): created by ModelStore::begin_upload from the first
// chunk's header, fed the data in order, committed at the end of the stream. Nothing is visible
// until commit() succeeds, and a failed or abandoned upload changes nothing.
class WeightUpload {
public:
    // InvalidArgument when the bytes would go past the weight's size.
    absl::Status append(absl::Span<const std::byte> data);
    // Publishes the weight atomically. InvalidArgument when fewer bytes than the weight's size
    // arrived; NotFound when the model was unregistered (or replaced) during the upload.
    absl::Status commit();

    const std::string& model() const { return model_->name(); }
    const std::string& name() const { return name_; }
    int64_t expected_bytes() const { return expected_bytes_; }
    int64_t received_bytes() const { return received_bytes_; }

private:
    friend class ModelStore;
    WeightUpload(ModelStore* store, std::shared_ptr<Model> model, std::string name,
                 int64_t expected_bytes);

    ModelStore* store_;
    std::shared_ptr<Model> model_;
    std::string name_;
    int64_t expected_bytes_;
    std::vector<std::byte> data_;
    int64_t received_bytes_ = 0;
    bool committed_ = false;
};

// The registered models (thread-safe). Models are handed out as shared_ptr, so a request that
// found a model keeps it alive after UnregisterModel.
class ModelStore {
public:
    explicit ModelStore(ModelStoreLimits limits) : limits_(limits) {}

    // Validates and registers. InvalidArgument names the model name, weight, tensor, operator
    // or dimension at fault; ResourceExhausted over max_graph_operators or max_tensor_bytes (a
    // weight); AlreadyExists when the name is taken. The graph is checked by building it with
    // every symbol bound to a probe size (kProbeSizes: the first that builds wins, else the
    // first one's error), so errors that do not depend on the symbols' values surface here.
    absl::StatusOr<std::shared_ptr<const Model>>
    register_model(const std::string& name, const v1::GraphDef& graph,
                   const std::vector<std::string>& weights);
    // NotFound naming the model.
    absl::StatusOr<std::shared_ptr<const Model>> find(absl::string_view name) const;
    absl::Status unregister(absl::string_view name);
    // By name.
    std::vector<std::shared_ptr<const Model>> list() const;

    // From an upload's header: NotFound (model), InvalidArgument (not a weight of the model,
    // dtype or shape different from the graph's), ResourceExhausted (over max_tensor_bytes).
    absl::StatusOr<std::unique_ptr<WeightUpload>> begin_upload(absl::string_view model,
                                                               absl::string_view name,
                                                               v1::DType dtype,
                                                               absl::Span<const int64_t> shape);

    const ModelStoreLimits& limits() const { return limits_; }

    static constexpr int64_t kProbeSizes[] = {5040, 4096};

private:
    friend class WeightUpload;
    absl::Status commit(WeightUpload& upload);

    const ModelStoreLimits limits_;
    mutable std::mutex mutex_; // guards models_ and next_id_
    std::map<std::string, std::shared_ptr<Model>, std::less<>> models_;
    uint64_t next_id_ = 1;
    std::atomic<uint64_t> next_generation_{1};
};

// "f32", "bf16", ...; the wire enum's value for unknown numbers.
std::string wire_dtype_name(v1::DType dtype);
using graphdef::from_wire_dtype;
using graphdef::to_wire_dtype;
// "[2, 1024]".
std::string shape_string(absl::Span<const int64_t> shape);

} // namespace einsummable::server
