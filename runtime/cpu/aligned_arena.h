#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "compiler/support/cancellation.h"

namespace einsummable::runtime::cpu {

// Virtual devices' memory: zeroed blocks that start on a cache line (and an AVX-512 vector), so
// a plan that aligns its offsets gets aligned buffers.
inline constexpr size_t kArenaAlignment = 64;

struct AlignedDelete {
    void operator()(std::byte* bytes) const;
};
using Arena = std::unique_ptr<std::byte[], AlignedDelete>;

// At least one line, so every arena has an address; zeroed, so a buffer read before anything
// wrote it reads zeros. Null when the allocation fails.
Arena allocate_arena(int64_t bytes);

// allocate_arena's two halves, so that a caller may stop between the slices it zeroes: the
// block, not zeroed (null when the allocation fails), and zeroing it (`bytes` as given to the
// allocation) a slice at a time, polling `cancellation` (null: never) before each. False when
// it was set: the arena is then only partly zeroed.
Arena allocate_unzeroed_arena(int64_t bytes);
bool zero_arena(std::byte* base, int64_t bytes, const support::Cancellation* cancellation);

} // namespace einsummable::runtime::cpu
