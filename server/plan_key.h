#pragma once

#include <cstdint>
#include <string>

#include "server/plan_store.h"
#include "server/request_shapes.h"

// Plan keys: what makes two requests' plans one. PlanKey (server/plan_store.h) names a plan in
// the plan cache and the plan store; the batcher's key groups requests that may run as one
// batch; a layout identity names a model's resident weights layout in the plan store.
namespace einsummable::server {

// The key of the plan `shape` runs, on a server with the topology named `topology`, device
// memory `device_memory` per device (0: unknown) and version `version`. `weights` is left
// empty: where the plan reads the model's weights is WeightResidency's to say.
PlanKey plan_key(const RequestShape& shape, const std::string& topology, int64_t device_memory,
                 const std::string& version);

// The batcher's key (server/batcher.h) of a request of `shape` to a model with batching:
// requests batch when their plans would be one — same registration of the model, dims, options
// and sequence ends.
std::string batch_key(const RequestShape& shape);

// The plan store's name for the weights layout of a model registered as `model` with graph
// `graph_fingerprint`, on a server of version `version` (PlanPersistence::load_layout).
std::string layout_identity(const std::string& model, const std::string& graph_fingerprint,
                            const std::string& version);

} // namespace einsummable::server
