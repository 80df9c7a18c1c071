#pragma once

// What the Generate tests share: one generation through server::generate, its status and the
// tokens it streamed.

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "server/generation.h"

namespace einsummable::server::testing {

struct Generated {
    absl::Status status;
    std::vector<v1::GenerateResponse> tokens;
    std::vector<int64_t> ids() const {
        std::vector<int64_t> ids;
        for (const v1::GenerateResponse& token : tokens) {
            ids.push_back(token.token_id());
        }
        return ids;
    }
};

// `req` generated on `engine`; with `stop_after` > 0 the client leaves after that many tokens.
inline Generated run_generation(Engine& engine, const v1::GenerateRequest& req,
                                int stop_after = -1) {
    Generated result;
    result.status = generate(engine, req, nullptr, [&](const v1::GenerateResponse& token) {
        result.tokens.push_back(token);
        return stop_after < 0 || static_cast<int>(result.tokens.size()) < stop_after;
    });
    return result;
}

} // namespace einsummable::server::testing
