#pragma once

// Weights in Hugging Face's safetensors format (docs/server.md "safetensors (for the model
// repository)"): a little-endian u64 N, N bytes of JSON header, then the tensors' bytes, one
// after another. The reader memory-maps the file and hands out spans into the mapping, so a
// weight is never copied on the host before it is placed on a device; the whole header is
// checked at open, so a bad file is refused naming the file and the tensor before any weight
// is used. The model repository (issue 36) builds on it; nothing else links it yet.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace einsummable::server {

// The dtypes the server serves. A file holding any other (F64, U8, the F8 kinds, ...) is refused.
enum class SafetensorsDtype { f32, f16, bf16, i32, i64 };

// The format's name of a dtype: "F32", "F16", "BF16", "I32", "I64".
absl::string_view safetensors_dtype_name(SafetensorsDtype dtype);
// Bytes per element: 4, 2, 2, 4, 8.
int64_t safetensors_element_size(SafetensorsDtype dtype);

// One tensor: its bytes are little-endian and row-major. In a SafetensorsFile, `data` points into
// the file's mapping; for write_safetensors it is whatever the caller holds.
struct SafetensorsTensor {
    std::string name;
    SafetensorsDtype dtype = SafetensorsDtype::f32;
    std::vector<int64_t> shape; // empty for a rank-0 tensor (one element)
    std::span<const std::byte> data;
};

// An open .safetensors file, mapped read-only (MAP_PRIVATE) until it is destroyed. Movable, not
// copyable; moving keeps the mapping where it is, so the spans of tensors() stay valid for as
// long as the object they came from or the one it was moved into lives.
//
// open() checks the whole header against the file (what the format's reference reader checks):
// the header's length (at most 100,000,000 bytes, within the file), UTF-8, JSON, an object of
// entries each with a dtype, a shape of non-negative integers and data_offsets [begin, end] with
// begin <= end holding exactly the shape's bytes, no duplicate keys, entries that sorted by
// offset cover the data from its first byte to the file's last without gap or overlap, and a
// __metadata__ of strings. Malformed content is InvalidArgument, a dtype the server does not
// serve Unimplemented, a missing file NotFound (errno's code for other failures to open); every
// message starts with the path and names the tensor where there is one:
//   "model.safetensors: tensor 'w1': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16"
// Only the header is read at open; the tensors' pages are read when their bytes are. The file
// must not be truncated while it is open: a read past its new end raises SIGBUS.
class SafetensorsFile {
public:
    static absl::StatusOr<SafetensorsFile> open(const std::filesystem::path& path);

    SafetensorsFile(SafetensorsFile&& other) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
    SafetensorsFile(const SafetensorsFile&) = delete;
    SafetensorsFile& operator=(const SafetensorsFile&) = delete;
    ~SafetensorsFile();

    const std::string& path() const { return path_; }
    // The tensors in the order of their bytes in the file.
    const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
    // The tensor named `name`, or nullptr.
    const SafetensorsTensor* find(absl::string_view name) const;
    // __metadata__ (empty when the header has none).
    const std::map<std::string, std::string>& metadata() const { return metadata_; }
    // The whole file as mapped; every tensor's data lies inside it.
    std::span<const std::byte> mapping() const {
        return {static_cast<const std::byte*>(base_), size_};
    }

private:
    SafetensorsFile() = default;
    void unmap();

    std::string path_;
    void* base_ = nullptr;
    size_t size_ = 0;
    std::vector<SafetensorsTensor> tensors_;
    std::map<std::string, size_t, std::less<>> index_; // name -> position in tensors_
    std::map<std::string, std::string> metadata_;
};

// Writes `tensors` to `path` as the format's reference writer lays a file out: the header (with
// __metadata__ first when `metadata` is not empty, then the tensors in the order given) padded
// with spaces so the data starts at a multiple of 8 bytes, then each tensor's bytes in the order
// given, contiguous. Each tensor's data must hold exactly its shape's bytes, names must be
// unique, UTF-8 and not "__metadata__" (InvalidArgument otherwise). The file is written beside
// `path` and renamed over it, so a reader never sees half of it.
absl::Status write_safetensors(const std::filesystem::path& path,
                               std::span<const SafetensorsTensor> tensors,
                               const std::map<std::string, std::string>& metadata = {});

} // namespace einsummable::server
