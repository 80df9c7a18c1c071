#include "kernels/cuda/attention_cudnn_cache.h"

#include <bit>
#include <functional>

#include "absl/strings/str_cat.h"

namespace einsummable::kernels::cuda {

bool SdpaGraphKey::operator==(const SdpaGraphKey& other) const {
    return physical_device == other.physical_device && dtype == other.dtype &&
           sequence == other.sequence && heads_q == other.heads_q && heads_kv == other.heads_kv &&
           head_dim == other.head_dim && value_dim == other.value_dim && causal == other.causal &&
           std::bit_cast<uint32_t>(scale) == std::bit_cast<uint32_t>(other.scale);
}

std::string SdpaGraphKey::to_string() const {
    return absl::StrCat("gpu ", physical_device, " ", ir::dtype_name(dtype), " s=", sequence,
                        " heads_q=", heads_q, " heads_kv=", heads_kv, " d=", head_dim,
                        " d_v=", value_dim, causal ? " causal" : "", " scale=", scale);
}

size_t SdpaGraphKeyHash::operator()(const SdpaGraphKey& key) const {
    size_t hash = 0;
    // boost::hash_combine's mixing.
    const auto combine = [&hash](size_t value) {
        hash ^= value + 0x9e3779b97f4a7c15ULL + (hash << 6) + (hash >> 2);
    };
    combine(std::hash<int>()(key.physical_device));
    combine(std::hash<int>()(static_cast<int>(key.dtype)));
    for (int64_t value : {key.sequence, key.heads_q, key.heads_kv, key.head_dim, key.value_dim}) {
        combine(std::hash<int64_t>()(value));
    }
    combine(std::hash<bool>()(key.causal));
    combine(std::hash<uint32_t>()(std::bit_cast<uint32_t>(key.scale)));
    return hash;
}

} // namespace einsummable::kernels::cuda
