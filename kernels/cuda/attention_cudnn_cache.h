#pragma once

// The process-wide cache of cuDNN SDPA graphs that attention_cudnn.cc keeps: its key and the
// build-once map, apart from cuDNN so that tests check them without a GPU or cuDNN.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

#include "absl/status/statusor.h"
#include "compiler/ir/dtype.h"

namespace einsummable::kernels::cuda {

// What a built SDPA graph depends on: the physical GPU (a plan is built for one device; virtual
// devices on one GPU share it), the storage dtype, the shape of the [sequence, heads, dim]
// blocks, the mask and the scale. Everything else about a block (its position in the operator,
// its addresses) is given at launch.
struct SdpaGraphKey {
    int physical_device = 0;
    ir::DType dtype = ir::DType::bf16;
    int64_t sequence = 0;
    int64_t heads_q = 0;
    int64_t heads_kv = 0;
    int64_t head_dim = 0;
    int64_t value_dim = 0;
    bool causal = false;
    // Compared and hashed by its bits: the graph bakes in exactly this float.
    float scale = 1.0f;

    bool operator==(const SdpaGraphKey& other) const;
    bool operator!=(const SdpaGraphKey& other) const { return !(*this == other); }
    // "gpu 0 bf16 s=256 heads_q=32 heads_kv=8 d=128 d_v=128 causal scale=0.0883883".
    std::string to_string() const;
};

struct SdpaGraphKeyHash {
    size_t operator()(const SdpaGraphKey& key) const;
};

// Values built once per key and shared by everyone who asks for that key, for the life of the
// cache: get_or_build() runs `build` on the first call for a key and returns its answer, the same
// shared value or the same error, to every later call. Callers asking for one key at the same
// time wait for a single build; callers asking for other keys do not wait for it. Thread-safe.
template <typename Key, typename Value, typename Hash = std::hash<Key>>
class BuildOnceCache {
public:
    using Result = absl::StatusOr<std::shared_ptr<const Value>>;

    // `build`: () -> Result.
    template <typename Build>
    Result get_or_build(const Key& key, Build&& build) {
        std::shared_ptr<Slot> slot;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            std::shared_ptr<Slot>& entry = slots_[key];
            if (entry == nullptr) {
                entry = std::make_shared<Slot>();
            }
            slot = entry;
        }
        std::lock_guard<std::mutex> lock(slot->mutex);
        if (!slot->result.has_value()) {
            slot->result = build();
        }
        return *slot->result;
    }

    // The keys asked for so far (built, failed, or being built).
    size_t size() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return slots_.size();
    }

private:
    struct Slot {
        std::mutex mutex;
        std::optional<Result> result;
    };
    mutable std::mutex mutex_;
    std::unordered_map<Key, std::shared_ptr<Slot>, Hash> slots_;
};

} // namespace einsummable::kernels::cuda
