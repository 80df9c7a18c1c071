#pragma once

#include <cstdint>
#include <vector>

#include "compiler/ir/box.h"

namespace einsummable::ir {

// Calls fn(offset, stride, length) once per line of a row-major block along `axis`: the line's
// first element offset, the distance between its elements and its length. Shared by the
// operators that normalise along an axis (softmax, rmsnorm, layernorm) and rotate along one
// (rope).
template <typename Fn>
void for_each_row(const Box& block, int axis, Fn fn) {
    const std::vector<int64_t> shape = block.shape();
    const int rank = static_cast<int>(shape.size());
    int64_t inner = 1; // elements after `axis`
    for (int dim = axis + 1; dim < rank; ++dim) {
        inner *= shape[dim];
    }
    int64_t outer = 1; // elements before `axis`
    for (int dim = 0; dim < axis; ++dim) {
        outer *= shape[dim];
    }
    const int64_t length = shape[axis];
    for (int64_t o = 0; o < outer; ++o) {
        for (int64_t i = 0; i < inner; ++i) {
            fn(o * length * inner + i, inner, length);
        }
    }
}

} // namespace einsummable::ir
