#include "runtime/cpu/aligned_arena.h"

#include <algorithm>
#include <cstring>
#include <new>

namespace einsummable::runtime::cpu {

void AlignedDelete::operator()(std::byte* bytes) const {
    ::operator delete[](bytes, std::align_val_t{kArenaAlignment});
}

Arena allocate_arena(int64_t bytes) {
    const size_t size = (std::max<size_t>(static_cast<size_t>(std::max<int64_t>(bytes, 0)), 1) +
                         kArenaAlignment - 1) /
                        kArenaAlignment * kArenaAlignment;
    auto* base = static_cast<std::byte*>(
        ::operator new[](size, std::align_val_t{kArenaAlignment}, std::nothrow));
    if (base != nullptr) {
        std::memset(base, 0, size);
    }
    return Arena(base);
}

} // namespace einsummable::runtime::cpu
