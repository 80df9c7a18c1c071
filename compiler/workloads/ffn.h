#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"

namespace einsummable::workloads {

// The paper's feed-forward network:
//   x [tokens, d_model], w1 [d_model, d_ff], w2 [d_ff, d_model]
//   h = x · w1;  a = relu(h);  y = a · w2   (y saved, [tokens, d_model])
// w1 and w2 are marked weights (ir::GraphTensor::weight), x is the activations.
absl::StatusOr<ir::Graph> ffn(int64_t tokens = 4096, int64_t d_model = 1024, int64_t d_ff = 4096,
                              ir::DType dtype = ir::DType::f32);

// One matrix multiply: a [m, k] · b [k, n] = c [m, n] (c saved). Neither input is a weight:
// the product has no token index (ir::IndexRole).
absl::StatusOr<ir::Graph> matmul(int64_t m, int64_t k, int64_t n, ir::DType dtype = ir::DType::f32);

} // namespace einsummable::workloads
