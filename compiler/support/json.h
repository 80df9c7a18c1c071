#pragma once

#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace einsummable::support {

// `text` as a JSON string literal, quotes included: ", \ and control characters escaped. The
// plans and tools write their JSON by hand with this; there is no JSON library below them.
inline std::string json_string(absl::string_view text) {
    std::string out = "\"";
    for (char c : text) {
        const unsigned char u = static_cast<unsigned char>(c);
        switch (c) {
        case '"':
            out += "\\\"";
            break;
        case '\\':
            out += "\\\\";
            break;
        case '\n':
            out += "\\n";
            break;
        case '\r':
            out += "\\r";
            break;
        case '\t':
            out += "\\t";
            break;
        default:
            if (u < 0x20 || u == 0x7f) {
                out += absl::StrFormat("\\u%04x", u);
            } else {
                out += c;
            }
        }
    }
    return out + "\"";
}

} // namespace einsummable::support
