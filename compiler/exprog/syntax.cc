#include "compiler/exprog/syntax.h"

#include <charconv>
#include <system_error>

#include "absl/strings/str_cat.h"

namespace einsummable::exprog::syntax {
namespace {

// The shortest fixed-point text that reads back (std::from_chars) to exactly `value`.
std::string fixed_text(double value) {
    char buffer[512];
    const auto result =
        std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::fixed);
    if (result.ec != std::errc()) {
        return "0";
    }
    return std::string(buffer, result.ptr);
}

} // namespace

bool is_letter(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
bool is_digit(char c) {
    return c >= '0' && c <= '9';
}
bool is_identifier_char(char c) {
    return is_letter(c) || is_digit(c) || c == '_';
}

bool is_identifier(absl::string_view text) {
    if (text.empty() || !is_letter(text[0])) {
        return false;
    }
    for (char c : text) {
        if (!is_identifier_char(c)) {
            return false;
        }
    }
    return true;
}

bool is_header_keyword(absl::string_view text) {
    return text == "GPUS" || text == "PARTITIONS" || text == "IN" || text == "OUT" ||
           text == "ORDER";
}

std::string quote(absl::string_view text) {
    constexpr size_t limit = 40;
    if (text.size() > limit) {
        return absl::StrCat("'", text.substr(0, limit), "...'");
    }
    return absl::StrCat("'", text, "'");
}

std::string at_location(const SourceLocation& location, absl::string_view message) {
    if (location.line <= 0) {
        return std::string(message);
    }
    return absl::StrCat("line ", location.line, " column ", location.column, ": ", message);
}

std::string keyword_label_message(absl::string_view label) {
    return absl::StrCat(quote(label), " is a header keyword, not a label: a header ",
                        quote(absl::StrCat(label, ":")), " must start a line");
}

bool read_fixed(absl::string_view text, double* value) {
    const auto result =
        std::from_chars(text.data(), text.data() + text.size(), *value, std::chars_format::fixed);
    return result.ec == std::errc() && result.ptr == text.data() + text.size();
}

std::string size_text(double bytes) {
    for (const SizeUnit& unit : kSizeUnits) {
        const double value = bytes / unit.bytes;
        if (unit.bytes != 1.0 && !(value >= 1.0)) {
            continue;
        }
        const std::string text = fixed_text(value);
        double read = 0;
        if (read_fixed(text, &read) && read * unit.bytes == bytes) {
            return absl::StrCat(text, " ", unit.name);
        }
    }
    return absl::StrCat(fixed_text(bytes), " B");
}

} // namespace einsummable::exprog::syntax
