#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "compiler/ir/dtype.h"
#include "einsummable/v1/graph.pb.h"
#include "proto/graph_def.h"

// Size arithmetic on untrusted shapes. The compiler's ir multiplies sizes in int64 without
// checks, so the server bounds every size before a graph is built: a request can make the
// daemon refuse, never overflow.
namespace einsummable::server {

// The largest size of one dimension, fixed or bound (2^40).
inline constexpr int64_t kMaxDimensionSize = int64_t{1} << 40;

// Bytes of a tensor of `shape` and `dtype`; ResourceExhausted (naming `what`) when the count does
// not fit in int64, InvalidArgument for a non-positive size.
absl::StatusOr<int64_t> checked_bytes(absl::string_view what, absl::Span<const int64_t> shape,
                                      ir::DType dtype);

// Bytes of a graph input with its symbols bound (a missing binding or size, an unknown dtype:
// InvalidArgument naming the tensor and dimension, as graphdef::build_graph words it).
absl::StatusOr<int64_t> input_bytes(const v1::TensorDesc& input,
                                    const graphdef::Bindings& bindings);

// ResourceExhausted when a compile of `operators` operators for `devices` devices would be over
// `limit` operators × devices (--max_operator_devices), naming the three numbers. The planner's
// and the synthesis's work grow with both, so this bounds what one Compile may cost.
absl::Status check_operator_devices(int64_t operators, int64_t devices, int64_t limit);

} // namespace einsummable::server
