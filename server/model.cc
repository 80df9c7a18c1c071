#include "server/model.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"

namespace einsummable::server {

int BatchSpec::slots_for(int requests) const {
    for (int size : preferred) {
        if (size >= requests) {
            return size;
        }
    }
    return requests;
}

std::optional<int64_t> BatchSpec::bucket_for(int64_t tokens) const {
    auto it = std::lower_bound(buckets.begin(), buckets.end(), tokens);
    if (it == buckets.end()) {
        return std::nullopt;
    }
    return *it;
}

v1::Batching BatchSpec::to_wire(int64_t server_delay_us) const {
    v1::Batching wire;
    wire.set_dimension(symbol);
    for (int size : preferred) {
        wire.add_preferred_batch_size(size);
    }
    wire.set_max_batch_size(max_size);
    wire.set_max_queue_delay_us(max_queue_delay_us.value_or(server_delay_us));
    if (!buckets.empty()) {
        for (int64_t size : buckets) {
            wire.mutable_buckets()->add_sizes(size);
        }
        wire.mutable_buckets()->set_skip_warm_up(!warm_up);
    }
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
    case v1::I32:
        return "i32";
    case v1::I64:
        return "i64";
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

} // namespace einsummable::server
