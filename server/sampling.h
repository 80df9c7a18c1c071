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
// - greedy: the largest logit, the lowest id on a tie (torch.argmax's choice);
// - otherwise softmax(logits / temperature) cut to the top_k largest and then to the smallest
//   prefix (by probability, largest first, ties by id) whose mass reaches top_p, renormalised,
//   and one draw from `rng`.
// InvalidArgument when the row is empty, holds a NaN (naming the first one's id: a model that
// computed NaN has no token to give, as torch's sampling refuses NaN probabilities) or has no
// finite logit (nothing to choose from).
absl::StatusOr<int64_t> choose_token(absl::Span<const float> logits, const SamplingParams& params,
                                     std::mt19937_64& rng);

// choose_token from a row's best (value, id) pairs only, best first by the argmax operator's rule
// (the top_k operator's output: docs/operators.md), when params.top_k is at most their count:
// the same token, the same errors and the same draws from `rng` as choose_token over the whole
// row, since top-k sampling reads no logit past the k-th. `vocab` is the row's length, for the
// errors. InternalError when params.top_k is 0 or more than the pairs.
absl::StatusOr<int64_t> choose_top_token(absl::Span<const float> pairs, int64_t vocab,
                                         const SamplingParams& params, std::mt19937_64& rng);

// The greedy token from a row's argmax pair — its first largest logit, NaN ranked above every
// number (the argmax operator's rule, docs/operators.md), and that logit's id: the id, with
// choose_token's errors for a NaN or -inf logit. Greedy choose_token is this over the row.
absl::StatusOr<int64_t> greedy_token(float logit, int64_t id, int64_t vocab);

} // namespace einsummable::server
