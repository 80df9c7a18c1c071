#include "compiler/ir/box.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace einsummable::ir {

std::string Interval::to_string() const {
    return absl::StrCat("[", lower, ",", upper, ")");
}

Box Box::from_shape(absl::Span<const int64_t> shape) {
    std::vector<Interval> dims;
    dims.reserve(shape.size());
    for (int64_t extent : shape) {
        dims.push_back({0, extent});
    }
    return Box(std::move(dims));
}

std::vector<int64_t> Box::shape() const {
    std::vector<int64_t> out;
    out.reserve(dims_.size());
    for (const Interval& interval : dims_) {
        out.push_back(interval.size());
    }
    return out;
}

std::vector<int64_t> Box::lower() const {
    std::vector<int64_t> out;
    out.reserve(dims_.size());
    for (const Interval& interval : dims_) {
        out.push_back(interval.lower);
    }
    return out;
}

int64_t Box::volume() const {
    int64_t volume = 1;
    for (const Interval& interval : dims_) {
        if (interval.empty()) {
            return 0;
        }
        volume *= interval.size();
    }
    return volume;
}

bool Box::contains(const Box& other) const {
    if (other.rank() != rank()) {
        return false;
    }
    for (int dim = 0; dim < rank(); ++dim) {
        if (!dims_[dim].contains(other.dims_[dim])) {
            return false;
        }
    }
    return true;
}

std::optional<Box> Box::intersect(const Box& other) const {
    if (other.rank() != rank()) {
        return std::nullopt;
    }
    std::vector<Interval> dims(dims_.size());
    for (int dim = 0; dim < rank(); ++dim) {
        dims[dim] = {std::max(dims_[dim].lower, other.dims_[dim].lower),
                     std::min(dims_[dim].upper, other.dims_[dim].upper)};
        if (dims[dim].empty()) {
            return std::nullopt;
        }
    }
    return Box(std::move(dims));
}

Box Box::relative_to(absl::Span<const int64_t> origin) const {
    std::vector<Interval> dims = dims_;
    for (int dim = 0; dim < rank(); ++dim) {
        dims[dim].lower -= origin[dim];
        dims[dim].upper -= origin[dim];
    }
    return Box(std::move(dims));
}

std::string Box::to_string() const {
    if (dims_.empty()) {
        return "[]";
    }
    return absl::StrJoin(dims_, "x", [](std::string* out, const Interval& interval) {
        absl::StrAppend(out, interval.to_string());
    });
}

absl::Status check_tiles(absl::Span<const Box> boxes, const Box& whole) {
    int64_t covered = 0;
    for (size_t idx = 0; idx < boxes.size(); ++idx) {
        const Box& box = boxes[idx];
        if (box.rank() != whole.rank()) {
            return absl::InvalidArgumentError(absl::StrCat("box ", idx, " ", box.to_string(),
                                                           " has rank ", box.rank(), ", expected ",
                                                           whole.rank()));
        }
        if (box.empty()) {
            return absl::InvalidArgumentError(
                absl::StrCat("box ", idx, " ", box.to_string(), " is empty"));
        }
        if (!whole.contains(box)) {
            return absl::InvalidArgumentError(
                absl::StrCat("box ", idx, " ", box.to_string(), " leaves ", whole.to_string()));
        }
        covered += box.volume();
    }
    // Sweep along dimension 0 so only boxes whose first intervals overlap are compared.
    std::vector<size_t> order(boxes.size());
    for (size_t idx = 0; idx < order.size(); ++idx) {
        order[idx] = idx;
    }
    if (whole.rank() > 0) {
        std::sort(order.begin(), order.end(),
                  [&](size_t a, size_t b) { return boxes[a][0].lower < boxes[b][0].lower; });
    }
    for (size_t i = 0; i < order.size(); ++i) {
        for (size_t j = i + 1; j < order.size(); ++j) {
            const Box& a = boxes[order[i]];
            const Box& b = boxes[order[j]];
            if (whole.rank() > 0 && b[0].lower >= a[0].upper) {
                break;
            }
            if (a.intersect(b).has_value()) {
                return absl::InvalidArgumentError(absl::StrCat(
                    "boxes ", std::min(order[i], order[j]), " and ", std::max(order[i], order[j]),
                    " overlap: ", a.to_string(), " and ", b.to_string()));
            }
        }
    }
    if (covered != whole.volume()) {
        return absl::InvalidArgumentError(absl::StrCat("boxes cover ", covered, " of the ",
                                                       whole.volume(), " elements of ",
                                                       whole.to_string()));
    }
    return absl::OkStatus();
}

bool tiles(absl::Span<const Box> boxes, const Box& whole) {
    return check_tiles(boxes, whole).ok();
}

std::vector<Box> overlay_grid(absl::Span<const Tiling> tilings, const Box& whole) {
    const int rank = whole.rank();
    std::vector<std::vector<int64_t>> bounds(rank);
    for (int dim = 0; dim < rank; ++dim) {
        std::set<int64_t> cuts = {whole[dim].lower, whole[dim].upper};
        for (const Tiling& tiling : tilings) {
            for (const Box& box : tiling) {
                cuts.insert(box[dim].lower);
                cuts.insert(box[dim].upper);
            }
        }
        bounds[dim].assign(cuts.begin(), cuts.end());
    }
    std::vector<Box> cells;
    std::vector<size_t> cell_idx(rank, 0);
    while (true) {
        std::vector<Interval> dims(rank);
        for (int dim = 0; dim < rank; ++dim) {
            dims[dim] = {bounds[dim][cell_idx[dim]], bounds[dim][cell_idx[dim] + 1]};
        }
        cells.emplace_back(std::move(dims));
        int dim = rank - 1;
        while (dim >= 0 && ++cell_idx[dim] + 1 == bounds[dim].size()) {
            cell_idx[dim] = 0;
            --dim;
        }
        if (dim < 0) {
            break;
        }
    }
    return cells;
}

std::vector<Box> distinct_boxes(absl::Span<const Box> boxes) {
    std::vector<Box> out;
    std::set<Box> seen;
    for (const Box& box : boxes) {
        if (seen.insert(box).second) {
            out.push_back(box);
        }
    }
    return out;
}

} // namespace einsummable::ir
