#pragma once

#include <optional>
#include <string>

#include "compiler/ir/graph.h"

namespace einsummable::workloads::testing {

// The printed type of a tensor, or a marker naming it when the graph has no such tensor, so a
// mismatch reads well in a failure message.
inline std::string type_of(const ir::Graph& graph, const std::string& tensor) {
    const std::optional<ir::TensorId> id = graph.find_tensor(tensor);
    return id ? graph.tensor(*id).type.to_string() : "<no tensor " + tensor + ">";
}

} // namespace einsummable::workloads::testing
