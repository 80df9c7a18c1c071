#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

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

} // namespace einsummable::runtime::cpu
