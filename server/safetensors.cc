#include "server/safetensors.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/utf8.h"
#include "nlohmann/json.hpp"

namespace einsummable::server {
namespace {

using Json = nlohmann::json;

// The reference reader's bound on the header (HeaderTooLarge): a header is kilobytes for a model
// of hundreds of tensors, so a larger length is a corrupt or foreign file, and the bound keeps
// what parsing it may allocate reasonable.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";
// Nesting a header never goes past: the header object, an entry (or __metadata__), a shape or
// data_offsets array. Deeper input is refused while parsing, before it allocates a frame per
// level.
constexpr size_t kMaxDepth = 3;
// The longest JSON parser message quoted: its "last read" may be a whole long string.
constexpr size_t kMaxParserMessageBytes = 300;

// Dtypes the format defines that the server does not serve: a file holding them is well formed,
// so it is refused as unsupported rather than malformed.
constexpr const char* kOtherDtypes[] = {"BOOL",        "U8",         "I8",  "I16",     "U16",
                                        "U32",         "F64",        "U64", "C64",     "F8_E4M3",
                                        "F8_E5M2",     "F8_E8M0",    "F4",  "F6_E2M3", "F6_E3M2",
                                        "F8_E4M3FNUZ", "F8_E5M2FNUZ"};

constexpr SafetensorsDtype kDtypes[] = {SafetensorsDtype::f32, SafetensorsDtype::f16,
                                        SafetensorsDtype::bf16, SafetensorsDtype::i32,
                                        SafetensorsDtype::i64};

absl::Status invalid(const std::string& path, absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

absl::Status invalid_tensor(const std::string& path, absl::string_view tensor,
                            absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", tensor, "': ", what));
}

std::string shape_text(const std::vector<int64_t>& shape) {
    return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

std::string offsets_text(uint64_t begin, uint64_t end) {
    return absl::StrCat("[", begin, ", ", end, "]");
}

// Bytes of `shape` in `dtype`, or nullopt when the count overflows 64 bits.
std::optional<uint64_t> byte_size(SafetensorsDtype dtype, const std::vector<int64_t>& shape) {
    uint64_t bytes = static_cast<uint64_t>(safetensors_element_size(dtype));
    for (const int64_t dim : shape) {
        if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(dim), &bytes)) {
            return std::nullopt;
        }
    }
    return bytes;
}

// The parser's message without its "[json.exception.parse_error.101] " prefix, cut at a
// character boundary when long.
std::string parser_message(const char* what) {
    absl::string_view text = what;
    if (absl::StartsWith(text, "[json.exception.")) {
        const size_t end = text.find("] ");
        if (end != absl::string_view::npos) {
            text.remove_prefix(end + 2);
        }
    }
    if (text.size() <= kMaxParserMessageBytes) {
        return std::string(text);
    }
    size_t cut = kMaxParserMessageBytes;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
        --cut;
    }
    return absl::StrCat(text.substr(0, cut), "…");
}

// Thrown from the parser's callback to stop at the first duplicate key or too deep a nesting.
struct HeaderShapeError {
    std::string message;
};

// Parses the header, refusing duplicate keys in any object: nlohmann keeps the last of a
// duplicate key silently, and the format forbids them ("not all parsers may respect this"), so
// a file that two readers would read differently is refused instead.
absl::StatusOr<Json> parse_header(const std::string& path, absl::string_view text) {
    struct Frame {
        std::set<std::string, std::less<>> keys;
        std::string key; // the last key read, when the frame is an object
    };
    std::vector<Frame> frames;
    const auto callback = [&](int, Json::parse_event_t event, Json& parsed) {
        switch (event) {
        case Json::parse_event_t::object_start:
        case Json::parse_event_t::array_start:
            if (frames.size() == kMaxDepth) {
                throw HeaderShapeError{
                    absl::StrCat("the header nests deeper than a safetensors header does (",
                                 frames.empty() || frames[0].key.empty()
                                     ? std::string("at the top")
                                     : absl::StrCat("under '", frames[0].key, "'"),
                                 ")")};
            }
            frames.emplace_back();
            break;
        case Json::parse_event_t::object_end:
        case Json::parse_event_t::array_end:
            frames.pop_back();
            break;
        case Json::parse_event_t::key: {
            Frame& frame = frames.back();
            std::string key = parsed.get<std::string>();
            if (!frame.keys.insert(key).second) {
                if (frames.size() == 1) {
                    throw HeaderShapeError{key == kMetadataKey
                                               ? std::string("duplicate __metadata__")
                                               : absl::StrCat("duplicate tensor '", key, "'")};
                }
                const std::string& owner = frames[0].key;
                throw HeaderShapeError{absl::StrCat(owner == kMetadataKey
                                                        ? std::string("__metadata__")
                                                        : absl::StrCat("tensor '", owner, "'"),
                                                    ": duplicate key '", key, "'")};
            }
            frame.key = std::move(key);
            break;
        }
        case Json::parse_event_t::value:
            break;
        }
        return true;
    };
    try {
        return Json::parse(text.begin(), text.end(), callback);
    } catch (const HeaderShapeError& error) {
        return invalid(path, error.message);
    } catch (const Json::exception& error) {
        return invalid(
            path, absl::StrCat("the header is not valid JSON: ", parser_message(error.what())));
    }
}

absl::StatusOr<SafetensorsDtype> parse_dtype(const std::string& path, const std::string& tensor,
                                             const std::string& name) {
    for (const SafetensorsDtype dtype : kDtypes) {
        if (name == safetensors_dtype_name(dtype)) {
            return dtype;
        }
    }
    for (const char* other : kOtherDtypes) {
        if (name == other) {
            return absl::UnimplementedError(
                absl::StrCat(path, ": tensor '", tensor, "': dtype ", name,
                             " is not supported (the server serves F32, F16, BF16, I32, I64)"));
        }
    }
    return invalid_tensor(path, tensor, absl::StrCat("unknown dtype '", name, "'"));
}

// An entry's field, present and of the JSON type `is` checks.
absl::StatusOr<const Json*> field(const std::string& path, const std::string& tensor,
                                  const Json& entry, const char* name, bool (Json::*is)() const,
                                  const char* wanted) {
    const auto it = entry.find(name);
    if (it == entry.end()) {
        return invalid_tensor(path, tensor, absl::StrCat("no ", name));
    }
    if (!((*it).*is)()) {
        return invalid_tensor(path, tensor,
                              absl::StrCat(name, " is ", it->type_name(), ", not ", wanted));
    }
    return &*it;
}

// An entry as the header gives it, before the entries are checked against each other.
struct Entry {
    std::string name;
    SafetensorsDtype dtype;
    std::vector<int64_t> shape;
    uint64_t begin;
    uint64_t end;
};

absl::StatusOr<Entry> parse_entry(const std::string& path, const std::string& name,
                                  const Json& value) {
    if (!value.is_object()) {
        return invalid_tensor(path, name,
                              absl::StrCat("the entry is ", value.type_name(), ", not an object"));
    }
    Entry entry{.name = name};
    {
        absl::StatusOr<const Json*> dtype =
            field(path, name, value, "dtype", &Json::is_string, "a string");
        if (!dtype.ok()) {
            return dtype.status();
        }
        absl::StatusOr<SafetensorsDtype> parsed =
            parse_dtype(path, name, (*dtype)->get<std::string>());
        if (!parsed.ok()) {
            return parsed.status();
        }
        entry.dtype = *parsed;
    }
    absl::StatusOr<const Json*> shape =
        field(path, name, value, "shape", &Json::is_array, "an array");
    if (!shape.ok()) {
        return shape.status();
    }
    for (size_t i = 0; i < (*shape)->size(); ++i) {
        const Json& dim = (**shape)[i];
        // nlohmann reads a non-negative integer as unsigned, a negative one as signed and
        // anything with a fraction or exponent as a float.
        if (!dim.is_number_unsigned() ||
            dim.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
            return invalid_tensor(path, name,
                                  absl::StrCat("shape[", i, "] is ", dim.dump(),
                                               ", not a non-negative integer",
                                               dim.is_number_unsigned() ? " below 2^63" : ""));
        }
        entry.shape.push_back(static_cast<int64_t>(dim.get<uint64_t>()));
    }
    absl::StatusOr<const Json*> offsets =
        field(path, name, value, "data_offsets", &Json::is_array, "an array");
    if (!offsets.ok()) {
        return offsets.status();
    }
    const Json& pair = **offsets;
    if (pair.size() != 2 || !pair[0].is_number_unsigned() || !pair[1].is_number_unsigned()) {
        return invalid_tensor(path, name,
                              absl::StrCat("data_offsets is ", pair.dump(),
                                           ", not [begin, end] of two non-negative integers"));
    }
    entry.begin = pair[0].get<uint64_t>();
    entry.end = pair[1].get<uint64_t>();
    if (entry.begin > entry.end) {
        return invalid_tensor(path, name,
                              absl::StrCat("data_offsets ", offsets_text(entry.begin, entry.end),
                                           " begin after they end"));
    }
    const std::optional<uint64_t> bytes = byte_size(entry.dtype, entry.shape);
    const std::string typed =
        absl::StrCat(safetensors_dtype_name(entry.dtype), " ", shape_text(entry.shape));
    if (!bytes) {
        return invalid_tensor(path, name, absl::StrCat(typed, " overflows 64 bits of bytes"));
    }
    if (*bytes != entry.end - entry.begin) {
        return invalid_tensor(path, name,
                              absl::StrCat("data_offsets ", offsets_text(entry.begin, entry.end),
                                           " hold ", entry.end - entry.begin, " bytes, but ", typed,
                                           " needs ", *bytes));
    }
    return entry;
}

// Entries sorted by offset must cover the data from its first byte to the file's last: the
// reference reader's InvalidOffset and MetadataIncompleteBuffer. So no byte belongs to two
// tensors and none to no tensor, and no tensor reads past the file.
absl::Status check_layout(const std::string& path, std::vector<Entry>& entries,
                          uint64_t data_bytes) {
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
        return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
    });
    uint64_t expected = 0;
    const Entry* previous = nullptr;
    for (const Entry& entry : entries) {
        if (entry.begin != expected) {
            const std::string offsets = offsets_text(entry.begin, entry.end);
            if (previous == nullptr) {
                return invalid_tensor(path, entry.name,
                                      absl::StrCat("data_offsets ", offsets,
                                                   ": the first tensor's data must start at 0"));
            }
            const std::string previous_text = absl::StrCat(
                "tensor '", previous->name, "' ", offsets_text(previous->begin, previous->end));
            if (entry.begin > expected) {
                return invalid_tensor(path, entry.name,
                                      absl::StrCat("data_offsets ", offsets, " leave a gap of ",
                                                   entry.begin - expected, " bytes after ",
                                                   previous_text));
            }
            return invalid_tensor(
                path, entry.name,
                absl::StrCat("data_offsets ", offsets, " overlap ", previous_text));
        }
        expected = entry.end;
        previous = &entry;
    }
    if (expected > data_bytes) {
        return invalid_tensor(path, previous->name,
                              absl::StrCat("data_offsets ",
                                           offsets_text(previous->begin, previous->end),
                                           " end past the file, which holds ", data_bytes,
                                           " bytes after its header (truncated?)"));
    }
    if (expected < data_bytes) {
        return invalid(path,
                       absl::StrCat(data_bytes - expected, " bytes follow ",
                                    previous == nullptr
                                        ? std::string("the header, which names no tensor")
                                        : absl::StrCat("the last tensor, '", previous->name, "'")));
    }
    return absl::OkStatus();
}

uint64_t load_le64(const std::byte* bytes) {
    uint64_t value = 0;
    for (int i = 7; i >= 0; --i) {
        value = (value << 8) | static_cast<uint64_t>(bytes[i]);
    }
    return value;
}

void store_le64(uint64_t value, char* bytes) {
    for (int i = 0; i < 8; ++i) {
        bytes[i] = static_cast<char>(value >> (8 * i));
    }
}

absl::Status errno_status(absl::string_view what, const std::string& path, int error) {
    return absl::Status(absl::ErrnoToStatusCode(error),
                        absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

} // namespace

absl::string_view safetensors_dtype_name(SafetensorsDtype dtype) {
    switch (dtype) {
    case SafetensorsDtype::f32:
        return "F32";
    case SafetensorsDtype::f16:
        return "F16";
    case SafetensorsDtype::bf16:
        return "BF16";
    case SafetensorsDtype::i32:
        return "I32";
    case SafetensorsDtype::i64:
        return "I64";
    }
    return "?";
}

int64_t safetensors_element_size(SafetensorsDtype dtype) {
    switch (dtype) {
    case SafetensorsDtype::f16:
    case SafetensorsDtype::bf16:
        return 2;
    case SafetensorsDtype::f32:
    case SafetensorsDtype::i32:
        return 4;
    case SafetensorsDtype::i64:
        return 8;
    }
    return 0;
}

absl::StatusOr<SafetensorsFile> SafetensorsFile::open(const std::filesystem::path& path_arg) {
    SafetensorsFile file;
    file.path_ = path_arg.string();
    const std::string& path = file.path_;

    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno_status("cannot open", path, errno);
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
        const int error = errno;
        ::close(fd);
        return errno_status("cannot stat", path, error);
    }
    if (!S_ISREG(info.st_mode)) {
        ::close(fd);
        return invalid(path, "not a regular file");
    }
    const uint64_t file_bytes = static_cast<uint64_t>(info.st_size);
    if (file_bytes < 8) {
        ::close(fd);
        return invalid(path, absl::StrCat("the file holds ", file_bytes,
                                          " bytes, fewer than the 8 of the header's length"));
    }
    // Private and read-only: the tensors' pages come from the page cache and are never written,
    // so mapping costs no copy, and a weight is read from disk only when it is placed.
    void* base = ::mmap(nullptr, file_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    const int map_error = errno;
    ::close(fd); // the mapping keeps the file open
    if (base == MAP_FAILED) {
        return errno_status("cannot map", path, map_error);
    }
    file.base_ = base;
    file.size_ = file_bytes;

    const std::byte* bytes = static_cast<const std::byte*>(base);
    const uint64_t header_bytes = load_le64(bytes);
    if (header_bytes > kMaxHeaderBytes) {
        return invalid(path,
                       absl::StrCat("the header's length is ", header_bytes,
                                    " bytes, more than the format's limit of ", kMaxHeaderBytes));
    }
    if (header_bytes > file_bytes - 8) {
        return invalid(path, absl::StrCat("the header's length is ", header_bytes,
                                          " bytes, but the file holds only ", file_bytes - 8,
                                          " after it"));
    }
    const absl::string_view header(reinterpret_cast<const char*>(bytes + 8), header_bytes);
    if (!support::is_valid_utf8(header)) {
        return invalid(path, "the header is not valid UTF-8");
    }
    absl::StatusOr<Json> json = parse_header(path, header);
    if (!json.ok()) {
        return json.status();
    }
    if (!json->is_object()) {
        return invalid(path,
                       absl::StrCat("the header is a JSON ", json->type_name(), ", not an object"));
    }

    std::vector<Entry> entries;
    for (const auto& [name, value] : json->items()) {
        if (name == kMetadataKey) {
            if (!value.is_object()) {
                return invalid(path, absl::StrCat("__metadata__ is ", value.type_name(),
                                                  ", not an object of strings"));
            }
            for (const auto& [key, text] : value.items()) {
                if (!text.is_string()) {
                    return invalid(path, absl::StrCat("__metadata__ '", key, "' is ",
                                                      text.type_name(), ", not a string"));
                }
                file.metadata_.emplace(key, text.get<std::string>());
            }
            continue;
        }
        absl::StatusOr<Entry> entry = parse_entry(path, name, value);
        if (!entry.ok()) {
            return entry.status();
        }
        entries.push_back(*std::move(entry));
    }
    if (absl::Status status = check_layout(path, entries, file_bytes - 8 - header_bytes);
        !status.ok()) {
        return status;
    }

    const std::byte* data = bytes + 8 + header_bytes;
    file.tensors_.reserve(entries.size());
    for (Entry& entry : entries) {
        file.index_.emplace(entry.name, file.tensors_.size());
        file.tensors_.push_back(SafetensorsTensor{
            .name = std::move(entry.name),
            .dtype = entry.dtype,
            .shape = std::move(entry.shape),
            .data = std::span<const std::byte>(data + entry.begin, entry.end - entry.begin)});
    }
    return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)), base_(std::exchange(other.base_, nullptr)),
      size_(std::exchange(other.size_, 0)), tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)), metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
    if (this != &other) {
        unmap();
        path_ = std::move(other.path_);
        base_ = std::exchange(other.base_, nullptr);
        size_ = std::exchange(other.size_, 0);
        tensors_ = std::move(other.tensors_);
        index_ = std::move(other.index_);
        metadata_ = std::move(other.metadata_);
    }
    return *this;
}

SafetensorsFile::~SafetensorsFile() {
    unmap();
}

void SafetensorsFile::unmap() {
    if (base_ != nullptr) {
        ::munmap(base_, size_);
        base_ = nullptr;
        size_ = 0;
    }
}

const SafetensorsTensor* SafetensorsFile::find(absl::string_view name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status write_safetensors(const std::filesystem::path& path_arg,
                               std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata) {
    const std::string path = path_arg.string();
    // ordered_json keeps the order of insertion: __metadata__, then the tensors as given.
    nlohmann::ordered_json header = nlohmann::ordered_json::object();
    if (!metadata.empty()) {
        nlohmann::ordered_json& object = header[kMetadataKey];
        object = nlohmann::ordered_json::object();
        for (const auto& [key, value] : metadata) {
            if (!support::is_valid_utf8(key) || !support::is_valid_utf8(value)) {
                return invalid(path, absl::StrCat("__metadata__ '", support::utf8_or_escaped(key),
                                                  "' is not valid UTF-8"));
            }
            object[key] = value;
        }
    }
    uint64_t offset = 0;
    for (const SafetensorsTensor& tensor : tensors) {
        if (!support::is_valid_utf8(tensor.name)) {
            return invalid_tensor(path, support::utf8_or_escaped(tensor.name),
                                  "the name is not valid UTF-8");
        }
        if (tensor.name == kMetadataKey) {
            return invalid(path, "a tensor may not be named __metadata__");
        }
        if (header.contains(tensor.name)) {
            return invalid(path, absl::StrCat("duplicate tensor '", tensor.name, "'"));
        }
        for (const int64_t dim : tensor.shape) {
            if (dim < 0) {
                return invalid_tensor(
                    path, tensor.name,
                    absl::StrCat("shape ", shape_text(tensor.shape), " has a negative dimension"));
            }
        }
        const std::optional<uint64_t> bytes = byte_size(tensor.dtype, tensor.shape);
        if (!bytes || *bytes != tensor.data.size()) {
            return invalid_tensor(
                path, tensor.name,
                absl::StrCat("its data holds ", tensor.data.size(), " bytes, but ",
                             safetensors_dtype_name(tensor.dtype), " ", shape_text(tensor.shape),
                             bytes ? absl::StrCat(" needs ", *bytes) : " overflows 64 bits"));
        }
        header[tensor.name] = {
            {"dtype", std::string(safetensors_dtype_name(tensor.dtype))},
            {"shape", tensor.shape},
            {"data_offsets", {offset, offset + *bytes}},
        };
        offset += *bytes;
    }
    std::string text = header.dump();
    // Spaces (JSON white space) to a multiple of 8, so the data, after the 8 bytes of the length,
    // starts 8-byte aligned in the file and in its mapping.
    text.append((8 - text.size() % 8) % 8, ' ');
    char length[8];
    store_le64(text.size(), length);

    const std::string temporary = absl::StrCat(path, ".tmp");
    const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return errno_status("cannot create", temporary, errno);
    }
    const auto write_all = [&](const void* data, size_t size) -> absl::Status {
        const char* at = static_cast<const char*>(data);
        while (size > 0) {
            const ssize_t written = ::write(fd, at, size);
            if (written < 0) {
                if (errno == EINTR) {
                    continue;
                }
                return errno_status("cannot write", temporary, errno);
            }
            at += written;
            size -= static_cast<size_t>(written);
        }
        return absl::OkStatus();
    };
    absl::Status status = write_all(length, sizeof length);
    if (status.ok()) {
        status = write_all(text.data(), text.size());
    }
    for (const SafetensorsTensor& tensor : tensors) {
        if (!status.ok()) {
            break;
        }
        status = write_all(tensor.data.data(), tensor.data.size());
    }
    if (::close(fd) != 0 && status.ok()) {
        status = errno_status("cannot write", temporary, errno);
    }
    if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
        status = errno_status(absl::StrCat("cannot rename ", temporary, " to"), path, errno);
    }
    if (!status.ok()) {
        ::unlink(temporary.c_str());
    }
    return status;
}

} // namespace einsummable::server
