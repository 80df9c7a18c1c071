#include "compiler/ir/partial_block.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "compiler/ir/scalar_op.h"

namespace einsummable::ir {

Box stats_box(const Box& box) {
    if (box.rank() == 0) {
        return box;
    }
    std::vector<Interval> dims = box.dims();
    dims.pop_back();
    return Box(std::move(dims));
}

int64_t stats_count(const Box& box) {
    return stats_box(box).volume();
}

int64_t stats_offset(const Box& box, DType dtype) {
    const int64_t elements = box.volume() * dtype_size(dtype);
    return (elements + 3) / 4 * 4;
}

int64_t block_bytes(const Box& box, DType dtype, bool stats) {
    if (box.volume() == 0) {
        return 0; // an empty chunk moves nothing, statistics neither
    }
    return stats ? stats_offset(box, dtype) + stats_count(box) * 4
                 : box.volume() * dtype_size(dtype);
}

namespace {

// The boxes of a and b agree and each side has one statistic per vector.
absl::Status check_sides(absl::string_view what, const PartialBlock& a, const PartialBlock& b) {
    const Box& box = a.values.box();
    if (box != b.values.box()) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " partials of different blocks: ", box.to_string(), " and ",
                         b.values.box().to_string()));
    }
    const int64_t slots = stats_count(box);
    for (const PartialBlock* side : {&a, &b}) {
        if (static_cast<int64_t>(side->stats.size()) != slots) {
            return absl::InvalidArgumentError(absl::StrCat(
                what, " partial of ", box.to_string(), " has ", side->stats.size(),
                " statistics; want one per vector along its last dimension (", slots, ")"));
        }
    }
    return absl::OkStatus();
}

} // namespace

absl::StatusOr<PartialBlock> combine_log_sum_exp(const PartialBlock& a, const PartialBlock& b) {
    if (absl::Status status = check_sides("log-sum-exp", a, b); !status.ok()) {
        return status;
    }
    const Box& box = a.values.box();
    const int64_t slots = stats_count(box);
    const int64_t width = slots > 0 ? a.values.size() / slots : 0;
    PartialBlock combined{HostTensor(box), std::vector<double>(static_cast<size_t>(slots))};
    for (int64_t slot = 0; slot < slots; ++slot) {
        const double la = a.stats[slot];
        const double lb = b.stats[slot];
        const double* oa = a.values.data() + slot * width;
        const double* ob = b.values.data() + slot * width;
        double* out = combined.values.data() + slot * width;
        // NaN statistics (a NaN or +inf score) win whatever the order of the parts.
        const double high = propagating_max(la, lb);
        if (high == -std::numeric_limits<double>::infinity()) {
            // No key of weight on either side: values 0 (no key) or NaN (only -inf scores,
            // which stay NaN unless another part's keys outweigh them), kept by adding.
            combined.stats[slot] = high;
            for (int64_t d = 0; d < width; ++d) {
                out[d] = oa[d] + ob[d];
            }
            continue;
        }
        const double lse = high + std::log(std::exp(la - high) + std::exp(lb - high));
        const double wa = std::exp(la - lse);
        const double wb = std::exp(lb - lse);
        // A side of weight 0 is left out rather than multiplied: its values may be NaN from
        // keys that had no weight themselves (0·NaN would be NaN).
        for (int64_t d = 0; d < width; ++d) {
            out[d] = (wa != 0.0 ? wa * oa[d] : 0.0) + (wb != 0.0 ? wb * ob[d] : 0.0);
        }
        combined.stats[slot] = lse;
    }
    return combined;
}

absl::StatusOr<PartialBlock> combine_arg_max(const PartialBlock& a, const PartialBlock& b) {
    if (absl::Status status = check_sides("arg-max", a, b); !status.ok()) {
        return status;
    }
    const Box& box = a.values.box();
    const int64_t slots = stats_count(box);
    if (slots != a.values.size()) {
        return absl::InvalidArgumentError(absl::StrCat("arg-max partial of ", box.to_string(),
                                                       " holds more than one index per vector"));
    }
    PartialBlock combined = a;
    for (int64_t slot = 0; slot < slots; ++slot) {
        if (arg_max_wins(b.stats[slot], b.values.data()[slot], a.stats[slot],
                         a.values.data()[slot])) {
            combined.stats[slot] = b.stats[slot];
            combined.values.data()[slot] = b.values.data()[slot];
        }
    }
    return combined;
}

absl::StatusOr<HostTensor> merge_top_k(const HostTensor& a, const HostTensor& b) {
    const Box& box = a.box();
    if (b.box() != box) {
        return absl::InvalidArgumentError(absl::StrCat(
            "top-k partials of different boxes: ", box.to_string(), " and ", b.box().to_string()));
    }
    const int rank = box.rank();
    if (rank < 2 || box[rank - 1].size() != 2) {
        return absl::InvalidArgumentError(
            absl::StrCat("a top-k partial of ", box.to_string(),
                         " is no block of [..., k, 2] (value, index) pairs"));
    }
    const int64_t k = box[rank - 2].size();
    const int64_t rows = k > 0 ? box.volume() / (2 * k) : 0;
    HostTensor merged(box);
    for (int64_t row = 0; row < rows; ++row) {
        const double* pa = a.data() + row * 2 * k;
        const double* pb = b.data() + row * 2 * k;
        double* out = merged.data() + row * 2 * k;
        int64_t ia = 0;
        int64_t ib = 0;
        for (int64_t slot = 0; slot < k; ++slot) {
            const bool take_b =
                arg_max_wins(pb[2 * ib], pb[2 * ib + 1], pa[2 * ia], pa[2 * ia + 1]);
            const double* pick = take_b ? pb + 2 * ib++ : pa + 2 * ia++;
            out[2 * slot] = pick[0];
            out[2 * slot + 1] = pick[1];
        }
    }
    return merged;
}

absl::StatusOr<PartialBlock> combine_partials(AggOp op, const PartialBlock& a,
                                              const PartialBlock& b) {
    switch (op) {
    case AggOp::log_sum_exp:
        return combine_log_sum_exp(a, b);
    case AggOp::arg_max:
        return combine_arg_max(a, b);
    default:
        return absl::InvalidArgumentError(
            absl::StrCat(agg_op_name(op), " is not a block aggregation with statistics"));
    }
}

} // namespace einsummable::ir
