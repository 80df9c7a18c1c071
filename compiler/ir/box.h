#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"

namespace einsummable::ir {

// A half-open range [lower, upper) of positions along one dimension.
struct Interval {
    int64_t lower = 0;
    int64_t upper = 0;

    int64_t size() const { return upper - lower; }
    bool empty() const { return upper <= lower; }
    bool contains(const Interval& other) const {
        return lower <= other.lower && other.upper <= upper;
    }
    std::string to_string() const;
    friend bool operator==(const Interval&, const Interval&) = default;
    friend auto operator<=>(const Interval&, const Interval&) = default;
};

// A box: one interval per dimension. Tensor types are boxes (user tensors are zero-based),
// and so are the blocks a join-agg spec projects onto (docs/design.md "Join-agg specs").
class Box {
public:
    Box() = default;
    explicit Box(std::vector<Interval> dims) : dims_(std::move(dims)) {}
    // The zero-based box [0, shape[0]) x [0, shape[1]) x ...
    static Box from_shape(absl::Span<const int64_t> shape);

    int rank() const { return static_cast<int>(dims_.size()); }
    const Interval& operator[](int dim) const { return dims_[dim]; }
    const std::vector<Interval>& dims() const { return dims_; }
    std::vector<int64_t> shape() const;
    std::vector<int64_t> lower() const;
    int64_t volume() const;
    bool empty() const { return volume() == 0; }

    bool contains(const Box& other) const;
    // The common part of two boxes of equal rank; nullopt when it is empty.
    std::optional<Box> intersect(const Box& other) const;
    // This box moved so that `origin` becomes zero: positions relative to `origin`.
    Box relative_to(absl::Span<const int64_t> origin) const;

    std::string to_string() const; // "[0,4)x[2,8)"
    friend bool operator==(const Box&, const Box&) = default;
    friend auto operator<=>(const Box&, const Box&) = default;

private:
    std::vector<Interval> dims_;
};

// A set of boxes meant to tile some box.
using Tiling = std::vector<Box>;

// OK iff the boxes are pairwise disjoint and together cover `whole` exactly; otherwise an
// error naming the first box that leaves `whole`, the overlapping pair, or the uncovered volume.
absl::Status check_tiles(absl::Span<const Box> boxes, const Box& whole);
bool tiles(absl::Span<const Box> boxes, const Box& whole);

// The overlay grid of several tilings of `whole`: per dimension the union of all the tilings'
// bounds, and one box per cell of the resulting grid (row-major). Every box of every tiling is
// a union of grid cells. Paper section 5.1: these cells are the atoms of an exchange program.
std::vector<Box> overlay_grid(absl::Span<const Tiling> tilings, const Box& whole);

// The same box list with duplicates removed, in first-appearance order.
std::vector<Box> distinct_boxes(absl::Span<const Box> boxes);

} // namespace einsummable::ir
