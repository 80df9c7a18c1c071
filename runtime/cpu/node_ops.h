#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "compiler/physical/exec_graph.h"

namespace einsummable::runtime::cpu {

// Runs one node of a checked graph (check_exec_graph) on arena memory: `arenas[d]` is device
// d's arena and a buffer is the view at arenas[buffer.device] + buffer.offset; a resident
// buffer's is at resident[buffer.device] + buffer.offset.
//   slice     — copy_region of the output's box out of the input;
//   copy      — memcpy of the whole buffer into the destination device's arena;
//   aggregate — aggregate_f32, through f32 scratch for other dtypes;
//   concat    — copy_region of every input's box into the output;
//   kernel    — kernels::cpu::run_f32 on arena pointers where a buffer is f32, through f32
//               scratch (per worker thread, only ever grows) where it is not.
// Only a kernel fails (with run_f32's status).
absl::Status execute_node(const physical::ExecGraph& graph, const physical::ExecNode& node,
                          absl::Span<std::byte* const> arenas,
                          absl::Span<std::byte* const> resident = {});

} // namespace einsummable::runtime::cpu
