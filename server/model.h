#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/tensor_type.h"
#include "einsummable/v1/graph.pb.h"
#include "einsummable/v1/service.pb.h"
#include "proto/graph_def.h"

// A registered model as requests see it: its graph and interface (fixed at registration,
// server/model_registration.h), its batching, and the weights uploaded so far
// (server/weight_upload.h). The registry of models is server/model_store.h.
namespace einsummable::server {

// One weight's bytes (the dtype's little-endian bytes, row-major), never modified: either owned
// (an upload over gRPC assembles them in its own buffer) or a view into memory someone else
// holds, kept alive by `owner` (a model repository's memory-mapped safetensors file: the weight
// is read from the file's pages when a plan places it on the devices, so loading a model from
// disk allocates no weight-sized buffer and holds no second host copy).
class WeightData {
public:
    explicit WeightData(std::vector<std::byte> bytes)
        : owned_(std::move(bytes)), view_(owned_.data(), owned_.size()) {}
    // `view` must stay valid, unchanged, for as long as `owner` lives.
    WeightData(std::shared_ptr<const void> owner, absl::Span<const std::byte> view)
        : owner_(std::move(owner)), view_(view) {}
    WeightData(const WeightData&) = delete;
    WeightData& operator=(const WeightData&) = delete;

    const std::byte* data() const { return view_.data(); }
    size_t size() const { return view_.size(); }
    absl::Span<const std::byte> span() const { return view_; }
    // Whether the bytes are this object's own (an upload) rather than a view (a mapped file).
    bool owns_bytes() const { return owner_ == nullptr; }

    friend bool operator==(const WeightData& data, const std::vector<std::byte>& bytes) {
        return data.view_ == absl::Span<const std::byte>(bytes);
    }

private:
    std::shared_ptr<const void> owner_;
    std::vector<std::byte> owned_;
    absl::Span<const std::byte> view_; // into owned_, or into what owner_ keeps alive
};

// Shared, never modified: plans load from it and a newer upload replaces the pointer, not the
// bytes.
using WeightBytes = std::shared_ptr<const WeightData>;

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

// A model's dynamic batching (v1::Batching as registered, resolved; server/batcher.h).
struct BatchSpec {
    static constexpr int kDefaultMaxSize = 8;
    static constexpr int kMaxSize = 1024;
    static constexpr int64_t kMaxQueueDelayUs = 10'000'000; // ten seconds

    std::string symbol;         // the batch dimension
    std::vector<int> preferred; // ascending, distinct
    int max_size = kDefaultMaxSize;
    std::optional<int64_t> max_queue_delay_us; // unset: the server's
    // Token buckets along `symbol`, ascending and distinct; empty: none (v1::TokenBuckets).
    std::vector<int64_t> buckets;
    // Bucket plans compiled in the background after registration (v1::TokenBuckets::
    // skip_warm_up; server/warm_up.h).
    bool warm_up = true;

    // Slots an execution of `requests` requests runs with: the smallest preferred size at
    // least `requests`, else `requests` itself.
    int slots_for(int requests) const;
    // The bucket a request of `tokens` runs padded to: the smallest bucket of at least
    // `tokens`; nullopt without buckets or above the largest.
    std::optional<int64_t> bucket_for(int64_t tokens) const;
    v1::Batching to_wire(int64_t server_delay_us) const;
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
    // The model repository's version directory it was loaded from (server/model_repository.h);
    // 0 for a model registered over RegisterModel.
    int64_t version() const { return version_; }
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
    // Unset for a model registered without batching.
    const std::optional<BatchSpec>& batching() const { return batching_; }
    // The compile options registered with the model (v1::RegisterModelRequest::options): the
    // fields a request leaves unset take these (RequestShapes::shape).
    const v1::CompileOptions& options() const { return options_; }
    // What the model counts against ModelStoreLimits::max_model_bytes: its GraphDef's
    // serialized size plus the size of every weight the graph declares, uploaded or not (so a
    // model accepted can always be given all its weights).
    int64_t graph_bytes() const { return graph_bytes_; }
    int64_t weight_bytes() const { return weight_bytes_; }
    int64_t bytes() const { return graph_bytes_ + weight_bytes_; }
    // The graph with its symbols bound and its weights marked (ir::GraphTensor::weight); for a
    // model with batching, with `sequence_ends` given to every operator that takes them
    // (attention, rope) unless it is empty.
    absl::StatusOr<ir::Graph> build(const graphdef::Bindings& bindings,
                                    absl::Span<const int64_t> sequence_ends = {}) const;

    WeightSnapshot weights_snapshot() const;
    // Weights uploaded so far, in graph order.
    std::vector<std::string> weights_loaded() const;
    // The first weight (graph order) not uploaded yet; nullopt when all are.
    std::optional<std::string> missing_weight() const;

private:
    friend class ModelStore;        // gives the id, publishes uploads
    friend class ModelRegistration; // fills in the rest
    Model() = default;

    std::string name_;
    v1::GraphDef graph_def_;
    std::string fingerprint_;
    uint64_t id_ = 0;
    int64_t version_ = 0;
    std::vector<std::string> symbols_;
    std::vector<std::string> inputs_;
    std::vector<std::string> weights_;
    std::map<std::string, ir::TensorType, std::less<>> weight_types_;
    std::vector<std::string> saved_;
    std::vector<TensorSignature> input_signatures_;
    std::vector<TensorSignature> output_signatures_;
    std::optional<BatchSpec> batching_;
    v1::CompileOptions options_;
    std::vector<std::string> packed_operators_; // the nodes that take sequence_ends
    int64_t graph_bytes_ = 0;
    int64_t weight_bytes_ = 0;

    mutable std::mutex mutex_; // guards weight_values_
    WeightSnapshot weight_values_;
};

// "f32", "bf16", ...; the wire enum's value for unknown numbers.
std::string wire_dtype_name(v1::DType dtype);
using graphdef::from_wire_dtype;
using graphdef::to_wire_dtype;
// "[2, 1024]".
std::string shape_string(absl::Span<const int64_t> shape);

} // namespace einsummable::server
