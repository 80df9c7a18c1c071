#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/host_tensor.h"
#include "compiler/ir/join_agg_spec.h"

namespace einsummable::ir {

// A partial result of an output aggregated by a block ⊕ (ir::carries_stats): the block's values
// over the part of the aggregation one function covers, and one statistic per vector along the
// block's last dimension, row-major over stats_box(values.box()).
// - AggOp::log_sum_exp (attention split along its keys): the values normalised over the part's
//   keys, the statistic the log of the sum of the weights they were normalised by. -inf where
//   no key of the part has weight: with values 0 where the part holds no key, NaN where every
//   score is -inf. NaN where a score is NaN or +inf (docs/operators.md "Non-finite inputs").
// - AggOp::arg_max (argmax split along its vocabulary; the last dimension is 1): the value the
//   index of the largest element of the part, the statistic that element (NaN when one is NaN).
struct PartialBlock {
    HostTensor values;
    std::vector<double> stats;
};

// The box of a partial block's statistics: `box` without its last dimension (rank 0 stays).
Box stats_box(const Box& box);
// Statistics of a partial block of `box`: one per vector along its last dimension.
int64_t stats_count(const Box& box);

// Stored partial results (the physical plan's buffers, the bytes an exchange moves): the block's
// elements in `dtype`, padded to 4 bytes, then its statistics as f32. stats_offset is where they
// start; block_bytes the whole (the elements alone without `stats`; 0 for an empty box, such as
// an exchange's empty chunk).
int64_t stats_offset(const Box& box, DType dtype);
int64_t block_bytes(const Box& box, DType dtype, bool stats);

// a ⊕ b: each side's values rescaled by exp(its log-sum-exp − the combined one), then added,
// a side whose weight is 0 left out (its NaN values too); the combined log-sum-exp is
// log(exp(a) + exp(b)), NaN when either is NaN. Where both are -inf the values add (0 stays 0,
// NaN stays NaN) and the statistics stay -inf. Commutative and associative (up to rounding),
// with the partial of nothing (-inf, values 0) as identity. InvalidArgument when the boxes
// differ or a side's statistics do not match its box.
absl::StatusOr<PartialBlock> combine_log_sum_exp(const PartialBlock& a, const PartialBlock& b);

// a ⊕ b for arg_max, per vector: the side whose statistic is larger — NaN larger than any
// number — and between equal statistics (two NaN too) the smaller index, so the result is the
// first largest element whatever the order of the parts (commutative and associative, exactly).
// The same errors as combine_log_sum_exp.
absl::StatusOr<PartialBlock> combine_arg_max(const PartialBlock& a, const PartialBlock& b);
// Whether the arg_max pair (statistic a, index ia) wins over (b, ib), the rule above (the
// kernels' own copy, kernels::scalar_math::arg_max_wins, is held to it by the kernel tests).
inline bool arg_max_wins(double a, double ia, double b, double ib) {
    const bool a_nan = a != a;
    const bool b_nan = b != b;
    if (a_nan != b_nan) {
        return a_nan;
    }
    if (!a_nan && a != b) {
        return a > b;
    }
    return ia < ib;
}

// a ⊕ b for top_k (top_k split along its vocabulary): blocks whose last two dimensions are
// [k, 2], each row k (value, index) pairs ordered best first by arg_max_wins (larger, NaN larger
// than any number, ties to the smaller index). Per row, the two lists merged and the first k
// kept: the k best of both parts, whatever the order of the parts (commutative and associative,
// exactly, as the order is total on distinct indices). A part with fewer than k elements pads
// its list with (-inf, vocab), which loses to every element. InvalidArgument when the boxes
// differ or are not of that shape.
absl::StatusOr<HostTensor> merge_top_k(const HostTensor& a, const HostTensor& b);

// a ⊕ b for the block aggregation `op` (log_sum_exp or arg_max); InvalidArgument for another.
absl::StatusOr<PartialBlock> combine_partials(AggOp op, const PartialBlock& a,
                                              const PartialBlock& b);

} // namespace einsummable::ir
