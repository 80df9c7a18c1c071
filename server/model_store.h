#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/tensor_type.h"
#include "einsummable/v1/graph.pb.h"
#include "einsummable/v1/service.pb.h"
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

// A model's dynamic batching (v1::Batching as registered, resolved; server/batcher.h).
struct BatchSpec {
    static constexpr int kDefaultMaxSize = 8;
    static constexpr int kMaxSize = 1024;
    static constexpr int64_t kMaxQueueDelayUs = 10'000'000; // ten seconds

    std::string symbol;         // the batch dimension
    std::vector<int> preferred; // ascending, distinct
    int max_size = kDefaultMaxSize;
    std::optional<int64_t> max_queue_delay_us; // unset: the server's

    // Slots an execution of `requests` requests runs with: the smallest preferred size at
    // least `requests`, else `requests` itself.
    int slots_for(int requests) const;
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
    std::optional<BatchSpec> batching_;
    std::vector<std::string> packed_operators_; // the nodes that take sequence_ends
    int64_t graph_bytes_ = 0;
    int64_t weight_bytes_ = 0;

    mutable std::mutex mutex_; // guards weight_values_
    WeightSnapshot weight_values_;
};

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

class ModelStore;

// The bytes held by uploads in progress, against a limit (thread-safe). An upload reserves
// what its buffer grows by before it grows, and releases it all when it commits (the bytes
// then belong to the weight), fails or is dropped. `on_change`, when set, is told every change
// (the einsummable_upload_bytes_in_flight gauge).
class UploadBudget {
public:
    explicit UploadBudget(int64_t limit, std::function<void(int64_t delta)> on_change = nullptr)
        : limit_(limit), on_change_(std::move(on_change)) {}

    // Reserves `bytes` if the total stays within the limit. Otherwise false, with the bytes
    // held at that moment in `held`.
    bool try_reserve(int64_t bytes, int64_t* held);
    void release(int64_t bytes);
    int64_t held() const { return held_.load(); }
    int64_t limit() const { return limit_; }

private:
    const int64_t limit_;
    const std::function<void(int64_t)> on_change_;
    std::atomic<int64_t> held_{0};
};

// One upload in progress (UploadTensor): created by ModelStore::begin_upload from the first
// chunk's header, fed the data in order, committed at the end of the stream. Nothing is visible
// until commit() succeeds, and a failed or abandoned upload changes nothing. The memory its
// buffer holds counts against the store's UploadBudget until it commits or is destroyed.
// For examples see tests/unit/server/model_store_test.cc and tests/integration/uploads_test.cc.
class WeightUpload {
public:
    WeightUpload(const WeightUpload&) = delete;
    WeightUpload& operator=(const WeightUpload&) = delete;
    ~WeightUpload();

    // The next chunk's data. `offset`, where the chunk starts in the tensor's bytes, is given
    // on every chunk or on none (the first chunk decides); it must equal received_bytes().
    // InvalidArgument for a wrong offset, a mix of chunks with and without one, or bytes past
    // the weight's size; ResourceExhausted when growing the buffer would take the uploads in
    // progress past max_upload_bytes_in_flight.
    absl::Status append(absl::Span<const std::byte> data,
                        std::optional<int64_t> offset = std::nullopt);
    // Publishes the weight atomically. InvalidArgument when fewer bytes than the weight's size
    // arrived; DataLoss when the header gave a CRC-32 and the bytes' differs (nothing is
    // replaced); NotFound when the model was unregistered (or replaced) during the upload.
    // Either way the upload is over: its budget is given back and it takes no more chunks.
    absl::Status commit();

    const std::string& model() const { return model_->name(); }
    const std::string& name() const { return name_; }
    int64_t expected_bytes() const { return expected_bytes_; }
    int64_t received_bytes() const { return received_bytes_; }
    // Chunks appended so far (each append() call that was accepted).
    int64_t chunks() const { return chunks_; }
    // Bytes of the upload budget this upload holds now: its buffer's capacity.
    int64_t reserved_bytes() const { return reserved_bytes_; }

private:
    friend class ModelStore;
    WeightUpload(ModelStore* store, std::shared_ptr<Model> model, std::string name,
                 int64_t expected_bytes, std::optional<uint32_t> expected_crc32);
    // Gives the buffer and its reservation back (after commit moved the bytes out, or on
    // failure).
    void release();

    ModelStore* store_;
    std::shared_ptr<Model> model_;
    std::string name_;
    int64_t expected_bytes_;
    std::optional<uint32_t> expected_crc32_;
    std::vector<std::byte> data_;
    int64_t received_bytes_ = 0;
    int64_t reserved_bytes_ = 0;
    int64_t chunks_ = 0;
    // Whether the first chunk carried an offset; unset before the first chunk.
    std::optional<bool> with_offsets_;
    uint32_t crc32_ = 0;     // of the bytes received so far
    bool committed_ = false; // commit() was called: the bytes have left the upload
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
                   const std::vector<std::string>& weights, const v1::Batching* batching = nullptr);
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
    absl::Status commit(WeightUpload& upload);
    // Sets model.batching_ and model.packed_operators_ after checking that the model's graph
    // batches along the dimension of `spec` (register_model, once the graph built).
    static absl::Status check_batching(Model& model, const BatchSpec& spec,
                                       const std::set<std::string>& weights);
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

// "f32", "bf16", ...; the wire enum's value for unknown numbers.
std::string wire_dtype_name(v1::DType dtype);
using graphdef::from_wire_dtype;
using graphdef::to_wire_dtype;
// "[2, 1024]".
std::string shape_string(absl::Span<const int64_t> shape);

} // namespace einsummable::server
