#pragma once

#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "einsummable/v1/graph.pb.h"
#include "einsummable/v1/service.pb.h"
#include "server/model.h"
#include "server/model_store.h"

// RegisterModel's checks, and the Model they build, as named steps (ModelStore::register_model
// runs them; the errors are those ModelStore::register_model documents):
//   check_request   the name, the operator count, the graph's names and sequence_ends: what
//                   needs nothing built (before the store checks it has room);
//   then build():   describe the model (fingerprint, symbols, saved tensors), list its weights,
//                   resolve its batching settings, check its inputs' sizes, build the graph at
//                   the probe sizes (its interface and signatures), check that it batches, and
//                   count its bytes.
// What is left, publishing under the store's lock, is ModelStore's.
namespace einsummable::server {

class ModelRegistration {
public:
    // The arguments of ModelStore::register_model; they must outlive this object.
    ModelRegistration(const std::string& name, const v1::GraphDef& graph,
                      const std::vector<std::string>& weights, const v1::Batching* batching,
                      const ModelStoreLimits& limits);

    // The checks that need nothing built.
    absl::Status check_request() const;
    // Every other check; the model, ready to publish (no id yet). Once only.
    absl::StatusOr<std::shared_ptr<Model>> build();

private:
    // The model's name, graph, size, fingerprint, symbols and saved tensors.
    void describe();
    // The request's weights: names valid, listed once, inputs of the graph.
    absl::Status list_weights();
    // The batching settings checked, and the inputs Execute takes batchable (before the graph is
    // built: a graph giving its own sequence ends may not build).
    absl::Status resolve_batching();
    // Every input's size representable at the probe size; weights fixed, and with the inputs
    // whose size depends on no symbol, within max_tensor_bytes.
    absl::Status check_inputs() const;
    // The graph built and validated at the probe sizes (the first that builds wins): the
    // model's inputs, weights and signatures.
    absl::Status probe_graph();
    // The model's inputs, weights and signatures from `graph`, the graph built at `size`.
    void describe_interface(const ir::Graph& graph, int64_t size);
    // The graph with every symbol bound to `size`.
    absl::StatusOr<ir::Graph> build_at(int64_t size) const;
    // Sets the model's batching and packed operators after checking that its graph batches
    // along the dimension of `batch_` (once the graph built).
    absl::Status check_batching();
    // `status` with "model '<name>': " before its message.
    absl::Status in_model(const absl::Status& status) const;

    const std::string& name_;
    const v1::GraphDef& graph_;
    const std::vector<std::string>& weights_;
    const v1::Batching* const batching_;
    const ModelStoreLimits& limits_;

    std::shared_ptr<Model> model_;
    std::set<std::string> weight_set_;
    std::optional<BatchSpec> batch_;
};

} // namespace einsummable::server
