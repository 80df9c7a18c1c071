#pragma once

// The one way the compiler passes an error up unchanged (docs/design.md "Conventions"):
//
//   EINSUMMABLE_RETURN_IF_ERROR(check_term(term, "output"));
//   EINSUMMABLE_ASSIGN_OR_RETURN(const int64_t value, parse_dimension(text));
//   EINSUMMABLE_ASSIGN_OR_RETURN(plan.exchange, synthesise(program, topology));
//
// RETURN_IF_ERROR takes an absl::Status or an absl::StatusOr<T> and returns its status from the
// enclosing function (which returns a Status or any StatusOr) when it is not OK.
// ASSIGN_OR_RETURN takes an absl::StatusOr<T>: not OK, it returns the status; OK, it moves the
// value into `lhs`, a declaration or anything assignable. `lhs` may not hold an unparenthesised
// comma (declare `auto` instead of `std::pair<A, B>`); the expression may. An error that gains
// context or becomes another error on the way up is written out by hand, so that these two
// always mean "as it is".
//
// Prefixed: protobuf's google/protobuf/stubs/status_macros.h and many libraries derived from
// Google's code define RETURN_IF_ERROR and ASSIGN_OR_RETURN, and the server includes compiler
// headers next to protobuf's.

#include <utility>

#include "absl/base/optimization.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace einsummable::support::status_macros_internal {

inline const absl::Status& status_of(const absl::Status& status) {
    return status;
}

template <typename T>
const absl::Status& status_of(const absl::StatusOr<T>& status_or) {
    return status_or.status();
}

} // namespace einsummable::support::status_macros_internal

#define EINSUMMABLE_RETURN_IF_ERROR(...)                                                           \
    do {                                                                                           \
        if (::absl::Status einsummable_status_ =                                                   \
                ::einsummable::support::status_macros_internal::status_of(__VA_ARGS__);            \
            ABSL_PREDICT_FALSE(!einsummable_status_.ok())) {                                       \
            return einsummable_status_;                                                            \
        }                                                                                          \
    } while (false)

#define EINSUMMABLE_ASSIGN_OR_RETURN(lhs, ...)                                                     \
    EINSUMMABLE_ASSIGN_OR_RETURN_IMPL_(                                                            \
        EINSUMMABLE_STATUS_MACROS_CONCAT_(einsummable_status_or_, __COUNTER__), lhs, __VA_ARGS__)

#define EINSUMMABLE_ASSIGN_OR_RETURN_IMPL_(status_or, lhs, ...)                                    \
    auto status_or = (__VA_ARGS__);                                                                \
    if (ABSL_PREDICT_FALSE(!status_or.ok())) {                                                     \
        return std::move(status_or).status();                                                      \
    }                                                                                              \
    lhs = *std::move(status_or)

#define EINSUMMABLE_STATUS_MACROS_CONCAT_(a, b) EINSUMMABLE_STATUS_MACROS_CONCAT_IMPL_(a, b)
#define EINSUMMABLE_STATUS_MACROS_CONCAT_IMPL_(a, b) a##b
