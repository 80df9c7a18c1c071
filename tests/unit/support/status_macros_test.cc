// EINSUMMABLE_RETURN_IF_ERROR and EINSUMMABLE_ASSIGN_OR_RETURN (compiler/support/status_macros.h):
// an error goes up unchanged, an OK result goes on, each expression is evaluated once.

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "compiler/support/status_macros.h"
#include "gtest/gtest.h"

namespace einsummable::support {
namespace {

absl::Status fails(absl::string_view message) {
    return absl::InvalidArgumentError(message);
}

absl::StatusOr<int> number(int value) {
    if (value < 0) {
        return absl::OutOfRangeError("negative");
    }
    return value;
}

// RETURN_IF_ERROR in a function that returns a Status.
absl::Status run_all(const std::vector<absl::Status>& steps, int* ran) {
    for (const absl::Status& step : steps) {
        ++*ran;
        EINSUMMABLE_RETURN_IF_ERROR(step);
    }
    return absl::OkStatus();
}

TEST(StatusMacros, ReturnIfErrorGoesOnWhenOk) {
    int ran = 0;
    EXPECT_TRUE(run_all({absl::OkStatus(), absl::OkStatus()}, &ran).ok());
    EXPECT_EQ(ran, 2);
}

TEST(StatusMacros, ReturnIfErrorReturnsTheFirstErrorUnchanged) {
    int ran = 0;
    const absl::Status status =
        run_all({absl::OkStatus(), fails("line 2 column 3: bad"), fails("later")}, &ran);
    EXPECT_EQ(status, absl::InvalidArgumentError("line 2 column 3: bad"));
    EXPECT_EQ(ran, 2);
}

// RETURN_IF_ERROR of a StatusOr, in a function that returns a StatusOr of another type.
absl::StatusOr<std::string> checked(int value) {
    EINSUMMABLE_RETURN_IF_ERROR(number(value));
    return std::to_string(value);
}

TEST(StatusMacros, ReturnIfErrorTakesAStatusOrAndReturnsIntoAnyStatusOr) {
    EXPECT_EQ(checked(3).value(), "3");
    EXPECT_EQ(checked(-1).status(), absl::OutOfRangeError("negative"));
}

TEST(StatusMacros, ReturnIfErrorEvaluatesItsExpressionOnce) {
    int calls = 0;
    auto count = [&]() {
        ++calls;
        return absl::OkStatus();
    };
    auto body = [&]() -> absl::Status {
        EINSUMMABLE_RETURN_IF_ERROR(count());
        return absl::OkStatus();
    };
    EXPECT_TRUE(body().ok());
    EXPECT_EQ(calls, 1);
}

TEST(StatusMacros, ReturnIfErrorIsOneStatement) {
    // An unbraced if/else around it still pairs as written.
    auto body = [](bool check) -> absl::Status {
        if (check)
            EINSUMMABLE_RETURN_IF_ERROR(fails("checked"));
        else
            return fails("not checked");
        return absl::OkStatus();
    };
    EXPECT_EQ(body(true), fails("checked"));
    EXPECT_EQ(body(false), fails("not checked"));
}

TEST(StatusMacros, ReturnIfErrorDoesNotCaptureACallersStatus) {
    // The macro's own variable must not shadow a `status` the expression names.
    auto body = [](absl::Status status) -> absl::Status {
        EINSUMMABLE_RETURN_IF_ERROR(status);
        return absl::OkStatus();
    };
    EXPECT_EQ(body(fails("mine")), fails("mine"));
}

// ASSIGN_OR_RETURN into declarations and into an existing variable.
absl::StatusOr<int> sum(int a, int b) {
    EINSUMMABLE_ASSIGN_OR_RETURN(const int x, number(a));
    EINSUMMABLE_ASSIGN_OR_RETURN(int y, number(b));
    int total = 0;
    EINSUMMABLE_ASSIGN_OR_RETURN(total, number(x + y));
    return total;
}

TEST(StatusMacros, AssignOrReturnAssignsTheValue) {
    EXPECT_EQ(sum(2, 3).value(), 5);
}

TEST(StatusMacros, AssignOrReturnReturnsTheErrorUnchanged) {
    EXPECT_EQ(sum(-2, 3).status(), absl::OutOfRangeError("negative"));
    EXPECT_EQ(sum(2, -3).status(), absl::OutOfRangeError("negative"));
}

TEST(StatusMacros, AssignOrReturnReturnsIntoAStatus) {
    auto body = [](int value, int* out) -> absl::Status {
        EINSUMMABLE_ASSIGN_OR_RETURN(*out, number(value));
        return absl::OkStatus();
    };
    int out = 0;
    EXPECT_TRUE(body(7, &out).ok());
    EXPECT_EQ(out, 7);
    EXPECT_EQ(body(-7, &out), absl::OutOfRangeError("negative"));
    EXPECT_EQ(out, 7);
}

TEST(StatusMacros, AssignOrReturnMovesMoveOnlyValues) {
    auto make = [](bool ok) -> absl::StatusOr<std::unique_ptr<int>> {
        if (!ok) {
            return fails("no pointer");
        }
        return std::make_unique<int>(4);
    };
    auto body = [&](bool ok) -> absl::StatusOr<int> {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<int> pointer, make(ok));
        return *pointer;
    };
    EXPECT_EQ(body(true).value(), 4);
    EXPECT_EQ(body(false).status(), fails("no pointer"));
}

TEST(StatusMacros, AssignOrReturnTakesExpressionsWithCommasAndEvaluatesThemOnce) {
    int calls = 0;
    auto pair = [&](int a, int b) -> absl::StatusOr<std::map<int, int>> {
        ++calls;
        return std::map<int, int>{{a, b}};
    };
    auto body = [&]() -> absl::StatusOr<int> {
        // Two on one line need distinct temporaries.
        // clang-format off
        EINSUMMABLE_ASSIGN_OR_RETURN(auto first, pair(1, 2)); EINSUMMABLE_ASSIGN_OR_RETURN(auto second, pair(3, 4));
        // clang-format on
        return first.at(1) + second.at(3);
    };
    EXPECT_EQ(body().value(), 6);
    EXPECT_EQ(calls, 2);
}

} // namespace
} // namespace einsummable::support
