#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"

namespace einsummable::ir {

// One named dimension of a tensor (`tokens`, `d_model`, `heads_kv`, ...).
struct Dim {
    std::string name;
    int64_t size = 0;
    friend bool operator==(const Dim&, const Dim&) = default;
};

// The type of a whole (zero-based) tensor: element type plus named dimensions.
struct TensorType {
    DType dtype = DType::f32;
    std::vector<Dim> dims;

    int rank() const { return static_cast<int>(dims.size()); }
    std::vector<int64_t> shape() const;
    Box box() const { return Box::from_shape(shape()); }
    int64_t elements() const { return box().volume(); }
    int64_t bytes() const { return elements() * dtype_size(dtype); }
    std::string to_string() const; // "f32[tokens=4096, d_model=1024]"
    friend bool operator==(const TensorType&, const TensorType&) = default;
};

} // namespace einsummable::ir
