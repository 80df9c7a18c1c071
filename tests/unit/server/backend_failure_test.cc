// server/backend_failure: once the backend reports an unrecoverable error, failures say so,
// every later request is refused UNAVAILABLE, and the listener hears of it once.
#include <memory>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "runtime/backend.h"
#include "server/backend_failure.h"

namespace einsummable::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A backend whose unrecoverable error the test sets; it runs nothing.
class StubBackend : public runtime::Backend {
public:
    std::string name() const override { return "stub"; }
    int devices() const override { return 1; }
    absl::Status unrecoverable_error() const override { return error; }
    absl::StatusOr<std::unique_ptr<runtime::Executable>>
    prepare(const physical::ExecGraph&, std::shared_ptr<runtime::ResidentMemory>) override {
        return absl::UnimplementedError("stub");
    }
    absl::StatusOr<std::shared_ptr<runtime::ResidentMemory>>
    allocate_resident(const std::vector<int64_t>&) override {
        return absl::UnimplementedError("stub");
    }

    absl::Status error;
};

TEST(BackendFailure, FailuresPassThroughWhileTheBackendCanRun) {
    StubBackend backend;
    BackendFailure failure(backend);
    EXPECT_TRUE(failure.refuse_if_unrecoverable().ok());
    EXPECT_TRUE(failure.unless_unrecoverable(absl::OkStatus()).ok());
    const absl::Status invalid = absl::InvalidArgumentError("bad input");
    EXPECT_EQ(failure.unless_unrecoverable(invalid), invalid);
    EXPECT_TRUE(failure.error().ok());
}

TEST(BackendFailure, TheFailingCallAndEveryLaterRequestAreUnavailable) {
    StubBackend backend;
    BackendFailure failure(backend);
    std::vector<absl::Status> heard;
    failure.set_listener([&](const absl::Status& error) { heard.push_back(error); });
    backend.error = absl::InternalError("illegal address");

    const absl::Status failed = failure.unless_unrecoverable(absl::InternalError("running"));
    EXPECT_TRUE(absl::IsUnavailable(failed));
    EXPECT_THAT(failed.message(),
                HasSubstr("running; the stub backend cannot run again in this process; the "
                          "server stops serving and exits for its supervisor to restart it"));
    EXPECT_EQ(failure.error(), backend.error);

    const absl::Status refused = failure.refuse_if_unrecoverable();
    EXPECT_TRUE(absl::IsUnavailable(refused));
    EXPECT_THAT(refused.message(),
                HasSubstr("the stub backend failed beyond recovery (illegal address); the "
                          "server stops serving"));
    // Heard once, however many requests find it.
    EXPECT_THAT(heard, ElementsAre(backend.error));
}

TEST(BackendFailure, ARequestFindsTheFailureBeforeAnyCallFails) {
    StubBackend backend;
    BackendFailure failure(backend);
    backend.error = absl::InternalError("lost");
    EXPECT_TRUE(absl::IsUnavailable(failure.refuse_if_unrecoverable()));
    EXPECT_EQ(failure.error(), backend.error);

    // A listener set afterwards hears it at once.
    std::vector<absl::Status> heard;
    failure.set_listener([&](const absl::Status& error) { heard.push_back(error); });
    EXPECT_THAT(heard, ElementsAre(backend.error));
}

} // namespace
} // namespace einsummable::server
