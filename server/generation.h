#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "einsummable/v1/service.pb.h"
#include "server/engine.h"

namespace einsummable::server {

// The most tokens one Generate call produces (GenerateRequest.max_tokens).
inline constexpr int32_t kMaxGenerateTokens = 4096;

// What Generate reads and writes of a model: its token-ids input and its logits output.
struct GenerationInterface {
    std::string ids; // the one non-weight input: i32 or i64 [batch symbol]
    v1::DType ids_dtype = v1::I32;
    std::string logits; // the saved [batch symbol, vocab] output ("logits" among several)
};

// The model's interface for generation, or FailedPrecondition naming what the model lacks (a
// model without batching, another non-weight input, ids that are not integers of rank 1, no
// logits output of rank 2).
absl::StatusOr<GenerationInterface> generation_interface(const Model& model);

// One generation (docs/generation.md): for each new token, the model runs on the prompt and the
// tokens so far as one sequence (an Execute through the engine, so concurrent generations batch
// with each other and with other requests), and the next token is chosen from the logits of
// its last position (choose_token). `emit` is given each token as it is chosen, the last with
// its finish_reason; it returns false when the client is gone, which ends the generation
// (Cancelled). Errors: InvalidArgument naming the field (no prompt, max_tokens out of range,
// sampling), the engine's (NotFound for the model, an id outside the vocabulary named by
// position), Cancelled once `cancelled` says so.
//
// This first loop recomputes the whole sequence every step: its work per token grows with the
// sequence. Key/value caches resident on the devices will make a step read the cache instead
// (issue 37).
absl::Status generate(Engine& engine, const v1::GenerateRequest& req, const CancelCheck& cancelled,
                      const std::function<bool(const v1::GenerateResponse&)>& emit);

} // namespace einsummable::server
