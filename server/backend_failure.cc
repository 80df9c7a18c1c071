#include "server/backend_failure.h"

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

constexpr absl::string_view kRestarting =
    "; the server stops serving and exits for its supervisor to restart it: retry the request "
    "after the restart or on another replica";

} // namespace

void BackendFailure::set_listener(std::function<void(const absl::Status& error)> listener) {
    absl::Status already;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        listener_ = listener;
        already = error_;
    }
    if (!already.ok() && listener) {
        listener(already);
    }
}

absl::Status BackendFailure::error() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
}

void BackendFailure::note(const absl::Status& error) {
    std::function<void(const absl::Status&)> listener;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_.ok()) {
            return;
        }
        error_ = error;
        listener = listener_;
    }
    spdlog::critical("the {} backend failed beyond recovery, nothing more runs in this process: {}",
                     backend_.name(), error.ToString());
    if (listener) {
        listener(error);
    }
}

absl::Status BackendFailure::unless_unrecoverable(const absl::Status& failure) {
    if (failure.ok()) {
        return failure;
    }
    const absl::Status error = backend_.unrecoverable_error();
    if (error.ok()) {
        return failure;
    }
    note(error);
    return absl::UnavailableError(absl::StrCat(failure.message(), "; the ", backend_.name(),
                                               " backend cannot run again in this process",
                                               kRestarting));
}

absl::Status BackendFailure::refuse_if_unrecoverable() {
    absl::Status error = this->error();
    if (error.ok()) {
        error = backend_.unrecoverable_error();
        if (error.ok()) {
            return error;
        }
        note(error);
    }
    return absl::UnavailableError(absl::StrCat("the ", backend_.name(),
                                               " backend failed beyond recovery (", error.message(),
                                               ")", kRestarting));
}

} // namespace einsummable::server
