#pragma once

#include <string>

namespace einsummable::ir {

// An internal invariant failed: a bug in Einsummable, never the user's input (user mistakes
// get an absl::Status). Prints where and why, then aborts.
[[noreturn]] void internal_error(const char* file, int line, const char* condition,
                                 const std::string& message);

} // namespace einsummable::ir

#define EINSUMMABLE_CHECK(condition, message)                                                      \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            ::einsummable::ir::internal_error(__FILE__, __LINE__, #condition, (message));          \
        }                                                                                          \
    } while (false)
