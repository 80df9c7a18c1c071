#include "server/model_store.h"

#include <algorithm>
#include <optional>
#include <set>
#include <utility>

#include <zlib.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/batch_rows.h"
#include "compiler/support/status_macros.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "proto/graph_def.h"
#include "server/tensor_limits.h"

namespace einsummable::server {
namespace {

constexpr size_t kMaxModelNameLength = 128;

absl::Status check_model_name(const std::string& name) {
    if (name.empty()) {
        return absl::InvalidArgumentError("model: the name is empty");
    }
    if (name.size() > kMaxModelNameLength) {
        return absl::InvalidArgumentError(absl::StrCat("model: the name has ", name.size(),
                                                       " characters; at most ", kMaxModelNameLength,
                                                       " are allowed"));
    }
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                        (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.';
        if (!ok) {
            return absl::InvalidArgumentError(
                absl::StrCat("model: ", graphdef::quote_name(name),
                             " is not a valid name (letters, digits, '_', '-', '.')"));
        }
    }
    return absl::OkStatus();
}

// 128-bit FNV-1a of the GraphDef's deterministic serialization (map entries sorted by key), as
// 32 hex digits. Stable across processes and builds, unlike absl::Hash.
std::string graph_fingerprint(const v1::GraphDef& graph) {
    std::string bytes;
    {
        google::protobuf::io::StringOutputStream stream(&bytes);
        google::protobuf::io::CodedOutputStream coded(&stream);
        coded.SetSerializationDeterministic(true);
        graph.SerializeToCodedStream(&coded);
    }
    using u128 = unsigned __int128;
    const u128 prime = (u128{0x0000000001000000} << 64) | u128{0x000000000000013B};
    u128 hash = (u128{0x6c62272e07bb0142} << 64) | u128{0x62b821756295c58d};
    for (unsigned char c : bytes) {
        hash ^= c;
        hash *= prime;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    std::string out(32, '0');
    for (int i = 31; i >= 0; --i) {
        out[i] = kHex[static_cast<int>(hash & 0xf)];
        hash >>= 4;
    }
    return out;
}

const v1::TensorDesc* find_input(const v1::GraphDef& graph, absl::string_view name) {
    for (const v1::TensorDesc& input : graph.inputs()) {
        if (input.name() == name) {
            return &input;
        }
    }
    return nullptr;
}

// The signatures of the tensors `ids` of `graph`; a dimension is -1 where `other` (the same graph
// built at other sizes of the symbols) differs, or everywhere when there is no `other`.
std::vector<TensorSignature> signatures(const ir::Graph& graph, const ir::Graph* other,
                                        const std::vector<ir::TensorId>& ids) {
    std::vector<TensorSignature> out;
    for (ir::TensorId id : ids) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        TensorSignature signature{tensor.name, tensor.type.dtype, tensor.type.shape()};
        std::vector<int64_t> other_shape;
        if (other != nullptr) {
            other_shape = other->tensor(*other->find_tensor(tensor.name)).type.shape();
        }
        for (size_t d = 0; d < signature.shape.size(); ++d) {
            if (other == nullptr || other_shape[d] != signature.shape[d]) {
                signature.shape[d] = -1;
            }
        }
        out.push_back(std::move(signature));
    }
    return out;
}

// ResourceExhausted naming the first operator whose `sequence_ends` has more than `limit`
// entries. Checked on the GraphDef, before anything is built from it.
absl::Status check_sequence_ends(const v1::GraphDef& graph, int64_t limit) {
    for (const v1::OperatorDef& op : graph.operators()) {
        auto it = op.attributes().find("sequence_ends");
        if (it == op.attributes().end() || !it->second.has_int_list()) {
            continue;
        }
        const int64_t entries = it->second.int_list().values_size();
        if (entries > limit) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "operator '", op.name(), "': sequence_ends has ", entries,
                " entries; the server accepts at most ", limit, " (--max_sequence_ends)"));
        }
    }
    return absl::OkStatus();
}

// A copy of the model's batching settings, checked: the symbol, the sizes, the delay.
absl::StatusOr<BatchSpec> batch_spec(const v1::Batching& wire,
                                     const std::vector<std::string>& symbols) {
    BatchSpec spec;
    spec.symbol = wire.dimension();
    if (std::find(symbols.begin(), symbols.end(), spec.symbol) == symbols.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("batching.dimension: ", graphdef::quote_name(spec.symbol),
                         " is not a symbol of the graph (symbols: ",
                         symbols.empty() ? "none" : absl::StrJoin(symbols, ", "), ")"));
    }
    for (int32_t size : wire.preferred_batch_size()) {
        if (size < 1 || size > BatchSpec::kMaxSize) {
            return absl::InvalidArgumentError(absl::StrCat("batching.preferred_batch_size: ", size,
                                                           " is not between 1 and ",
                                                           BatchSpec::kMaxSize));
        }
        spec.preferred.push_back(size);
    }
    std::sort(spec.preferred.begin(), spec.preferred.end());
    spec.preferred.erase(std::unique(spec.preferred.begin(), spec.preferred.end()),
                         spec.preferred.end());
    spec.max_size = wire.max_batch_size() != 0 ? wire.max_batch_size()
                    : spec.preferred.empty()   ? BatchSpec::kDefaultMaxSize
                                               : spec.preferred.back();
    if (spec.max_size < 1 || spec.max_size > BatchSpec::kMaxSize) {
        return absl::InvalidArgumentError(
            absl::StrCat("batching.max_batch_size: ", wire.max_batch_size(),
                         " is not between 1 and ", BatchSpec::kMaxSize, " (0 = default)"));
    }
    if (!spec.preferred.empty() && spec.preferred.back() > spec.max_size) {
        return absl::InvalidArgumentError(
            absl::StrCat("batching.preferred_batch_size: ", spec.preferred.back(),
                         " is larger than batching.max_batch_size ", spec.max_size));
    }
    if (wire.has_max_queue_delay_us()) {
        if (wire.max_queue_delay_us() < 0 ||
            wire.max_queue_delay_us() > BatchSpec::kMaxQueueDelayUs) {
            return absl::InvalidArgumentError(
                absl::StrCat("batching.max_queue_delay_us: ", wire.max_queue_delay_us(),
                             " is not between 0 and ", BatchSpec::kMaxQueueDelayUs));
        }
        spec.max_queue_delay_us = wire.max_queue_delay_us();
    }
    return spec;
}

// The inputs Execute takes must hold the requests along their first dimension, and only there;
// an operator may not fix its own sequence ends. Checked on the GraphDef.
absl::Status check_batch_inputs(const v1::GraphDef& graph, const std::set<std::string>& weights,
                                const std::string& symbol) {
    for (const v1::TensorDesc& input : graph.inputs()) {
        if (weights.count(input.name())) {
            continue;
        }
        if (input.dims_size() == 0 || input.dims(0).symbol() != symbol) {
            return absl::InvalidArgumentError(absl::StrCat(
                "batching: input '", input.name(), "' must have the batch dimension '", symbol,
                "' first, to be packed with other requests'; its dimension 0 is ",
                input.dims_size() == 0       ? "missing (a scalar)"
                : input.dims(0).has_symbol() ? absl::StrCat("'", input.dims(0).symbol(), "'")
                                             : absl::StrCat(input.dims(0).fixed())));
        }
        for (int d = 1; d < input.dims_size(); ++d) {
            if (input.dims(d).symbol() == symbol) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "batching: input '", input.name(), "' dimension ", d,
                    " is the batch dimension '", symbol, "' too; only dimension 0 may be"));
            }
        }
    }
    for (const v1::OperatorDef& op : graph.operators()) {
        if (op.attributes().count("sequence_ends")) {
            return absl::InvalidArgumentError(absl::StrCat(
                "batching: operator '", op.name(),
                "' gives sequence_ends of its own; with batching, a request's sequences are given "
                "with it (ExecuteRequest.sequence_ends) and the batcher packs them"));
        }
    }
    return absl::OkStatus();
}

} // namespace

int BatchSpec::slots_for(int requests) const {
    for (int size : preferred) {
        if (size >= requests) {
            return size;
        }
    }
    return requests;
}

v1::Batching BatchSpec::to_wire(int64_t server_delay_us) const {
    v1::Batching wire;
    wire.set_dimension(symbol);
    for (int size : preferred) {
        wire.add_preferred_batch_size(size);
    }
    wire.set_max_batch_size(max_size);
    wire.set_max_queue_delay_us(max_queue_delay_us.value_or(server_delay_us));
    return wire;
}

namespace {

// The graph with the model's weights marked (ir::GraphTensor::weight), which the planner's index
// roles read: the activations' dimensions that no weight has are tokens.
absl::StatusOr<ir::Graph> with_weights(absl::StatusOr<ir::Graph> graph,
                                       const std::vector<std::string>& weights) {
    if (graph.ok()) {
        for (const std::string& weight : weights) {
            if (std::optional<ir::TensorId> id = graph->find_tensor(weight)) {
                EINSUMMABLE_RETURN_IF_ERROR(graph->mark_weight(*id));
            }
        }
    }
    return graph;
}

} // namespace

absl::StatusOr<ir::Graph> Model::build(const graphdef::Bindings& bindings,
                                       absl::Span<const int64_t> sequence_ends) const {
    if (!batching_ || sequence_ends.empty() || packed_operators_.empty()) {
        return with_weights(graphdef::build_graph(graph_def_, bindings), weights_);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(ir::GraphDescription description,
                                 graphdef::to_description(graph_def_, bindings));
    const std::vector<int64_t> ends(sequence_ends.begin(), sequence_ends.end());
    for (ir::NodeDescription& node : description.nodes) {
        if (std::binary_search(packed_operators_.begin(), packed_operators_.end(), node.name)) {
            node.attributes.set("sequence_ends", ends);
        }
    }
    return with_weights(ir::Graph::build(description), weights_);
}

absl::Status ModelStore::check_batching(Model& model, const BatchSpec& spec,
                                        const std::set<std::string>& weights) {
    model.batching_ = spec;
    const BatchSpec* const batch = &*model.batching_;
    // One request of `length` rows, and two packed end to end; the other symbols at the same
    // probe size. The first probe size at which one request builds is used.
    absl::Status first_error;
    for (int64_t length : kProbeSizes) {
        graphdef::Bindings bindings;
        for (const std::string& symbol : model.symbols_) {
            bindings[symbol] = length;
        }
        absl::StatusOr<ir::Graph> single = model.build(bindings);
        if (!single.ok()) {
            if (first_error.ok()) {
                first_error = single.status();
            }
            continue;
        }
        model.packed_operators_.clear();
        for (const ir::GraphNode& node : single->nodes()) {
            if (node.op->attributes().has("sequence_ends")) {
                model.packed_operators_.push_back(node.name);
            }
        }
        std::sort(model.packed_operators_.begin(), model.packed_operators_.end());
        bindings[batch->symbol] = 2 * length;
        const std::vector<int64_t> ends = {length, 2 * length};
        absl::StatusOr<ir::Graph> pair = model.build(bindings, ends);
        if (!pair.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("batching: the graph does not build with two requests of ", length,
                             " packed along '", batch->symbol, "': ", pair.status().message()));
        }
        std::set<ir::TensorId> inputs;
        for (ir::TensorId id : pair->inputs()) {
            if (!weights.count(pair->tensor(id).name)) {
                inputs.insert(id);
            }
        }
        absl::StatusOr<std::set<ir::TensorId>> batched = ir::batched_tensors(*pair, inputs, ends);
        if (!batched.ok()) {
            return absl::Status(batched.status().code(),
                                absl::StrCat("batching: ", batched.status().message()));
        }
        for (ir::TensorId id : pair->saved()) {
            const ir::GraphTensor& tensor = pair->tensor(id);
            if (!batched->count(id)) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "batching: saved tensor '", tensor.name,
                    "' does not depend on the requests (it is computed from weights alone); a "
                    "model with batching returns only tensors with the batch dimension first"));
            }
            const ir::TensorType& one = single->tensor(*single->find_tensor(tensor.name)).type;
            std::vector<int64_t> expected = one.shape();
            const bool first_is_batch = !expected.empty() && expected[0] == length;
            if (first_is_batch) {
                expected[0] = 2 * length;
            }
            if (!first_is_batch || expected != tensor.type.shape()) {
                return absl::InvalidArgumentError(
                    absl::StrCat("batching: saved tensor '", tensor.name, "' is ", one.to_string(),
                                 " for one request of ", length, " and ", tensor.type.to_string(),
                                 " for two; it must have the batch dimension '", batch->symbol,
                                 "' first and nowhere else"));
            }
        }
        return absl::OkStatus();
    }
    return absl::InvalidArgumentError(absl::StrCat("batching: the graph does not build with '",
                                                   batch->symbol, "' bound to ", kProbeSizes[0],
                                                   ": ", first_error.message()));
}

std::string wire_dtype_name(v1::DType dtype) {
    switch (dtype) {
    case v1::F16:
        return "f16";
    case v1::BF16:
        return "bf16";
    case v1::F32:
        return "f32";
    case v1::F64:
        return "f64";
    case v1::DTYPE_UNSPECIFIED:
        return "DTYPE_UNSPECIFIED";
    default:
        break;
    }
    return absl::StrCat("dtype ", static_cast<int>(dtype));
}

std::string shape_string(absl::Span<const int64_t> shape) {
    return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

const ir::TensorType* Model::weight_type(absl::string_view name) const {
    auto it = weight_types_.find(name);
    return it == weight_types_.end() ? nullptr : &it->second;
}

WeightSnapshot Model::weights_snapshot() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return weight_values_;
}

std::vector<std::string> Model::weights_loaded() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const std::string& weight : weights_) {
        if (weight_values_.values.count(weight)) {
            out.push_back(weight);
        }
    }
    return out;
}

std::optional<std::string> Model::missing_weight() const {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const std::string& weight : weights_) {
        if (!weight_values_.values.count(weight)) {
            return weight;
        }
    }
    return std::nullopt;
}

absl::StatusOr<std::shared_ptr<const Model>>
ModelStore::register_model(const std::string& name, const v1::GraphDef& graph,
                           const std::vector<std::string>& weights, const v1::Batching* batching) {
    EINSUMMABLE_RETURN_IF_ERROR(check_model_name(name));
    if (graph.operators_size() > limits_.max_graph_operators) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model '", name, "': the graph has ", graph.operators_size(),
                         " operators; the server accepts at most ", limits_.max_graph_operators,
                         " (--max_graph_operators)"));
    }
    if (absl::Status status = graphdef::check_names(graph); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat("model '", name, "': ", status.message()));
    }
    if (absl::Status status = check_sequence_ends(graph, limits_.max_sequence_ends); !status.ok()) {
        return absl::Status(status.code(), absl::StrCat("model '", name, "': ", status.message()));
    }
    // A full store refuses before the graph is built (a 10,000-operator graph takes a while);
    // the bytes, known once it is, are checked with the count again at the end.
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (models_.count(name) == 0) {
            EINSUMMABLE_RETURN_IF_ERROR(check_room(name, nullptr));
        }
    }

    auto model = std::shared_ptr<Model>(new Model());
    model->name_ = name;
    model->graph_def_ = graph;
    model->graph_bytes_ = static_cast<int64_t>(graph.ByteSizeLong());
    model->fingerprint_ = graph_fingerprint(graph);
    for (const std::string& symbol : graphdef::symbols(graph)) {
        model->symbols_.push_back(symbol);
    }
    model->saved_.assign(graph.saved().begin(), graph.saved().end());

    std::set<std::string> weight_set;
    for (const std::string& weight : weights) {
        EINSUMMABLE_RETURN_IF_ERROR(graphdef::check_name("weights: weight name", weight));
        if (!weight_set.insert(weight).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("weights: '", weight, "' is listed twice"));
        }
        if (find_input(graph, weight) == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat("weights: '", weight, "' is not an input of the graph"));
        }
    }

    // Batching settings and inputs first: a graph giving its own sequence ends may not build.
    std::optional<BatchSpec> batch;
    if (batching != nullptr) {
        absl::StatusOr<BatchSpec> spec = batch_spec(*batching, model->symbols_);
        absl::Status status =
            spec.ok() ? check_batch_inputs(graph, weight_set, spec->symbol) : spec.status();
        if (!status.ok()) {
            return absl::Status(status.code(),
                                absl::StrCat("model '", name, "': ", status.message()));
        }
        batch = *std::move(spec);
    }

    // Every input's size must be representable for every binding the server accepts; weights
    // must be fixed and within the tensor limit.
    graphdef::Bindings probe;
    for (const std::string& symbol : model->symbols_) {
        probe[symbol] = kProbeSizes[0];
    }
    for (const v1::TensorDesc& input : graph.inputs()) {
        const bool is_weight = weight_set.count(input.name()) > 0;
        if (is_weight) {
            for (int dim_idx = 0; dim_idx < input.dims_size(); ++dim_idx) {
                const v1::Dimension& dim = input.dims(dim_idx);
                if (dim.has_symbol()) {
                    return absl::InvalidArgumentError(absl::StrCat(
                        "weight '", input.name(), "' dimension ", dim_idx, " ('",
                        dim.name().empty() ? dim.symbol() : dim.name(), "') is symbolic ('",
                        dim.symbol(), "'); weights need fixed dimensions"));
                }
            }
        }
        // Sizes that overflow int64 are refused before the ir multiplies them.
        absl::StatusOr<int64_t> bytes = input_bytes(input, probe);
        if (!bytes.ok()) {
            return absl::Status(bytes.status().code(),
                                absl::StrCat("model '", name, "': ", bytes.status().message()));
        }
        // An input whose size depends on no symbol is as large at every Execute: refused now,
        // not at the first Compile. (One that does is checked at Compile with its bindings.)
        const bool fixed = std::none_of(input.dims().begin(), input.dims().end(),
                                        [](const v1::Dimension& dim) { return dim.has_symbol(); });
        if ((is_weight || fixed) && *bytes > limits_.max_tensor_bytes) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "model '", name, "': ", is_weight ? "weight '" : "input '", input.name(),
                "' takes ", *bytes, " bytes; the server accepts tensors of at most ",
                limits_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
        }
    }

    // Check the graph with the symbols bound to probe sizes.
    auto build_at = [&](int64_t size) {
        for (auto& [symbol, value] : probe) {
            value = size;
        }
        return graphdef::build_graph(graph, probe);
    };
    absl::Status first_error;
    bool built = false;
    for (int64_t size : kProbeSizes) {
        absl::StatusOr<ir::Graph> graph_ir = build_at(size);
        if (graph_ir.ok()) {
            // Whole-graph checks (something saved) that Plan::compile would make later.
            if (absl::Status status = graph_ir->validate(); !status.ok()) {
                graph_ir = status;
            }
        }
        if (graph_ir.ok()) {
            built = true;
            for (ir::TensorId id : graph_ir->inputs()) {
                const ir::GraphTensor& tensor = graph_ir->tensor(id);
                if (weight_set.count(tensor.name)) {
                    model->weights_.push_back(tensor.name);
                    model->weight_types_[tensor.name] = tensor.type;
                } else {
                    model->inputs_.push_back(tensor.name);
                }
            }
            // The same graph at another size of the symbols shows which dimensions vary.
            // (Without symbols nothing varies: the graph is its own other.)
            std::optional<ir::Graph> other;
            if (!model->symbols_.empty()) {
                absl::StatusOr<ir::Graph> built_other =
                    build_at(size == kProbeSizes[0] ? kProbeSizes[1] : kProbeSizes[0]);
                if (built_other.ok()) {
                    other = *std::move(built_other);
                }
            }
            const ir::Graph* other_ptr = model->symbols_.empty() ? &*graph_ir
                                         : other                 ? &*other
                                                                 : nullptr;
            for (const std::string& input : model->inputs_) {
                const ir::TensorType& type = graph_ir->tensor(*graph_ir->find_tensor(input)).type;
                TensorSignature signature{input, type.dtype, type.shape()};
                const v1::TensorDesc& desc = *find_input(graph, input);
                for (int d = 0; d < desc.dims_size(); ++d) {
                    if (desc.dims(d).has_symbol()) {
                        signature.shape[d] = -1;
                    }
                }
                model->input_signatures_.push_back(std::move(signature));
            }
            model->output_signatures_ = signatures(*graph_ir, other_ptr, graph_ir->saved());
            break;
        }
        if (first_error.ok()) {
            first_error = graph_ir.status();
        }
        if (model->symbols_.empty()) {
            break; // the probe sizes change nothing
        }
    }
    if (!built) {
        std::string where = absl::StrCat("model '", name, "'");
        if (!model->symbols_.empty()) {
            absl::StrAppend(&where, " (symbols bound to ", kProbeSizes[0], " to check the graph)");
        }
        return absl::Status(first_error.code(), absl::StrCat(where, ": ", first_error.message()));
    }

    if (batch.has_value()) {
        if (absl::Status status = check_batching(*model, *batch, weight_set); !status.ok()) {
            return absl::Status(status.code(),
                                absl::StrCat("model '", name, "': ", status.message()));
        }
    }

    // Every weight at its declared size: each is within max_tensor_bytes, so the sum cannot
    // overflow for any graph a message can carry.
    for (const auto& [weight, type] : model->weight_types_) {
        model->weight_bytes_ += type.bytes();
    }

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

bool UploadBudget::try_reserve(int64_t bytes, int64_t* held) {
    int64_t now = held_.load();
    do {
        if (bytes > limit_ - now) {
            *held = now;
            return false;
        }
    } while (!held_.compare_exchange_weak(now, now + bytes));
    if (on_change_ && bytes != 0) {
        on_change_(bytes);
    }
    return true;
}

void UploadBudget::release(int64_t bytes) {
    held_.fetch_sub(bytes);
    if (on_change_ && bytes != 0) {
        on_change_(-bytes);
    }
}

absl::StatusOr<std::unique_ptr<WeightUpload>>
ModelStore::begin_upload(absl::string_view model_name, absl::string_view name, v1::DType dtype,
                         absl::Span<const int64_t> shape, std::optional<uint32_t> crc32) {
    std::shared_ptr<Model> model;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        auto it = models_.find(model_name);
        if (it == models_.end()) {
            return absl::NotFoundError(absl::StrCat("model '", model_name, "' is not registered"));
        }
        model = it->second;
    }
    const ir::TensorType* type = model->weight_type(name);
    if (type == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            graphdef::quote_name(name), " is not a weight of model '", model_name, "' (weights: ",
            model->weights().empty() ? "none" : absl::StrJoin(model->weights(), ", "), ")"));
    }
    if (to_wire_dtype(type->dtype) != dtype) {
        return absl::InvalidArgumentError(absl::StrCat("weight '", name, "' is ",
                                                       ir::dtype_name(type->dtype), "; got ",
                                                       wire_dtype_name(dtype)));
    }
    const std::vector<int64_t> expected_shape = type->shape();
    if (!std::equal(expected_shape.begin(), expected_shape.end(), shape.begin(), shape.end())) {
        return absl::InvalidArgumentError(
            absl::StrCat("weight '", name, "' has shape ", shape_string(expected_shape), " (",
                         type->to_string(), "); got ", shape_string(shape)));
    }
    const int64_t bytes = type->bytes();
    if (bytes > limits_.max_tensor_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "weight '", name, "' takes ", bytes, " bytes; the server accepts tensors of at most ",
            limits_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
    }
    // Refused now rather than after most of it arrived: it could never be held at once.
    if (bytes > upload_budget_.limit()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "weight '", name, "' takes ", bytes, " bytes; uploads in progress may hold at most ",
            upload_budget_.limit(), " bytes together (--max_upload_bytes_in_flight)"));
    }
    return std::unique_ptr<WeightUpload>(
        new WeightUpload(this, std::move(model), std::string(name), bytes, crc32));
}

absl::Status ModelStore::commit(WeightUpload& upload) {
    auto bytes = std::make_shared<const std::vector<std::byte>>(std::move(upload.data_));
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = models_.find(upload.model_->name());
    if (it == models_.end() || it->second != upload.model_) {
        return absl::NotFoundError(absl::StrCat("model '", upload.model_->name(),
                                                "' was unregistered during the upload of '",
                                                upload.name_, "'"));
    }
    // Under the store's lock, so an unregister cannot slip between the check and the publish.
    std::lock_guard<std::mutex> model_lock(upload.model_->mutex_);
    upload.model_->weight_values_.values[upload.name_] = std::move(bytes);
    upload.model_->weight_values_.generation = next_generation_++;
    return absl::OkStatus();
}

WeightUpload::WeightUpload(ModelStore* store, std::shared_ptr<Model> model, std::string name,
                           int64_t expected_bytes, std::optional<uint32_t> expected_crc32)
    : store_(store), model_(std::move(model)), name_(std::move(name)),
      expected_bytes_(expected_bytes), expected_crc32_(expected_crc32),
      crc32_(static_cast<uint32_t>(::crc32_z(0, nullptr, 0))) {}

WeightUpload::~WeightUpload() {
    release();
}

void WeightUpload::release() {
    data_ = std::vector<std::byte>();
    store_->upload_budget_.release(reserved_bytes_);
    reserved_bytes_ = 0;
}

absl::Status WeightUpload::append(absl::Span<const std::byte> data, std::optional<int64_t> offset) {
    if (committed_) {
        return absl::FailedPreconditionError(
            absl::StrCat("the upload of '", name_, "' is over (commit was called)"));
    }
    const int64_t chunk_idx = chunks_;
    if (!with_offsets_.has_value()) {
        with_offsets_ = offset.has_value();
    } else if (*with_offsets_ != offset.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("chunk ", chunk_idx, " of the upload of '", name_, "' ",
                         offset.has_value() ? "carries an offset; the first chunk carried none"
                                            : "carries no offset; the first chunk carried one",
                         " (send an offset on every chunk or on none)"));
    }
    if (offset.has_value() && *offset != received_bytes_) {
        return absl::InvalidArgumentError(absl::StrCat(
            "chunk ", chunk_idx, " of the upload of '", name_, "' starts at byte ", *offset,
            "; expected ", received_bytes_, " (a chunk was lost or repeated)"));
    }
    if (static_cast<int64_t>(data.size()) > expected_bytes_ - received_bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "weight '", name_, "' takes ", expected_bytes_, " bytes; the upload sent at least ",
            received_bytes() + static_cast<int64_t>(data.size())));
    }
    // Grow with the data actually received (a header alone reserves nothing), never past the
    // weight's size, so the resident copy carries no slack. The growth is reserved from the
    // store's budget first: what counts is the memory the buffer really holds. When doubling
    // does not fit, growing by just this chunk may.
    const size_t needed = data_.size() + data.size();
    if (needed > data_.capacity()) {
        size_t capacity =
            std::min(static_cast<size_t>(expected_bytes_), std::max(needed, 2 * data_.capacity()));
        int64_t growth = static_cast<int64_t>(capacity) - reserved_bytes_;
        UploadBudget& budget = store_->upload_budget_;
        int64_t held = 0;
        bool reserved = budget.try_reserve(growth, &held);
        if (!reserved && capacity > needed) {
            capacity = needed;
            growth = static_cast<int64_t>(capacity) - reserved_bytes_;
            reserved = budget.try_reserve(growth, &held);
        }
        if (!reserved) {
            return absl::ResourceExhaustedError(
                absl::StrCat("chunk ", chunk_idx, " of the upload of '", name_, "' needs ", growth,
                             " more bytes, but uploads in progress hold ", held,
                             " bytes; the server holds at most ", budget.limit(),
                             " (--max_upload_bytes_in_flight); retry when they finish"));
        }
        reserved_bytes_ += growth;
        data_.reserve(capacity);
    }
    data_.insert(data_.end(), data.begin(), data.end());
    if (expected_crc32_.has_value()) {
        crc32_ = static_cast<uint32_t>(
            ::crc32_z(crc32_, reinterpret_cast<const Bytef*>(data.data()), data.size()));
    }
    received_bytes_ += static_cast<int64_t>(data.size());
    ++chunks_;
    return absl::OkStatus();
}

absl::Status WeightUpload::commit() {
    if (committed_) {
        return absl::FailedPreconditionError(
            absl::StrCat("the upload of '", name_, "' is over (commit was called)"));
    }
    absl::Status status = [&]() -> absl::Status {
        if (received_bytes() != expected_bytes_) {
            return absl::InvalidArgumentError(
                absl::StrCat("weight '", name_, "' takes ", expected_bytes_,
                             " bytes; the upload sent ", received_bytes()));
        }
        if (expected_crc32_.has_value() && *expected_crc32_ != crc32_) {
            return absl::DataLossError(absl::StrFormat(
                "weight '%s' of model '%s': the bytes received have CRC-32 0x%08x; the upload's "
                "header gave 0x%08x (the data was corrupted on the way; the weight is unchanged)",
                name_, model_->name(), crc32_, *expected_crc32_));
        }
        return store_->commit(*this);
    }();
    // Whatever the outcome the upload is over: its bytes moved into the weight or are dropped,
    // no longer held by an upload in progress, and it cannot be committed again.
    release();
    committed_ = true;
    return status;
}

} // namespace einsummable::server
