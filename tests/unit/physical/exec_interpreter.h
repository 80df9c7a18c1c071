#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::physical::testing {

// Runs an ExecGraph node by node in its sequential order on double-precision host blocks, with
// the operators' reference implementations: the lowering's meaning, independent of any
// backend and of the memory plan. `inputs` are whole graph inputs by name; returns the saved
// outputs by name.
absl::StatusOr<std::map<std::string, ir::HostTensor>>
interpret(const ExecGraph& graph, const std::map<std::string, ir::HostTensor>& inputs);

} // namespace einsummable::physical::testing
