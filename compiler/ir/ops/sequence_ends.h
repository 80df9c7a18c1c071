#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/ir/attributes.h"

namespace einsummable::ir {

// Packed sequences: a batch stored end to end along one `sequence` dimension, described by the
// attribute `sequence_ends` (exclusive end of each sequence). Attention never crosses an end,
// and RoPE restarts positions at each sequence start.

// The ends from `attributes`' list `name` (default: one sequence of `length`), checked to be
// strictly increasing, inside (0, length] and finishing at `length` — or, with `may_end_early`,
// at or before it (attention's key_ends: keys past the last region are read by no query);
// errors name the attribute.
absl::StatusOr<std::vector<int64_t>>
sequence_ends_attribute(const Attributes& attributes, int64_t length,
                        const std::string& name = "sequence_ends", bool may_end_early = false);
// Start of the sequence that holds `position`.
int64_t sequence_start(const std::vector<int64_t>& ends, int64_t position);
// End of the sequence that holds `position`, which must be before the last end (an internal
// check: the ends are validated against the length first).
int64_t sequence_end(const std::vector<int64_t>& ends, int64_t position);

} // namespace einsummable::ir
