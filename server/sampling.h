#pragma once

#include <cstdint>
#include <random>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "einsummable/v1/service.pb.h"

namespace einsummable::server {

// How Generate picks the next token from one position's logits (v1::Sampling, checked).
struct SamplingParams {
    double temperature = 0.0; // 0: greedy
    int32_t top_k = 0;        // 0: every token
    double top_p = 1.0;       // 1: every token
    uint64_t seed = 0;

    bool greedy() const { return temperature == 0.0; }
};

// The request's sampling, or InvalidArgument naming the field: temperature must be finite and
// >= 0, top_k >= 0, top_p in [0, 1] (0 is read as 1, the proto's unset).
absl::StatusOr<SamplingParams> sampling_params(const v1::Sampling& wire);

// The next token's id from `logits` (one position, the vocabulary in order):
// - greedy: the largest logit, the lowest id on a tie (torch.argmax's choice); a NaN logit is
//   never chosen;
// - otherwise softmax(logits / temperature) cut to the top_k largest and then to the smallest
//   prefix (by probability, largest first, ties by id) whose mass reaches top_p, renormalised,
//   and one draw from `rng`.
// InvalidArgument when the row is empty or has no finite logit (nothing to choose from).
absl::StatusOr<int64_t> choose_token(absl::Span<const float> logits, const SamplingParams& params,
                                     std::mt19937_64& rng);

} // namespace einsummable::server
