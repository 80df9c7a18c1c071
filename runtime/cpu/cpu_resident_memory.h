#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/backend.h"
#include "runtime/cpu/aligned_arena.h"

namespace einsummable::runtime::cpu {

// The CPU backend's ResidentMemory: one zeroed host arena per virtual device.
class CpuResidentMemory final : public ResidentMemory {
public:
    // ResourceExhausted naming the device whose arena cannot be allocated.
    static absl::StatusOr<std::shared_ptr<CpuResidentMemory>>
    allocate(const std::vector<int64_t>& bytes);

    absl::Status write(int device, int64_t offset, absl::Span<const std::byte> data) override;
    absl::Status read(int device, int64_t offset, absl::Span<std::byte> data) const override;
    std::vector<int64_t> allocated_bytes() const override { return bytes_; }

    int devices() const { return static_cast<int>(bytes_.size()); }
    // Device `device`'s arena, as the executables' kernels read it.
    std::byte* base(int device) const { return arenas_[device].get(); }

private:
    CpuResidentMemory() = default;
    absl::Status check_range(int device, int64_t offset, size_t size) const;

    std::vector<int64_t> bytes_;
    std::vector<Arena> arenas_;
};

} // namespace einsummable::runtime::cpu
