#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/operator.h"
#include "compiler/physical/exec_graph.h"
#include "einsummable/v1/rank.pb.h"

namespace einsummable::runtime::cluster {

// An ExecGraph (a rank's part of a split plan) on the wire between ranks (rank.proto). Kernel
// nodes point at operators the graph does not own; the wire carries each distinct operator once,
// as its kind, attributes and input types, and the receiver makes it again.
v1::ExecGraphDef to_wire(const physical::ExecGraph& graph);

// A graph received: the ExecGraph and the operators its kernel nodes point at.
struct ReceivedGraph {
    std::vector<ir::OperatorPtr> operators;
    physical::ExecGraph graph;
};

// The graph `def` describes, with its operators made again (ir::make_operator) and the whole
// checked (physical::check_exec_graph): InvalidArgument naming the node, buffer or operator
// otherwise. Never crashes on arbitrary messages.
absl::StatusOr<std::unique_ptr<ReceivedGraph>> from_wire(const v1::ExecGraphDef& def);

} // namespace einsummable::runtime::cluster
