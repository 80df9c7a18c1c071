// server/safetensors: files round trip through the writer and the reader for every dtype the
// server serves, tensors are spans into the file's mapping, every malformed file the format's
// reference reader refuses is refused naming the file and the tensor, and the fixture written by
// scripts/make-safetensors-fixture.py (numpy and json, not this writer) reads as the script says.

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/safetensors.h"

namespace einsummable::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

static_assert(std::endian::native == std::endian::little,
              "the test reads the format's little-endian bytes in place");

std::string le64(uint64_t value) {
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) {
        bytes[i] = static_cast<char>(value >> (8 * i));
    }
    return bytes;
}

// A file as the format lays it out: the header's length, the header, the data.
std::string file_bytes(const std::string& header, const std::string& data) {
    return le64(header.size()) + header + data;
}

template <typename T>
std::span<const std::byte> bytes_of(const std::vector<T>& values) {
    return std::as_bytes(std::span<const T>(values));
}

template <typename T>
std::vector<T> values_of(std::span<const std::byte> data) {
    EXPECT_EQ(data.size() % sizeof(T), 0u);
    std::vector<T> values(data.size() / sizeof(T));
    if (!values.empty()) { // memcpy of nothing from a null pointer is still undefined
        std::memcpy(values.data(), data.data(), values.size() * sizeof(T));
    }
    return values;
}

std::string read_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

// A directory of its own per test, removed after it.
class SafetensorsTest : public ::testing::Test {
protected:
    void SetUp() override {
        const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
        std::string name = absl::StrCat("safetensors_test_", ::getpid(), "_",
                                        info->test_suite_name(), "_", info->name());
        for (char& c : name) {
            if (c == '/') {
                c = '_';
            }
        }
        dir_ = std::filesystem::path(::testing::TempDir()) / name;
        std::filesystem::remove_all(dir_);
        std::filesystem::create_directories(dir_);
    }
    void TearDown() override { std::filesystem::remove_all(dir_); }

    std::string write(const std::string& bytes, const std::string& name = "model.safetensors") {
        const std::filesystem::path path = dir_ / name;
        std::ofstream out(path, std::ios::binary);
        out << bytes;
        out.close();
        EXPECT_TRUE(out.good()) << path;
        return path.string();
    }

    std::filesystem::path dir_;
};

TEST_F(SafetensorsTest, EveryDtypeRoundTripsWithZeroSizeAndRankZeroTensors) {
    const std::vector<float> f32 = {1.5f, -2.0f, 0.0f, 3.25f, 1e-3f, -7.0f};
    const std::vector<uint16_t> f16 = {0x3C00, 0xC000, 0x3800};          // 1, -2, 0.5
    const std::vector<uint16_t> bf16 = {0x3F80, 0xC000, 0x3F00, 0x4040}; // 1, -2, 0.5, 3
    const std::vector<int32_t> i32 = {-1, 0, 2147483647, -2147483647 - 1};
    const std::vector<int64_t> i64 = {-(int64_t{1} << 40), int64_t{1} << 62};
    const std::vector<float> scalar = {2.5f};
    const std::vector<SafetensorsTensor> tensors = {
        {"w.f32", SafetensorsDtype::f32, {2, 3}, bytes_of(f32)},
        {"w.f16", SafetensorsDtype::f16, {3}, bytes_of(f16)},
        {"empty.rows", SafetensorsDtype::f32, {0, 3}, {}},
        {"w.bf16", SafetensorsDtype::bf16, {2, 2}, bytes_of(bf16)},
        {"ids", SafetensorsDtype::i32, {4}, bytes_of(i32)},
        {"empty.cols", SafetensorsDtype::i64, {2, 0}, {}},
        {"positions", SafetensorsDtype::i64, {2, 1}, bytes_of(i64)},
        {"scale", SafetensorsDtype::f32, {}, bytes_of(scalar)},
    };
    const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "ünïcode"}};
    const std::string path = (dir_ / "model.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, tensors, metadata).ok());
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));

    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->path(), path);
    EXPECT_EQ(file->metadata(), metadata);
    ASSERT_EQ(file->tensors().size(), tensors.size());
    // The writer lays the data out in the order given, and tensors() is in the data's order.
    for (size_t i = 0; i < tensors.size(); ++i) {
        const SafetensorsTensor& read = file->tensors()[i];
        SCOPED_TRACE(tensors[i].name);
        EXPECT_EQ(read.name, tensors[i].name);
        EXPECT_EQ(read.dtype, tensors[i].dtype);
        EXPECT_EQ(read.shape, tensors[i].shape);
        ASSERT_EQ(read.data.size(), tensors[i].data.size());
        EXPECT_TRUE(std::ranges::equal(read.data, tensors[i].data));
        EXPECT_EQ(file->find(tensors[i].name), &read);
    }
    EXPECT_EQ(file->find("missing"), nullptr);
    EXPECT_EQ(values_of<float>(file->find("scale")->data), scalar);
    EXPECT_EQ(values_of<int64_t>(file->find("positions")->data), i64);
    EXPECT_TRUE(file->find("empty.rows")->data.empty());
}

TEST_F(SafetensorsTest, WriterPadsTheHeaderAndLaysTheDataContiguously) {
    const std::vector<int32_t> a = {1, 2, 3};
    const std::vector<uint16_t> b = {7};
    const std::vector<SafetensorsTensor> tensors = {{"b", SafetensorsDtype::f16, {1}, bytes_of(b)},
                                                    {"a", SafetensorsDtype::i32, {3}, bytes_of(a)}};
    const std::string path = (dir_ / "model.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, tensors, {{"format", "pt"}}).ok());
    const std::string bytes = read_file(path);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);
    EXPECT_EQ(header_bytes % 8, 0u);
    ASSERT_EQ(bytes.size(), 8 + header_bytes + 2 + 12);
    const std::string header = bytes.substr(8, header_bytes);
    // __metadata__ first, then the tensors in the order given, then spaces.
    EXPECT_EQ(header.substr(0, header.find_last_not_of(' ') + 1),
              R"({"__metadata__":{"format":"pt"},)"
              R"("b":{"dtype":"F16","shape":[1],"data_offsets":[0,2]},)"
              R"("a":{"dtype":"I32","shape":[3],"data_offsets":[2,14]}})");
    EXPECT_EQ(bytes.substr(8 + header_bytes, 2), std::string("\x07\x00", 2));
    EXPECT_EQ(bytes.substr(8 + header_bytes + 2),
              std::string("\x01\0\0\0\x02\0\0\0\x03\0\0\0", 12));
}

TEST_F(SafetensorsTest, WriterRefusesWhatIsNotAFile) {
    const std::vector<float> two = {1.0f, 2.0f};
    const std::string path = (dir_ / "out.safetensors").string();
    const auto refused = [&](std::vector<SafetensorsTensor> tensors, const std::string& needle) {
        const absl::Status status = write_safetensors(path, tensors);
        EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
        EXPECT_THAT(std::string(status.message()), StartsWith(path + ": "));
        EXPECT_THAT(std::string(status.message()), HasSubstr(needle));
        EXPECT_FALSE(std::filesystem::exists(path));
    };
    refused({{"w", SafetensorsDtype::f32, {3}, bytes_of(two)}},
            "tensor 'w': its data holds 8 bytes, but F32 [3] needs 12");
    refused({{"w", SafetensorsDtype::f32, {2}, bytes_of(two)},
             {"w", SafetensorsDtype::f32, {2}, bytes_of(two)}},
            "duplicate tensor 'w'");
    refused({{"__metadata__", SafetensorsDtype::f32, {2}, bytes_of(two)}}, "__metadata__");
    refused({{"w", SafetensorsDtype::f32, {-1, -2}, bytes_of(two)}}, "negative dimension");
}

// Where /proc/self/maps says `address` lies: the mapped file's path, a pseudo-path ("[heap]",
// "[stack]"), or "" for anonymous memory or an address mapped nowhere.
std::string mapped_file_of(const void* address) {
    std::ifstream maps("/proc/self/maps");
    const auto at = reinterpret_cast<uintptr_t>(address);
    for (std::string line; std::getline(maps, line);) {
        // "start-end perms offset dev inode   path"
        const std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipWhitespace());
        const std::vector<std::string> range = absl::StrSplit(fields[0], '-');
        const uintptr_t start = std::stoull(range[0], nullptr, 16);
        const uintptr_t end = std::stoull(range[1], nullptr, 16);
        if (at >= start && at < end) {
            return fields.size() >= 6 ? fields[5] : "";
        }
    }
    return "";
}

TEST_F(SafetensorsTest, TensorsAreSpansIntoTheFilesMapping) {
    const std::vector<float> w = {1, 2, 3, 4, 5, 6};
    const std::vector<int64_t> ids = {9, 8};
    const std::vector<SafetensorsTensor> tensors = {
        {"w", SafetensorsDtype::f32, {2, 3}, bytes_of(w)},
        {"ids", SafetensorsDtype::i64, {2}, bytes_of(ids)}};
    const std::string path = (dir_ / "model.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, tensors).ok());
    const std::string bytes = read_file(path);
    uint64_t header_bytes = 0;
    std::memcpy(&header_bytes, bytes.data(), 8);

    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    const std::span<const std::byte> mapping = file->mapping();
    ASSERT_EQ(mapping.size(), bytes.size());
    // The tensors' bytes are the file's, where the header puts them: no copy was made.
    const std::byte* data = mapping.data() + 8 + header_bytes;
    EXPECT_EQ(file->find("w")->data.data(), data);
    EXPECT_EQ(file->find("ids")->data.data(), data + 24);
    // And the mapping is the file's, as the kernel sees it.
    EXPECT_EQ(std::filesystem::path(mapped_file_of(file->find("ids")->data.data())),
              std::filesystem::canonical(path));
    EXPECT_NE(std::filesystem::path(mapped_file_of(w.data())), std::filesystem::canonical(path));

    // Moving keeps the mapping (and so the spans) where it is; the moved-from file maps nothing.
    const std::byte* w_data = file->find("w")->data.data();
    SafetensorsFile moved = *std::move(file);
    EXPECT_EQ(moved.find("w")->data.data(), w_data);
    EXPECT_EQ(values_of<float>(moved.find("w")->data), w);
    EXPECT_TRUE(file->mapping().empty());
    absl::StatusOr<SafetensorsFile> other = SafetensorsFile::open(path);
    ASSERT_TRUE(other.ok()) << other.status();
    const std::byte* other_base = other->mapping().data();
    moved = *std::move(other); // unmaps moved's own mapping
    EXPECT_EQ(moved.mapping().data(), other_base);
    EXPECT_EQ(values_of<int64_t>(moved.find("ids")->data), ids);
    EXPECT_NE(std::filesystem::path(mapped_file_of(w_data)), std::filesystem::canonical(path));
}

TEST_F(SafetensorsTest, HeadersTheFormatAllows) {
    // No tensors at all.
    absl::StatusOr<SafetensorsFile> empty = SafetensorsFile::open(write(file_bytes("{}", "")));
    ASSERT_TRUE(empty.ok()) << empty.status();
    EXPECT_TRUE(empty->tensors().empty());
    EXPECT_TRUE(empty->metadata().empty());
    // White space around the object, padding of any length; fields in any order, and fields
    // the reader does not know are ignored, as the reference reader does.
    absl::StatusOr<SafetensorsFile> padded = SafetensorsFile::open(
        write(file_bytes(" {\"b\": {\"data_offsets\": [2, 6], \"shape\": [], \"dtype\": \"I32\"},"
                         " \"a\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [0, 2],"
                         " \"extra\": [1, 2]}, \"__metadata__\": {}}   ",
                         std::string("\x80\x3f\x05\0\0\0", 6)),
              "padded.safetensors"));
    ASSERT_TRUE(padded.ok()) << padded.status();
    ASSERT_EQ(padded->tensors().size(), 2u);
    EXPECT_EQ(padded->tensors()[0].name, "a");
    EXPECT_EQ(padded->tensors()[1].name, "b");
    EXPECT_THAT(padded->tensors()[1].shape, ElementsAre());
    EXPECT_EQ(values_of<int32_t>(padded->tensors()[1].data), std::vector<int32_t>{5});
    // Zero-size tensors share their offset with their neighbours.
    absl::StatusOr<SafetensorsFile> zeros = SafetensorsFile::open(
        write(file_bytes(R"({"z1":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},)"
                         R"("z2":{"dtype":"I64","shape":[3,0,2],"data_offsets":[4,4]},)"
                         R"("w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                         R"("z3":{"dtype":"F16","shape":[0],"data_offsets":[4,4]}})",
                         std::string(4, '\0')),
              "zeros.safetensors"));
    ASSERT_TRUE(zeros.ok()) << zeros.status();
    EXPECT_EQ(zeros->tensors().size(), 4u);
}

TEST_F(SafetensorsTest, AMissingFileIsNotFound) {
    const std::string path = (dir_ / "absent.safetensors").string();
    const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound) << file.status();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
}

TEST_F(SafetensorsTest, ADirectoryIsRefused) {
    const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(dir_);
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_THAT(std::string(file.status().message()),
                StartsWith(dir_.string() + ": not a regular file"));
}

// One malformed file: its bytes, the code it must get and what the message must say after
// "<path>: " (the tensor it names, where there is one, and why).
struct Malformed {
    std::string label;
    std::string bytes;
    absl::StatusCode code;
    std::vector<std::string> says;
};

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
    return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                        ",\"data_offsets\":", offsets, "}");
}

std::vector<Malformed> malformed_files() {
    const auto invalid = absl::StatusCode::kInvalidArgument;
    const std::string four(4, '\0');
    const std::string w = entry("w", "F32", "[1]", "[0,4]");
    return {
        {"EmptyFile", "", invalid, {"holds 0 bytes, fewer than the 8"}},
        {"ShorterThanTheLength", "abc", invalid, {"holds 3 bytes, fewer than the 8"}},
        {"HeaderTooLarge", le64(100'000'001) + "{}", invalid, {"more than the format's limit"}},
        {"HeaderPastTheEnd", le64(100) + "{}", invalid, {"length is 100", "holds only 2"}},
        {"HeaderNotUtf8", file_bytes("{\"w\xff\":{}}", ""), invalid, {"not valid UTF-8"}},
        {"HeaderNotJson", file_bytes("{\"w\":", ""), invalid, {"not valid JSON", "parse error"}},
        {"HeaderTrailingGarbage", file_bytes("{}  x", ""), invalid, {"not valid JSON"}},
        {"HeaderNotAnObject", file_bytes("[1,2]", ""), invalid, {"is a JSON array, not an object"}},
        {"EntryNotAnObject",
         file_bytes("{\"w\":5}", ""),
         invalid,
         {"tensor 'w': the entry is number, not an object"}},
        {"NoDtype",
         file_bytes(R"({"w":{"shape":[1],"data_offsets":[0,4]}})", four),
         invalid,
         {"tensor 'w': no dtype"}},
        {"NoShape",
         file_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", four),
         invalid,
         {"tensor 'w': no shape"}},
        {"NoDataOffsets",
         file_bytes(R"({"w":{"dtype":"F32","shape":[1]}})", four),
         invalid,
         {"tensor 'w': no data_offsets"}},
        {"DtypeNotAString",
         file_bytes(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", four),
         invalid,
         {"tensor 'w': dtype is number, not a string"}},
        {"ShapeNotAnArray",
         file_bytes(R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})", four),
         invalid,
         {"tensor 'w': shape is string, not an array"}},
        {"DataOffsetsNotAnArray",
         file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":{}}})", four),
         invalid,
         {"tensor 'w': data_offsets is object, not an array"}},
        {"NegativeDim",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[2,-1]", "[0,4]"), "}"), four),
         invalid,
         {"tensor 'w': shape[1] is -1, not a non-negative integer"}},
        {"FractionalDim",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[2.5]", "[0,4]"), "}"), four),
         invalid,
         {"tensor 'w': shape[0] is 2.5, not a non-negative integer"}},
        {"ExponentDim",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[1e0]", "[0,4]"), "}"), four),
         invalid,
         {"tensor 'w': shape[0] is 1.0, not a non-negative integer"}},
        {"StringDim",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[\"1\"]", "[0,4]"), "}"), four),
         invalid,
         {"tensor 'w': shape[0] is \"1\""}},
        {"DimPast2To63",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[9223372036854775808]", "[0,4]"), "}"),
                    four),
         invalid,
         {"tensor 'w': shape[0] is 9223372036854775808, not a non-negative integer below 2^63"}},
        {"ThreeOffsets",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[1]", "[0,4,8]"), "}"), four),
         invalid,
         {"tensor 'w': data_offsets is [0,4,8], not [begin, end]"}},
        {"NegativeOffset",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[0]", "[-4,-4]"), "}"), ""),
         invalid,
         {"tensor 'w': data_offsets is [-4,-4]"}},
        {"OffsetsBackwards",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[1]", "[4,0]"), "}"), four + four),
         invalid,
         {"tensor 'w': data_offsets [4, 0] begin after they end"}},
        {"SizeMismatch",
         file_bytes(absl::StrCat("{", entry("w1", "F32", "[2,2]", "[0,12]"), "}"),
                    std::string(12, '\0')),
         invalid,
         {"tensor 'w1': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16"}},
        {"SizeOverflow",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[4294967296,4294967296]", "[0,4]"), "}"),
                    four),
         invalid,
         {"tensor 'w': F32 [4294967296, 4294967296] overflows 64 bits"}},
        {"FirstNotAtZero",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[1]", "[4,8]"), "}"), four + four),
         invalid,
         {"tensor 'w': data_offsets [4, 8]: the first tensor's data must start at 0"}},
        {"Gap",
         file_bytes(absl::StrCat("{", w, ",", entry("v", "F32", "[1]", "[8,12]"), "}"),
                    std::string(12, '\0')),
         invalid,
         {"tensor 'v': data_offsets [8, 12] leave a gap of 4 bytes after tensor 'w' [0, 4]"}},
        {"Overlap",
         file_bytes(absl::StrCat("{", entry("w", "F32", "[2]", "[0,8]"), ",",
                                 entry("v", "F32", "[2]", "[4,12]"), "}"),
                    std::string(12, '\0')),
         invalid,
         {"tensor 'v': data_offsets [4, 12] overlap tensor 'w' [0, 8]"}},
        {"SameOffsets",
         file_bytes(absl::StrCat("{", w, ",", entry("v", "I32", "[1]", "[0,4]"), "}"), four),
         invalid,
         {"tensor 'w': data_offsets [0, 4] overlap tensor 'v' [0, 4]"}},
        {"TrailingBytes",
         file_bytes(absl::StrCat("{", w, "}"), four + "xy"),
         invalid,
         {"2 bytes follow the last tensor, 'w'"}},
        {"TrailingBytesNoTensors",
         file_bytes("{}", "xy"),
         invalid,
         {"2 bytes follow the header, which names no tensor"}},
        {"TruncatedData",
         file_bytes(absl::StrCat("{", w, ",", entry("v", "F32", "[1]", "[4,8]"), "}"), four + "x"),
         invalid,
         {"tensor 'v': data_offsets [4, 8] end past the file, which holds 5 bytes after its "
          "header"}},
        {"DuplicateTensor",
         file_bytes(absl::StrCat("{", w, ",", w, "}"), four),
         invalid,
         {"duplicate tensor 'w'"}},
        {"DuplicateField",
         file_bytes(R"({"w":{"dtype":"F32","shape":[1],"dtype":"I32","data_offsets":[0,4]}})",
                    four),
         invalid,
         {"tensor 'w': duplicate key 'dtype'"}},
        {"DuplicateMetadata",
         file_bytes(R"({"__metadata__":{},"__metadata__":{"format":"pt"}})", ""),
         invalid,
         {"duplicate __metadata__"}},
        {"DuplicateMetadataKey",
         file_bytes(R"({"__metadata__":{"format":"pt","format":"np"}})", ""),
         invalid,
         {"__metadata__: duplicate key 'format'"}},
        {"MetadataNotAnObject",
         file_bytes(R"({"__metadata__":"pt"})", ""),
         invalid,
         {"__metadata__ is string, not an object of strings"}},
        {"MetadataValueNotAString",
         file_bytes(R"({"__metadata__":{"format":1}})", ""),
         invalid,
         {"__metadata__ 'format' is number, not a string"}},
        {"NestedTooDeep",
         file_bytes(R"({"w":{"dtype":"F32","shape":[[1]],"data_offsets":[0,4]}})", four),
         invalid,
         {"nests deeper than a safetensors header does (under 'w')"}},
        {"UnsupportedDtype",
         file_bytes(absl::StrCat("{", w, ",", entry("d", "F64", "[1]", "[4,12]"), "}"),
                    four + std::string(8, '\0')),
         absl::StatusCode::kUnimplemented,
         {"tensor 'd': dtype F64 is not supported"}},
        {"UnknownDtype",
         file_bytes(absl::StrCat("{", entry("q", "Q7", "[1]", "[0,1]"), "}"), "x"),
         invalid,
         {"tensor 'q': unknown dtype 'Q7'"}},
    };
}

class MalformedTest : public SafetensorsTest, public ::testing::WithParamInterface<Malformed> {};

TEST_P(MalformedTest, IsRefusedNamingTheFileAndTheTensor) {
    const Malformed& malformed = GetParam();
    const std::string path = write(malformed.bytes);
    const absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_FALSE(file.ok());
    EXPECT_EQ(file.status().code(), malformed.code) << file.status();
    EXPECT_THAT(std::string(file.status().message()), StartsWith(path + ": ")) << file.status();
    for (const std::string& says : malformed.says) {
        EXPECT_THAT(std::string(file.status().message()), HasSubstr(says)) << file.status();
    }
}

INSTANTIATE_TEST_SUITE_P(Files, MalformedTest, ::testing::ValuesIn(malformed_files()),
                         [](const auto& info) { return info.param.label; });

// The JSON parser quotes the token it stopped at, which may be a whole long string: the message
// keeps a few hundred bytes of it.
TEST_F(SafetensorsTest, AParseErrorQuotesLittleOfTheHeader) {
    const std::string path = write(file_bytes("{\"" + std::string(100'000, 'a'), ""));
    const absl::Status status = SafetensorsFile::open(path).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_THAT(std::string(status.message()),
                StartsWith(path + ": the header is not valid JSON: parse error"));
    EXPECT_LT(status.message().size(), path.size() + 400);
}

// A size mismatch's message, whole.
TEST_F(SafetensorsTest, ASizeMismatchSaysWhatTheShapeNeeds) {
    const std::string path = write(file_bytes(
        absl::StrCat("{", entry("w1", "F32", "[2,2]", "[0,12]"), "}"), std::string(12, '\0')));
    EXPECT_EQ(SafetensorsFile::open(path).status().message(),
              path + ": tensor 'w1': data_offsets [0, 12] hold 12 bytes, but F32 [2, 2] needs 16");
}

// tests/data/safetensors/small.safetensors, written by scripts/make-safetensors-fixture.py with
// numpy: the values below are the script's formulas.
TEST(SafetensorsFixture, ReadsAsTheScriptWroteIt) {
    const std::string path =
        std::string(EINSUMMABLE_SOURCE_DIR) + "/tests/data/safetensors/small.safetensors";
    absl::StatusOr<SafetensorsFile> file = SafetensorsFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status();
    EXPECT_EQ(file->metadata(),
              (std::map<std::string, std::string>{
                  {"format", "pt"}, {"source", "scripts/make-safetensors-fixture.py"}}));
    // In the order of the data (the script's TENSORS), not the header's (names sorted).
    std::vector<std::string> names;
    for (const SafetensorsTensor& tensor : file->tensors()) {
        names.push_back(tensor.name);
    }
    EXPECT_THAT(names, ElementsAre("embed", "norm", "empty", "proj", "ids", "positions", "scale"));
    const auto tensor = [&](const char* name) -> const SafetensorsTensor& {
        const SafetensorsTensor* found = file->find(name);
        EXPECT_NE(found, nullptr) << name;
        static const SafetensorsTensor none;
        return found != nullptr ? *found : none;
    };

    EXPECT_EQ(tensor("embed").dtype, SafetensorsDtype::f32);
    EXPECT_THAT(tensor("embed").shape, ElementsAre(2, 3));
    EXPECT_THAT(values_of<float>(tensor("embed").data),
                ElementsAre(-1.0f, -0.5f, 0.0f, 0.5f, 1.0f, 1.5f)); // arange(6) * 0.5 - 1

    EXPECT_EQ(tensor("norm").dtype, SafetensorsDtype::f16);
    EXPECT_THAT(tensor("norm").shape, ElementsAre(4));
    // IEEE half: 0, 0.5, 1, -2.
    EXPECT_THAT(values_of<uint16_t>(tensor("norm").data),
                ElementsAre(0x0000, 0x3800, 0x3C00, 0xC000));

    EXPECT_EQ(tensor("empty").dtype, SafetensorsDtype::f16);
    EXPECT_THAT(tensor("empty").shape, ElementsAre(0, 4));
    EXPECT_TRUE(tensor("empty").data.empty());

    EXPECT_EQ(tensor("proj").dtype, SafetensorsDtype::bf16);
    EXPECT_THAT(tensor("proj").shape, ElementsAre(2, 2));
    std::vector<float> proj;
    for (const uint16_t bits : values_of<uint16_t>(tensor("proj").data)) {
        proj.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits) << 16));
    }
    EXPECT_THAT(proj, ElementsAre(1.0f, -2.0f, 0.5f, 3.0f));

    EXPECT_EQ(tensor("ids").dtype, SafetensorsDtype::i32);
    EXPECT_THAT(tensor("ids").shape, ElementsAre(3));
    EXPECT_THAT(values_of<int32_t>(tensor("ids").data), ElementsAre(-1, 0, 2147483647));

    EXPECT_EQ(tensor("positions").dtype, SafetensorsDtype::i64);
    EXPECT_THAT(tensor("positions").shape, ElementsAre(2, 1));
    EXPECT_THAT(values_of<int64_t>(tensor("positions").data),
                ElementsAre(-(int64_t{1} << 40), int64_t{1} << 62));

    EXPECT_EQ(tensor("scale").dtype, SafetensorsDtype::f32);
    EXPECT_THAT(tensor("scale").shape, ElementsAre());
    EXPECT_THAT(values_of<float>(tensor("scale").data), ElementsAre(2.5f));
}

TEST(SafetensorsDtypes, NamesAndSizes) {
    EXPECT_EQ(safetensors_dtype_name(SafetensorsDtype::f32), "F32");
    EXPECT_EQ(safetensors_dtype_name(SafetensorsDtype::f16), "F16");
    EXPECT_EQ(safetensors_dtype_name(SafetensorsDtype::bf16), "BF16");
    EXPECT_EQ(safetensors_dtype_name(SafetensorsDtype::i32), "I32");
    EXPECT_EQ(safetensors_dtype_name(SafetensorsDtype::i64), "I64");
    EXPECT_EQ(safetensors_element_size(SafetensorsDtype::f32), 4);
    EXPECT_EQ(safetensors_element_size(SafetensorsDtype::f16), 2);
    EXPECT_EQ(safetensors_element_size(SafetensorsDtype::bf16), 2);
    EXPECT_EQ(safetensors_element_size(SafetensorsDtype::i32), 4);
    EXPECT_EQ(safetensors_element_size(SafetensorsDtype::i64), 8);
}

} // namespace
} // namespace einsummable::server
