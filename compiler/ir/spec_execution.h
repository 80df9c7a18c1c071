#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/graph.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/operator.h"

namespace einsummable::ir {

// Runs an operator on the input blocks of one function spec. The default is
// Operator::reference; kernels/cpu supplies a BLAS-backed one. Operators with an output
// aggregated by log_sum_exp or arg_max always run through Operator::reference_partial, since a
// kernel's complete blocks carry no statistics.
using BlockKernel = std::function<absl::StatusOr<std::vector<HostTensor>>(
    const Operator& op, absl::Span<const HostTensor> inputs, const FunctionSpec& function)>;

// Executes a join-agg spec on whole input tensors (paper section 3): join — project every
// input onto each function spec's boxes and run the kernel; aggregate — ⊕ the copies of each
// output box; recompose — stitch the distinct boxes, which must tile the output, into whole
// tensors. For every operator and spec the result equals the operator on whole tensors
// (tests/unit/ir/spec_property_test.cc).
absl::StatusOr<std::vector<HostTensor>> execute_spec(const Operator& op, const JoinAggSpec& spec,
                                                     absl::Span<const HostTensor> inputs,
                                                     const BlockKernel& kernel = nullptr);

// The operator on whole tensors: its single-function spec.
absl::StatusOr<std::vector<HostTensor>> execute_whole(const Operator& op,
                                                      absl::Span<const HostTensor> inputs,
                                                      const BlockKernel& kernel = nullptr);

// Evaluates a graph on whole tensors, one node at a time in topological order; returns the
// saved tensors by name. Errors name a missing or mis-shaped input.
absl::StatusOr<std::map<std::string, HostTensor>>
evaluate_graph(const Graph& graph, const std::map<std::string, HostTensor>& inputs,
               const BlockKernel& kernel = nullptr);

} // namespace einsummable::ir
