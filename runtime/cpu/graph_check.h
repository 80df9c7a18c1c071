#pragma once

#include <string>

#include "absl/status/status.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::runtime::cpu {

// OK iff the CPU backend can run `graph` on `backend_devices` devices without reading or
// writing outside an arena: the device count fits, every buffer lies inside its device's arena,
// node inputs, outputs and deps are valid ids (deps earlier than the node), and every node's
// buffers have the shapes, dtypes and devices its kind needs. Errors are InvalidArgument naming
// the buffer or node.
absl::Status check_exec_graph(const physical::ExecGraph& graph, int backend_devices);

// "buffer b5 (x[0,4)x[0,8) f16 on device 1)", for errors.
std::string buffer_label(const physical::ExecGraph& graph, physical::BufferId id);
// "node 12 (kernel einsum#3)", "node 4 (aggregate sum)", for errors.
std::string node_label(const physical::ExecGraph& graph, int node_idx);

} // namespace einsummable::runtime::cpu
