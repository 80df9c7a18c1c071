#include "server/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/support/status_macros.h"
#include "kernels/scalar_math.h"

namespace einsummable::server {

absl::StatusOr<SamplingParams> sampling_params(const v1::Sampling& wire) {
    SamplingParams params;
    if (!std::isfinite(wire.temperature()) || wire.temperature() < 0.0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sampling.temperature is ", wire.temperature(), "; give 0 (greedy) or more"));
    }
    if (wire.top_k() < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("sampling.top_k is ", wire.top_k(), "; give 0 (every token) or more"));
    }
    if (!(wire.top_p() >= 0.0 && wire.top_p() <= 1.0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sampling.top_p is ", wire.top_p(), "; give a probability in (0, 1], or 0 for 1"));
    }
    params.temperature = wire.temperature();
    params.top_k = wire.top_k();
    params.top_p = wire.top_p() == 0.0 ? 1.0 : wire.top_p();
    params.seed = wire.seed();
    return params;
}

absl::StatusOr<int64_t> greedy_token(float logit, int64_t id, int64_t vocab) {
    if (std::isnan(logit)) {
        return absl::InvalidArgumentError(
            absl::StrCat("the logit of token ", id,
                         " is NaN: the model computed NaN, so no token can be chosen"));
    }
    if (vocab == 0 || logit == -std::numeric_limits<float>::infinity()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the logits (", vocab, " of them) hold no finite value to choose a token by"));
    }
    return id;
}

namespace {

// One draw among the candidates, best first and already cut to top_k (ids[i] with logit
// values[i], no NaN): cut to the smallest prefix whose weight reaches top_p, as choose_token
// documents.
int64_t draw(const std::vector<float>& values, const std::vector<int64_t>& ids,
             const SamplingParams& params, std::mt19937_64& rng) {
    std::vector<double> weights(values.size());
    const double top = static_cast<double>(values[0]);
    for (size_t i = 0; i < weights.size(); ++i) {
        weights[i] = std::exp((static_cast<double>(values[i]) - top) / params.temperature);
    }
    const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
    if (params.top_p < 1.0) {
        double mass = 0.0;
        size_t keep = 0;
        while (keep < weights.size() && mass < params.top_p * total) {
            mass += weights[keep++];
        }
        weights.resize(std::max<size_t>(keep, 1));
    }
    std::discrete_distribution<size_t> distribution(weights.begin(), weights.end());
    return ids[distribution(rng)];
}

} // namespace

absl::StatusOr<int64_t> choose_token(absl::Span<const float> logits, const SamplingParams& params,
                                     std::mt19937_64& rng) {
    int64_t best = 0; // the argmax operator's rule: the first largest, NaN largest
    for (int64_t id = 1; id < static_cast<int64_t>(logits.size()); ++id) {
        if (kernels::scalar_math::arg_max_wins(logits[id], id, logits[best], best)) {
            best = id;
        }
    }
    const auto vocab = static_cast<int64_t>(logits.size());
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t token,
                                 greedy_token(vocab > 0 ? logits[best] : 0.0f, best, vocab));
    if (params.greedy() || std::isinf(logits[best])) {
        return token; // +inf outweighs everything: the softmax is that token alone
    }
    // Candidates by logit, largest first, ties by id (no NaN: refused above).
    std::vector<int64_t> order(logits.size());
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
    if (params.top_k > 0 && order.size() > static_cast<size_t>(params.top_k)) {
        order.resize(static_cast<size_t>(params.top_k));
    }
    std::vector<float> values(order.size());
    for (size_t i = 0; i < order.size(); ++i) {
        values[i] = logits[order[i]];
    }
    return draw(values, order, params, rng);
}

absl::StatusOr<int64_t> choose_top_token(absl::Span<const float> pairs, int64_t vocab,
                                         const SamplingParams& params, std::mt19937_64& rng) {
    const auto k = static_cast<int64_t>(pairs.size() / 2);
    if (k == 0 || pairs.size() % 2 != 0 || params.top_k <= 0 || params.top_k > k) {
        return absl::InternalError(absl::StrCat("choose_top_token: ", pairs.size(),
                                                " values are not the ", params.top_k,
                                                " best (value, id) pairs sampling needs"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(int64_t token,
                                 greedy_token(pairs[0], static_cast<int64_t>(pairs[1]), vocab));
    if (params.greedy() || std::isinf(pairs[0])) {
        return token;
    }
    std::vector<float> values(static_cast<size_t>(params.top_k));
    std::vector<int64_t> ids(static_cast<size_t>(params.top_k));
    for (size_t i = 0; i < values.size(); ++i) {
        values[i] = pairs[2 * i];
        ids[i] = static_cast<int64_t>(pairs[2 * i + 1]);
    }
    return draw(values, ids, params, rng);
}

} // namespace einsummable::server
