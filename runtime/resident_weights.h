#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/physical/resident_layout.h"
#include "runtime/backend.h"

namespace einsummable::runtime {

// A model's resident inputs on one backend (docs/runtime.md, "Resident inputs"): the layout the
// first plan defined, the device memory that holds it, and the lock that keeps writes apart
// from the runs that read it. Every plan compiled against it (CompileOptions::resident) reads
// the blocks in place, so a weight takes its bytes once however many plans the model has, and
// a weight written once is seen by all of them. Thread-safe.
class ResidentWeights {
public:
    // Allocates the layout's arenas on `backend` (ResourceExhausted naming the device when one
    // does not fit).
    static absl::StatusOr<std::shared_ptr<ResidentWeights>>
    allocate(physical::ResidentLayout layout, Backend& backend);

    const physical::ResidentLayout& layout() const { return layout_; }
    const std::shared_ptr<ResidentMemory>& memory() const { return memory_; }
    std::vector<int64_t> allocated_bytes() const { return memory_->allocated_bytes(); }

    // A whole tensor (its dtype's bytes, row-major) into every one of its blocks. Waits for the
    // runs in progress (lock_for_run) and keeps new ones out until it is done. InvalidArgument
    // naming the tensor when the layout does not hold it or the size is wrong.
    absl::Status write(absl::string_view name, absl::Span<const std::byte> bytes);
    // The tensor read back from its blocks (each position from the first block holding it).
    absl::StatusOr<std::vector<std::byte>> read(absl::string_view name) const;
    // Whether the tensor has been written.
    bool written(absl::string_view name) const;

    // Held (shared) by every run that reads the memory.
    std::shared_lock<std::shared_mutex> lock_for_run() const {
        return std::shared_lock<std::shared_mutex>(mutex_);
    }
    // Held (exclusive) by a run that also writes it: one that updates a resident state in
    // place (docs/runtime.md "Resident state"), so that no other run reads a state half
    // written and no two update it at once.
    std::unique_lock<std::shared_mutex> lock_for_update() const {
        return std::unique_lock<std::shared_mutex>(mutex_);
    }

    // What the daemon last wrote: its weights' generation (server/model_store.h). -1 = none.
    int64_t generation() const;
    void set_generation(int64_t generation);

private:
    ResidentWeights(physical::ResidentLayout layout, std::shared_ptr<ResidentMemory> memory)
        : layout_(std::move(layout)), memory_(std::move(memory)) {}
    const physical::ResidentTensor* find(absl::string_view name) const;

    const physical::ResidentLayout layout_;
    const std::shared_ptr<ResidentMemory> memory_;
    mutable std::shared_mutex mutex_; // exclusive: write(), runs updating a state; shared: runs
    mutable std::mutex state_mutex_;  // guards written_ and generation_
    std::set<std::string> written_;
    int64_t generation_ = -1;
};

} // namespace einsummable::runtime
