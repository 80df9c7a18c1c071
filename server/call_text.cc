#include "server/call_text.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace einsummable::server {

std::string truncate_message(absl::string_view message, size_t limit) {
    if (message.size() <= limit) {
        return std::string(message);
    }
    // The suffix's length depends on the count it states; 40 bytes hold any.
    constexpr size_t kSuffixRoom = 40;
    size_t keep = limit > kSuffixRoom ? limit - kSuffixRoom : 0;
    // Back off continuation bytes (10xxxxxx) so the cut falls between characters.
    while (keep > 0 && (static_cast<unsigned char>(message[keep]) & 0xC0) == 0x80) {
        --keep;
    }
    return absl::StrCat(message.substr(0, keep), " \u2026and ", message.size() - keep,
                        " more bytes");
}

std::string printable(absl::string_view text) {
    std::string out;
    out.reserve(text.size());
    for (char c : text) {
        const auto byte = static_cast<unsigned char>(c);
        if (byte < 0x20 || byte == 0x7f) {
            absl::StrAppendFormat(&out, "\\x%02x", byte);
        } else {
            out.push_back(c);
        }
    }
    return out;
}

} // namespace einsummable::server
