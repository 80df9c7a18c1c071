#include "server/request_errors.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "compiler/support/utf8.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/wire_format_lite.h"

namespace einsummable::server {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Deeper than any message of ours nests; protobuf's own parser stops at 100 too.
constexpr int kMaxDepth = 100;

// The fields protobuf refuses to parse when they are not UTF-8: proto3's strings (proto2 only
// logs).
bool parse_checks_utf8(const FieldDescriptor& field) {
    return field.type() == FieldDescriptor::TYPE_STRING &&
           field.file()->syntax() == FileDescriptor::SYNTAX_PROTO3;
}

CodedInputStream stream_over(absl::string_view bytes) {
    return CodedInputStream(reinterpret_cast<const uint8_t*>(bytes.data()),
                            static_cast<int>(bytes.size()));
}

// A map entry's string key quoted for a path ("['equation']"), if it has one and it is UTF-8.
std::optional<std::string> quoted_key(absl::string_view entry) {
    CodedInputStream in = stream_over(entry);
    std::optional<std::string> key;
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
        if (WireFormatLite::GetTagFieldNumber(tag) == 1 &&
            WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
            std::string value;
            if (!WireFormatLite::ReadString(&in, &value)) {
                return std::nullopt;
            }
            key = std::move(value);
        } else if (!WireFormatLite::SkipField(&in, tag)) {
            return std::nullopt;
        }
    }
    if (!key || !support::is_valid_utf8(*key)) {
        return std::nullopt;
    }
    return absl::StrCat("['", support::utf8_or_escaped(*key), "']");
}

// The path, below `type`, of the first string field in `in` (up to its limit) that protobuf
// would refuse as not UTF-8; nullopt when there is none or the bytes are malformed.
std::optional<std::string> invalid_utf8_field(const Descriptor& type, CodedInputStream& in,
                                              int depth) {
    std::map<int, int> seen; // per field number: the elements read so far, for [index]
    for (uint32_t tag = in.ReadTag(); tag != 0; tag = in.ReadTag()) {
        const FieldDescriptor* field =
            type.FindFieldByNumber(WireFormatLite::GetTagFieldNumber(tag));
        const bool nested = field != nullptr && (field->type() == FieldDescriptor::TYPE_STRING ||
                                                 field->type() == FieldDescriptor::TYPE_MESSAGE);
        if (!nested ||
            WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
            if (!WireFormatLite::SkipField(&in, tag)) {
                return std::nullopt;
            }
            continue;
        }
        const int index = seen[field->number()]++;
        uint32_t length = 0;
        if (!in.ReadVarint32(&length) ||
            length > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
            return std::nullopt;
        }
        std::string name = field->name();
        if (field->is_repeated() && !field->is_map()) {
            absl::StrAppend(&name, "[", index, "]");
        }
        if (field->type() == FieldDescriptor::TYPE_STRING) {
            std::string value;
            if (!in.ReadString(&value, static_cast<int>(length))) {
                return std::nullopt;
            }
            if (parse_checks_utf8(*field) && !support::is_valid_utf8(value)) {
                return name;
            }
            continue;
        }
        if (depth >= kMaxDepth) {
            return std::nullopt;
        }
        if (field->is_map()) {
            // Small: read whole, so the key can name the entry before its value is searched.
            std::string entry;
            if (!in.ReadString(&entry, static_cast<int>(length))) {
                return std::nullopt;
            }
            CodedInputStream entry_in = stream_over(entry);
            std::optional<std::string> found =
                invalid_utf8_field(*field->message_type(), entry_in, depth + 1);
            if (!found) {
                continue;
            }
            if (*found == "key") {
                return absl::StrCat(name, " (the key of entry ", index, ")");
            }
            const std::string key = quoted_key(entry).value_or(absl::StrCat("[", index, "]"));
            // The entry's `value` field is the map's value: attributes['equation'].string_value.
            absl::string_view below = *found;
            if (absl::ConsumePrefix(&below, "value")) {
                return absl::StrCat(name, key, below);
            }
            return absl::StrCat(name, key, ".", *found);
        }
        const CodedInputStream::Limit limit = in.PushLimit(static_cast<int>(length));
        if (std::optional<std::string> found =
                invalid_utf8_field(*field->message_type(), in, depth + 1)) {
            return absl::StrCat(name, ".", *found);
        }
        if (in.BytesUntilLimit() != 0) {
            return std::nullopt; // stopped short of the field's end: malformed
        }
        in.PopLimit(limit);
    }
    return std::nullopt;
}

} // namespace

absl::Status request_parse_error(const Descriptor& type, absl::string_view bytes) {
    CodedInputStream in = stream_over(bytes);
    if (std::optional<std::string> field = invalid_utf8_field(type, in, 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "field ", *field, " of ", type.full_name(),
            " is not valid UTF-8; every string field must be (the request was not read)"));
    }
    return absl::InvalidArgumentError(absl::StrCat("the request is not a valid ", type.full_name(),
                                                   ": its protobuf encoding is malformed"));
}

absl::Status with_prefix(const absl::Status& status, absl::string_view prefix) {
    return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

} // namespace einsummable::server
