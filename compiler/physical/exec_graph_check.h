#pragma once

#include <string>

#include "absl/status/status.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::physical {

// The well-formedness of an ExecGraph (exec_graph.h) that every backend checks in prepare()
// before it touches memory, and that tests check lower()'s output against.
//
// OK iff a backend can run `graph` on `backend_devices` devices without reading or writing
// outside an arena: the device count fits, every buffer lies inside its device's arena (a
// resident buffer inside its device's resident arena, and no node writes one),
// node inputs, outputs and deps are valid ids (deps earlier than the node), and every node's
// buffers have the shapes, dtypes and devices its kind needs. Errors are InvalidArgument naming
// the buffer or node.
absl::Status check_exec_graph(const ExecGraph& graph, int backend_devices);

// "buffer b5 (x[0,4)x[0,8) f16 on device 1)", for errors.
std::string buffer_label(const ExecGraph& graph, BufferId id);
// "node 12 (kernel einsum#3)", "node 4 (aggregate sum)", for errors.
std::string node_label(const ExecGraph& graph, int node_idx);

} // namespace einsummable::physical
