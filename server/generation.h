#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "einsummable/v1/service.pb.h"
#include "server/engine.h"
#include "server/generation_pool.h"

namespace einsummable::server {

// The most tokens one Generate call produces (GenerateRequest.max_tokens).
inline constexpr int32_t kMaxGenerateTokens = 4096;

// The model's interface for generation, or FailedPrecondition naming what the model lacks (a
// model without batching, another non-weight input, ids that are not integers of rank 1, no
// logits output of rank 2).
absl::StatusOr<GenerationInterface> generation_interface(const Model& model);

// One generation (docs/generation.md). On key/value caches when the model's graph can take them
// (GenerationPool, the engine's pool of the model and the request's options): the prompt's
// prefill, then one decode step per token, batched with the model's other generations.
// Otherwise (--generation_slots 0, or a graph whose attention cannot read caches) the model
// runs on the prompt and the tokens so far as one sequence for each new token (an Execute
// through the engine, so concurrent generations batch). Either way the next token is chosen
// from the logits of the last position (choose_token), and `emit` is given each token as it is
// chosen, the last with its finish_reason; it returns false when the client is gone, which ends
// the generation (Cancelled). Errors: InvalidArgument naming the field (no prompt, max_tokens
// out of range, sampling, a prompt longer than a slot), the engine's (NotFound for the model,
// an id outside the vocabulary named by position), Cancelled once `cancelled` says so.
absl::Status generate(Engine& engine, const v1::GenerateRequest& req, const CancelCheck& cancelled,
                      const std::function<bool(const v1::GenerateResponse&)>& emit);

} // namespace einsummable::server
