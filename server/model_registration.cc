#include "server/model_registration.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
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

// The token buckets `wire` declares, checked: its explicit sizes, or min_tokens × growth^k up to
// max_tokens, with the defaults for what it leaves 0.
absl::StatusOr<std::vector<int64_t>> token_buckets(const v1::TokenBuckets& wire) {
    constexpr int64_t kMaxBuckets = 64;
    // A request is padded by less than a fifth of its bucket: 11 % of the tokens run are padding
    // for lengths drawn evenly from 1 to 2048 (doubling: 25 %), for 26 plans from 16 to 4096.
    constexpr double kDefaultGrowth = 1.25;
    std::vector<int64_t> sizes;
    if (!wire.sizes().empty()) {
        if (wire.min_tokens() != 0 || wire.max_tokens() != 0 || wire.growth() != 0) {
            return absl::InvalidArgumentError(
                "batching.buckets: give sizes, or min_tokens, max_tokens and growth, not both");
        }
        for (int64_t size : wire.sizes()) {
            if (size < 1 || size > kMaxDimensionSize || (!sizes.empty() && size <= sizes.back())) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "batching.buckets.sizes: ", size, " must be greater than ",
                    sizes.empty() ? int64_t{0} : sizes.back(), " and at most ", kMaxDimensionSize));
            }
            sizes.push_back(size);
        }
    } else {
        const int64_t min = wire.min_tokens() == 0 ? 16 : wire.min_tokens();
        const int64_t max = wire.max_tokens() == 0 ? 4096 : wire.max_tokens();
        const double growth = wire.growth() == 0 ? kDefaultGrowth : wire.growth();
        if (min < 1 || max < min || max > kMaxDimensionSize) {
            return absl::InvalidArgumentError(
                absl::StrCat("batching.buckets: min_tokens ", min, " and max_tokens ", max,
                             " must satisfy 1 <= min_tokens <= max_tokens <= ", kMaxDimensionSize));
        }
        if (!(growth > 1.0 && growth <= 16.0)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "batching.buckets.growth: ", growth, " must be above 1 and at most 16 (0 = 1.25)"));
        }
        for (int64_t size = min; size < max;) {
            sizes.push_back(size);
            size = std::max(size + 1, static_cast<int64_t>(std::ceil(size * growth)));
        }
        sizes.push_back(max);
    }
    if (static_cast<int64_t>(sizes.size()) > kMaxBuckets) {
        return absl::InvalidArgumentError(
            absl::StrCat("batching.buckets: ", sizes.size(), " buckets; at most ", kMaxBuckets));
    }
    return sizes;
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
    if (wire.has_buckets()) {
        EINSUMMABLE_ASSIGN_OR_RETURN(spec.buckets, token_buckets(wire.buckets()));
        spec.warm_up = !wire.buckets().skip_warm_up();
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

ModelRegistration::ModelRegistration(const std::string& name, const v1::GraphDef& graph,
                                     const std::vector<std::string>& weights,
                                     const v1::Batching* batching, const ModelStoreLimits& limits)
    : name_(name), graph_(graph), weights_(weights), batching_(batching), limits_(limits) {}

absl::Status ModelRegistration::in_model(const absl::Status& status) const {
    return absl::Status(status.code(), absl::StrCat("model '", name_, "': ", status.message()));
}

absl::Status ModelRegistration::check_request() const {
    EINSUMMABLE_RETURN_IF_ERROR(check_model_name(name_));
    if (graph_.operators_size() > limits_.max_graph_operators) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model '", name_, "': the graph has ", graph_.operators_size(),
                         " operators; the server accepts at most ", limits_.max_graph_operators,
                         " (--max_graph_operators)"));
    }
    if (absl::Status status = graphdef::check_names(graph_); !status.ok()) {
        return in_model(status);
    }
    if (absl::Status status = check_sequence_ends(graph_, limits_.max_sequence_ends);
        !status.ok()) {
        return in_model(status);
    }
    return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Model>> ModelRegistration::build() {
    describe();
    EINSUMMABLE_RETURN_IF_ERROR(list_weights());
    EINSUMMABLE_RETURN_IF_ERROR(resolve_batching());
    EINSUMMABLE_RETURN_IF_ERROR(check_inputs());
    EINSUMMABLE_RETURN_IF_ERROR(probe_graph());
    if (batch_.has_value()) {
        if (absl::Status status = check_batching(); !status.ok()) {
            return in_model(status);
        }
    }
    // Every weight at its declared size: each is within max_tensor_bytes, so the sum cannot
    // overflow for any graph a message can carry.
    for (const auto& [weight, type] : model_->weight_types_) {
        model_->weight_bytes_ += type.bytes();
    }
    return std::move(model_);
}

void ModelRegistration::describe() {
    model_ = std::shared_ptr<Model>(new Model());
    model_->name_ = name_;
    model_->graph_def_ = graph_;
    model_->graph_bytes_ = static_cast<int64_t>(graph_.ByteSizeLong());
    model_->fingerprint_ = graph_fingerprint(graph_);
    for (const std::string& symbol : graphdef::symbols(graph_)) {
        model_->symbols_.push_back(symbol);
    }
    model_->saved_.assign(graph_.saved().begin(), graph_.saved().end());
}

absl::Status ModelRegistration::list_weights() {
    for (const std::string& weight : weights_) {
        EINSUMMABLE_RETURN_IF_ERROR(graphdef::check_name("weights: weight name", weight));
        if (!weight_set_.insert(weight).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("weights: '", weight, "' is listed twice"));
        }
        if (find_input(graph_, weight) == nullptr) {
            return absl::InvalidArgumentError(
                absl::StrCat("weights: '", weight, "' is not an input of the graph"));
        }
    }
    return absl::OkStatus();
}

absl::Status ModelRegistration::resolve_batching() {
    if (batching_ == nullptr) {
        return absl::OkStatus();
    }
    absl::StatusOr<BatchSpec> spec = batch_spec(*batching_, model_->symbols_);
    absl::Status status =
        spec.ok() ? check_batch_inputs(graph_, weight_set_, spec->symbol) : spec.status();
    if (!status.ok()) {
        return in_model(status);
    }
    batch_ = *std::move(spec);
    return absl::OkStatus();
}

absl::Status ModelRegistration::check_inputs() const {
    graphdef::Bindings probe;
    for (const std::string& symbol : model_->symbols_) {
        probe[symbol] = ModelStore::kProbeSizes[0];
    }
    for (const v1::TensorDesc& input : graph_.inputs()) {
        const bool is_weight = weight_set_.count(input.name()) > 0;
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
            return in_model(bytes.status());
        }
        // An input whose size depends on no symbol is as large at every Execute: refused now,
        // not at the first Compile. (One that does is checked at Compile with its bindings.)
        const bool fixed = std::none_of(input.dims().begin(), input.dims().end(),
                                        [](const v1::Dimension& dim) { return dim.has_symbol(); });
        if ((is_weight || fixed) && *bytes > limits_.max_tensor_bytes) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "model '", name_, "': ", is_weight ? "weight '" : "input '", input.name(),
                "' takes ", *bytes, " bytes; the server accepts tensors of at most ",
                limits_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
        }
    }
    return absl::OkStatus();
}

absl::StatusOr<ir::Graph> ModelRegistration::build_at(int64_t size) const {
    graphdef::Bindings probe;
    for (const std::string& symbol : model_->symbols_) {
        probe[symbol] = size;
    }
    return graphdef::build_graph(graph_, probe);
}

absl::Status ModelRegistration::probe_graph() {
    absl::Status first_error;
    for (int64_t size : ModelStore::kProbeSizes) {
        absl::StatusOr<ir::Graph> graph_ir = build_at(size);
        if (graph_ir.ok()) {
            // Whole-graph checks (something saved) that Plan::compile would make later.
            if (absl::Status status = graph_ir->validate(); !status.ok()) {
                graph_ir = status;
            }
        }
        if (graph_ir.ok()) {
            describe_interface(*graph_ir, size);
            return absl::OkStatus();
        }
        if (first_error.ok()) {
            first_error = graph_ir.status();
        }
        if (model_->symbols_.empty()) {
            break; // the probe sizes change nothing
        }
    }
    std::string where = absl::StrCat("model '", name_, "'");
    if (!model_->symbols_.empty()) {
        absl::StrAppend(&where, " (symbols bound to ", ModelStore::kProbeSizes[0],
                        " to check the graph)");
    }
    return absl::Status(first_error.code(), absl::StrCat(where, ": ", first_error.message()));
}

void ModelRegistration::describe_interface(const ir::Graph& graph, int64_t size) {
    for (ir::TensorId id : graph.inputs()) {
        const ir::GraphTensor& tensor = graph.tensor(id);
        if (weight_set_.count(tensor.name)) {
            model_->weights_.push_back(tensor.name);
            model_->weight_types_[tensor.name] = tensor.type;
        } else {
            model_->inputs_.push_back(tensor.name);
        }
    }
    // The same graph at another size of the symbols shows which dimensions vary.
    // (Without symbols nothing varies: the graph is its own other.)
    std::optional<ir::Graph> other;
    if (!model_->symbols_.empty()) {
        absl::StatusOr<ir::Graph> built_other =
            build_at(size == ModelStore::kProbeSizes[0] ? ModelStore::kProbeSizes[1]
                                                        : ModelStore::kProbeSizes[0]);
        if (built_other.ok()) {
            other = *std::move(built_other);
        }
    }
    const ir::Graph* other_ptr = model_->symbols_.empty() ? &graph : other ? &*other : nullptr;
    for (const std::string& input : model_->inputs_) {
        const ir::TensorType& type = graph.tensor(*graph.find_tensor(input)).type;
        TensorSignature signature{input, type.dtype, type.shape()};
        const v1::TensorDesc& desc = *find_input(graph_, input);
        for (int d = 0; d < desc.dims_size(); ++d) {
            if (desc.dims(d).has_symbol()) {
                signature.shape[d] = -1;
            }
        }
        model_->input_signatures_.push_back(std::move(signature));
    }
    model_->output_signatures_ = signatures(graph, other_ptr, graph.saved());
}

absl::Status ModelRegistration::check_batching() {
    Model& model = *model_;
    const std::set<std::string>& weights = weight_set_;
    model.batching_ = *batch_;
    const BatchSpec* const batch = &*model.batching_;
    // One request of `length` rows, and two packed end to end; the other symbols at the same
    // probe size. The first probe size at which one request builds is used.
    absl::Status first_error;
    for (int64_t length : ModelStore::kProbeSizes) {
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
    return absl::InvalidArgumentError(
        absl::StrCat("batching: the graph does not build with '", batch->symbol, "' bound to ",
                     ModelStore::kProbeSizes[0], ": ", first_error.message()));
}

} // namespace einsummable::server
