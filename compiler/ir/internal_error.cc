#include "compiler/ir/internal_error.h"

#include <cstdio>
#include <cstdlib>

namespace einsummable::ir {

void internal_error(const char* file, int line, const char* condition, const std::string& message) {
    std::fprintf(stderr, "einsummable internal error at %s:%d: %s failed: %s\n", file, line,
                 condition, message.c_str());
    std::abort();
}

} // namespace einsummable::ir
