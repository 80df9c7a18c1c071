#include "compiler/ir/internal_error.h"

#include <cstdio>

#include "absl/strings/str_cat.h"

namespace einsummable::ir {

void internal_error(const char* file, int line, const char* condition, const std::string& message) {
    const std::string text = absl::StrCat("einsummable internal error at ", file, ":", line, ": ",
                                          condition, " failed: ", message);
    std::fprintf(stderr, "%s\n", text.c_str());
    throw InternalError(text);
}

} // namespace einsummable::ir
