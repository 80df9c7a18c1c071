#include "runtime/cpu/aligned_arena.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace einsummable::runtime::cpu {

void AlignedDelete::operator()(std::byte* bytes) const {
    ::operator delete[](bytes, std::align_val_t{kArenaAlignment});
}

namespace {

size_t arena_size(int64_t bytes) {
    return (std::max<size_t>(static_cast<size_t>(std::max<int64_t>(bytes, 0)), 1) +
            kArenaAlignment - 1) /
           kArenaAlignment * kArenaAlignment;
}

// Zeroing runs at memory bandwidth: a slice takes a few milliseconds, which bounds how late a
// cancellation is seen.
constexpr size_t kZeroSlice = size_t{32} << 20;

} // namespace

Arena allocate_unzeroed_arena(int64_t bytes) {
    return Arena(static_cast<std::byte*>(
        ::operator new[](arena_size(bytes), std::align_val_t{kArenaAlignment}, std::nothrow)));
}

bool zero_arena(std::byte* base, int64_t bytes, const support::Cancellation* cancellation) {
    const size_t size = arena_size(bytes);
    for (size_t begin = 0; begin < size; begin += kZeroSlice) {
        if (support::is_cancelled(cancellation)) {
            return false;
        }
        std::memset(base + begin, 0, std::min(kZeroSlice, size - begin));
    }
    return true;
}

Arena allocate_arena(int64_t bytes) {
    Arena arena = allocate_unzeroed_arena(bytes);
    if (arena) {
        zero_arena(arena.get(), bytes, nullptr);
    }
    return arena;
}

} // namespace einsummable::runtime::cpu
