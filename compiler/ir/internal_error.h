#pragma once

#include <stdexcept>
#include <string>

namespace einsummable::ir {

// Thrown when an internal invariant fails: a bug in Einsummable, never the user's input (user
// mistakes get an absl::Status). An exception rather than an abort so that a long-running
// process survives it: the daemon turns it into INTERNAL for the one request that hit it
// (server::CallRunner), while a command-line tool still stops with the message.
class InternalError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

// Prints where and why on stderr, then throws InternalError with the same text.
[[noreturn]] void internal_error(const char* file, int line, const char* condition,
                                 const std::string& message);

} // namespace einsummable::ir

#define EINSUMMABLE_CHECK(condition, message)                                                      \
    do {                                                                                           \
        if (!(condition)) {                                                                        \
            ::einsummable::ir::internal_error(__FILE__, __LINE__, #condition, (message));          \
        }                                                                                          \
    } while (false)
