#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/box.h"
#include "compiler/ir/dtype.h"
#include "compiler/ir/host_tensor.h"

namespace einsummable::ir {

// A partial result of an output aggregated with AggOp::log_sum_exp (attention split along its
// keys): the block's values normalised over the part of the aggregation one function
// covers, and for every vector along the block's last dimension the log of the sum of the
// weights it was normalised by. -inf where no key of the part has weight: with values 0 where
// the part holds no key, NaN where every score is -inf. NaN where a score is NaN or +inf
// (docs/operators.md "Non-finite inputs"). The statistics are row-major over
// stats_box(values.box()).
struct PartialBlock {
    HostTensor values;
    std::vector<double> log_sum_exp;
};

// The box of a partial block's statistics: `box` without its last dimension (rank 0 stays).
Box stats_box(const Box& box);
// Statistics of a partial block of `box`: one per vector along its last dimension.
int64_t stats_count(const Box& box);

// Stored partial results (the physical plan's buffers, the bytes an exchange moves): the block's
// elements in `dtype`, padded to 4 bytes, then its statistics as f32. stats_offset is where they
// start; block_bytes the whole (the elements alone without `stats`).
int64_t stats_offset(const Box& box, DType dtype);
int64_t block_bytes(const Box& box, DType dtype, bool stats);

// a ⊕ b: each side's values rescaled by exp(its log-sum-exp − the combined one), then added,
// a side whose weight is 0 left out (its NaN values too); the combined log-sum-exp is
// log(exp(a) + exp(b)), NaN when either is NaN. Where both are -inf the values add (0 stays 0,
// NaN stays NaN) and the statistics stay -inf. Commutative and associative (up to rounding),
// with the partial of nothing (-inf, values 0) as identity. InvalidArgument when the boxes
// differ or a side's statistics do not match its box.
absl::StatusOr<PartialBlock> combine_log_sum_exp(const PartialBlock& a, const PartialBlock& b);

} // namespace einsummable::ir
