#include "compiler/ir/host_tensor.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/ir/internal_error.h"

namespace einsummable::ir {

HostTensor::HostTensor(Box box) : box_(std::move(box)), values_(box_.volume(), 0.0) {}

HostTensor::HostTensor(Box box, std::vector<double> values)
    : box_(std::move(box)), values_(std::move(values)) {
    EINSUMMABLE_CHECK(static_cast<int64_t>(values_.size()) == box_.volume(),
                      absl::StrCat(values_.size(), " values for box ", box_.to_string()));
}

int64_t HostTensor::offset(absl::Span<const int64_t> position) const {
    int64_t flat = 0;
    for (int dim = 0; dim < box_.rank(); ++dim) {
        flat = flat * box_[dim].size() + (position[dim] - box_[dim].lower);
    }
    return flat;
}

double& HostTensor::at(absl::Span<const int64_t> position) {
    return values_[offset(position)];
}
double HostTensor::at(absl::Span<const int64_t> position) const {
    return values_[offset(position)];
}

namespace {

// Calls fn(src_offset, dst_offset, run_length) for every contiguous run of `region` inside
// row-major blocks `src` and `dst` (both contain region).
template <typename Fn>
void for_each_run(const Box& src, const Box& dst, const Box& region, Fn fn) {
    const int rank = region.rank();
    if (region.empty()) {
        return;
    }
    if (rank == 0) {
        fn(0, 0, 1);
        return;
    }
    const int64_t run = region[rank - 1].size();
    std::vector<int64_t> position = region.lower();
    while (true) {
        int64_t src_offset = 0;
        int64_t dst_offset = 0;
        for (int dim = 0; dim < rank; ++dim) {
            src_offset = src_offset * src[dim].size() + (position[dim] - src[dim].lower);
            dst_offset = dst_offset * dst[dim].size() + (position[dim] - dst[dim].lower);
        }
        fn(src_offset, dst_offset, run);
        int dim = rank - 2;
        while (dim >= 0 && ++position[dim] == region[dim].upper) {
            position[dim] = region[dim].lower;
            --dim;
        }
        if (dim < 0) {
            return;
        }
    }
}

} // namespace

HostTensor HostTensor::slice(const Box& sub) const {
    EINSUMMABLE_CHECK(box_.contains(sub),
                      absl::StrCat(sub.to_string(), " not inside ", box_.to_string()));
    HostTensor out(sub);
    for_each_run(box_, sub, sub, [&](int64_t src, int64_t dst, int64_t run) {
        std::memcpy(out.values_.data() + dst, values_.data() + src, run * sizeof(double));
    });
    return out;
}

void HostTensor::write(const HostTensor& block) {
    EINSUMMABLE_CHECK(box_.contains(block.box()),
                      absl::StrCat(block.box().to_string(), " not inside ", box_.to_string()));
    for_each_run(block.box(), box_, block.box(), [&](int64_t src, int64_t dst, int64_t run) {
        std::memcpy(values_.data() + dst, block.values_.data() + src, run * sizeof(double));
    });
}

HostTensor HostTensor::random(Box box, std::mt19937_64& rng, double low, double high) {
    std::uniform_real_distribution<double> dist(low, high);
    HostTensor out(std::move(box));
    for (double& value : out.values_) {
        value = dist(rng);
    }
    return out;
}

double max_relative_error(const HostTensor& a, const HostTensor& b) {
    EINSUMMABLE_CHECK(a.box() == b.box(),
                      absl::StrCat(a.box().to_string(), " vs ", b.box().to_string()));
    double scale = 1.0;
    for (double value : b.values()) {
        scale = std::max(scale, std::abs(value));
    }
    double error = 0.0;
    for (int64_t idx = 0; idx < a.size(); ++idx) {
        const double diff = std::abs(a.data()[idx] - b.data()[idx]);
        error = std::max(error, std::isnan(diff) ? INFINITY : diff);
    }
    return error / scale;
}

} // namespace einsummable::ir
