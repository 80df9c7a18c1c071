#pragma once

// UTF-8 for error messages: text a client sent is quoted whole, a character at a time, never a
// byte at a time. A message that cuts a character in two is not UTF-8, and clients then decode
// all of it some other way (grpcio falls back to Latin-1: 'αβ' reads 'Î±Î²').

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace einsummable::support {

// The length in bytes (1 to 4) of the UTF-8 character `text` starts with, or 0 when it does not
// start with a well-formed one: RFC 3629, so no overlong forms, no surrogates (U+D800..DFFF),
// nothing past U+10FFFF — what protobuf requires of a string field.
inline size_t utf8_char_length(absl::string_view text) {
    if (text.empty()) {
        return 0;
    }
    const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
    const unsigned char lead = byte(0);
    size_t length = 0;
    // The range the second byte must fall in; continuation bytes after it are 0x80..0xBF.
    unsigned char low = 0x80;
    unsigned char high = 0xBF;
    if (lead < 0x80) {
        return 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
        length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
        length = 3;
        low = lead == 0xE0 ? 0xA0 : 0x80;  // overlong below U+0800
        high = lead == 0xED ? 0x9F : 0xBF; // surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
        length = 4;
        low = lead == 0xF0 ? 0x90 : 0x80;  // overlong below U+10000
        high = lead == 0xF4 ? 0x8F : 0xBF; // past U+10FFFF
    } else {
        return 0; // a continuation byte, an overlong lead (C0, C1) or F5..FF
    }
    if (text.size() < length || byte(1) < low || byte(1) > high) {
        return 0;
    }
    for (size_t i = 2; i < length; ++i) {
        if (byte(i) < 0x80 || byte(i) > 0xBF) {
            return 0;
        }
    }
    return length;
}

// Whether all of `text` is well-formed UTF-8 (utf8_char_length).
inline bool is_valid_utf8(absl::string_view text) {
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t length = utf8_char_length(text.substr(pos));
        if (length == 0) {
            return false;
        }
        pos += length;
    }
    return true;
}

// `text` fit for a message: its well-formed UTF-8 characters as they are, every other byte as
// \xNN (a backslash as \\, so that the escape is unambiguous). The result is always UTF-8.
inline std::string utf8_or_escaped(absl::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t pos = 0;
    while (pos < text.size()) {
        const size_t length = utf8_char_length(text.substr(pos));
        if (length == 0) {
            constexpr char kHex[] = "0123456789abcdef";
            const auto byte = static_cast<unsigned char>(text[pos]);
            out.append({'\\', 'x', kHex[byte >> 4], kHex[byte & 15]});
            ++pos;
        } else if (text[pos] == '\\') {
            out.append("\\\\");
            ++pos;
        } else {
            out.append(text.data() + pos, length);
            pos += length;
        }
    }
    return out;
}

} // namespace einsummable::support
