#pragma once

#include <functional>
#include <memory>
#include <mutex>

#include "absl/status/status.h"
#include "runtime/backend.h"

// The backend's failure beyond recovery (runtime::Backend::unrecoverable_error: on CUDA a
// sticky error, docs/cuda.md "Errors"), as the engine sees it: once it has happened, the
// request whose call failed, and every request after it that needs the devices, fail with
// UNAVAILABLE saying so and that the server restarts; a listener hears of it once
// (docs/server.md "Unrecoverable device errors").
namespace einsummable::server {

class BackendFailure {
public:
    // `backend` must outlive this object.
    explicit BackendFailure(const runtime::Backend& backend) : backend_(backend) {}

    // `listener` hears the backend's error once, on the thread of the request that found it,
    // before that request returns (at once if it has already happened). Null: nobody.
    void set_listener(std::function<void(const absl::Status& error)> listener);
    // The backend's unrecoverable error once seen; OK before.
    absl::Status error() const;
    // `failure` of a call into the backend, or, once the backend reports an unrecoverable
    // error (noted, the listener told), UNAVAILABLE with `failure`'s message saying so.
    absl::Status unless_unrecoverable(const absl::Status& failure);
    // UNAVAILABLE once the backend has failed beyond recovery (naming its error); OK before.
    absl::Status refuse_if_unrecoverable();

private:
    void note(const absl::Status& error);

    const runtime::Backend& backend_;
    mutable std::mutex mutex_;
    absl::Status error_;                                // guarded by mutex_
    std::function<void(const absl::Status&)> listener_; // the same
};

} // namespace einsummable::server
