#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "absl/types/span.h"
#include "compiler/ir/box.h"

namespace einsummable::ir {

// A dense block of a tensor held in host memory for reference computations: the box it covers
// (absolute positions inside the whole tensor) and its values, row-major, in double precision.
// Kernels that know positions (RoPE, causal masks) read them from box().
class HostTensor {
public:
    HostTensor() = default;
    explicit HostTensor(Box box);
    HostTensor(Box box, std::vector<double> values);

    const Box& box() const { return box_; }
    std::vector<int64_t> shape() const { return box_.shape(); }
    int rank() const { return box_.rank(); }
    int64_t size() const { return static_cast<int64_t>(values_.size()); }
    double* data() { return values_.data(); }
    const double* data() const { return values_.data(); }
    const std::vector<double>& values() const { return values_; }

    // Element at an absolute position (inside box()).
    double& at(absl::Span<const int64_t> position);
    double at(absl::Span<const int64_t> position) const;

    // The part of this block covered by `sub`, which must lie inside box().
    HostTensor slice(const Box& sub) const;
    // Copies `block` into the part of this tensor it covers; block.box() must lie inside box().
    void write(const HostTensor& block);

    // Uniform values in [low, high) from `rng`.
    static HostTensor random(Box box, std::mt19937_64& rng, double low = -1.0, double high = 1.0);

private:
    int64_t offset(absl::Span<const int64_t> position) const;

    Box box_;
    std::vector<double> values_;
};

// max |a - b| / max(1, max |b|) over all elements; the boxes must be equal.
double max_relative_error(const HostTensor& a, const HostTensor& b);

} // namespace einsummable::ir
