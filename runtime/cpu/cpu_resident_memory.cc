#include "runtime/cpu/cpu_resident_memory.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"

namespace einsummable::runtime::cpu {

absl::StatusOr<std::shared_ptr<CpuResidentMemory>>
CpuResidentMemory::allocate(const std::vector<int64_t>& bytes) {
    std::shared_ptr<CpuResidentMemory> memory(new CpuResidentMemory());
    for (size_t d = 0; d < bytes.size(); ++d) {
        if (bytes[d] < 0) {
            return absl::InvalidArgumentError(
                absl::StrCat("device ", d, "'s resident arena of ", bytes[d], " bytes"));
        }
        Arena arena = allocate_arena(bytes[d]);
        if (!arena) {
            return absl::ResourceExhaustedError(absl::StrCat(
                "cannot allocate device ", d, "'s resident arena of ", bytes[d], " bytes"));
        }
        memory->arenas_.push_back(std::move(arena));
    }
    memory->bytes_ = bytes;
    return memory;
}

absl::Status CpuResidentMemory::check_range(int device, int64_t offset, size_t size) const {
    if (device < 0 || device >= devices()) {
        return absl::InvalidArgumentError(
            absl::StrCat("device ", device, " has no resident arena (", devices(), " devices)"));
    }
    if (offset < 0 || static_cast<int64_t>(size) > bytes_[device] - offset) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bytes [", offset, ", ", offset + static_cast<int64_t>(size), ") outside device ",
            device, "'s resident arena of ", bytes_[device], " bytes"));
    }
    return absl::OkStatus();
}

absl::Status CpuResidentMemory::write(int device, int64_t offset,
                                      absl::Span<const std::byte> data) {
    EINSUMMABLE_RETURN_IF_ERROR(check_range(device, offset, data.size()));
    if (!data.empty()) {
        std::memcpy(base(device) + offset, data.data(), data.size());
    }
    return absl::OkStatus();
}

absl::Status CpuResidentMemory::read(int device, int64_t offset, absl::Span<std::byte> data) const {
    EINSUMMABLE_RETURN_IF_ERROR(check_range(device, offset, data.size()));
    if (!data.empty()) {
        std::memcpy(data.data(), base(device) + offset, data.size());
    }
    return absl::OkStatus();
}

} // namespace einsummable::runtime::cpu
