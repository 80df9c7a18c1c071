#include "server/plan_store.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <tuple>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/plan_record.h"
#include "compiler/support/status_macros.h"

namespace einsummable::server {
namespace {

// A plan file (docs/physical.md, "Plan cache files"):
//   einsummable-plan-cache 1
//   key <PlanKey::to_string, C-escaped>
//   checksum <FNV-1a 64 of the payload, 16 hex digits>
//   <payload: runtime::Plan::record()>
constexpr absl::string_view kMagic = "einsummable-plan-cache";
constexpr int kFormatVersion = 1;
constexpr absl::string_view kExtension = ".plan";

uint64_t fnv1a(absl::string_view bytes) {
    uint64_t hash = 14695981039346656037ull;
    for (char c : bytes) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 1099511628211ull;
    }
    return hash;
}

std::string hex(uint64_t value) {
    return absl::StrFormat("%016x", value);
}

// Splits off the first line (without its '\n'); false when there is no '\n'.
bool take_line(absl::string_view& text, absl::string_view& line) {
    const size_t end = text.find('\n');
    if (end == absl::string_view::npos) {
        return false;
    }
    line = text.substr(0, end);
    text.remove_prefix(end + 1);
    return true;
}

absl::Status errno_status(absl::string_view what, const std::string& path, int error) {
    return absl::UnavailableError(absl::StrCat(what, " ", path, ": ", std::strerror(error)));
}

// Writes `content` to `path` and flushes it to disk.
absl::Status write_file(const std::string& path, absl::string_view content) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        return errno_status("cannot create", path, errno);
    }
    while (!content.empty()) {
        const ssize_t written = ::write(fd, content.data(), content.size());
        if (written < 0) {
            if (errno == EINTR) {
                continue;
            }
            const int error = errno;
            ::close(fd);
            return errno_status("cannot write", path, error);
        }
        content.remove_prefix(static_cast<size_t>(written));
    }
    if (::fsync(fd) != 0) {
        const int error = errno;
        ::close(fd);
        return errno_status("cannot flush", path, error);
    }
    if (::close(fd) != 0) {
        return errno_status("cannot close", path, errno);
    }
    return absl::OkStatus();
}

// The store's own files: 16 lower-case hex digits and the extension (PlanStore::file_name).
// Temporary files ("....plan.tmp.<pid>.<n>") and anything else are not.
bool is_plan_file_name(absl::string_view name) {
    if (name.size() != 16 + kExtension.size() || !absl::EndsWith(name, kExtension)) {
        return false;
    }
    return std::all_of(name.begin(), name.begin() + 16,
                       [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

} // namespace

namespace {

// "64*3,16": the lengths of the sequences ending at `ends`, a run of one length with its count.
std::string sequence_lengths_string(const std::vector<int64_t>& ends) {
    std::string out;
    int64_t start = 0;
    for (size_t i = 0; i < ends.size();) {
        const int64_t length = ends[i] - start;
        size_t run = 1;
        while (i + run < ends.size() && ends[i + run] - ends[i + run - 1] == length) {
            ++run;
        }
        absl::StrAppend(&out, out.empty() ? "" : ",", length,
                        run > 1 ? absl::StrCat("*", run) : "");
        start = ends[i + run - 1];
        i += run;
    }
    return out;
}

} // namespace

namespace {

// The objective a plan stored under `spelled` without naming its objective was made by:
// before the time programme, keys said nothing of the bytes objective (then "cost") and
// "objective=time" of the search. Empty for a spelling no such plan was stored under.
std::string legacy_objective(const std::string& spelled) {
    if (spelled == "bytes") {
        return "bytes";
    }
    return spelled == "time" ? "search" : "";
}

// OK when the record stored under `key` (spelled as the file's key line) is a plan of
// `objective`: it names it, or names none and `key` is the old spelling of it. NotFound
// otherwise (a plan of another objective that an old key spelled alike), so that the caller
// plans it afresh; DataLoss when the record's first lines are not a record's.
absl::Status check_stored_objective(const PlanKey& key, const std::string& objective,
                                    absl::string_view record, const std::string& path) {
    absl::StatusOr<std::optional<logical::Objective>> recorded =
        physical::recorded_objective(record);
    if (!recorded.ok()) {
        return absl::DataLossError(absl::StrCat(
            "plan file ", path, ": the stored plan does not fit: ", recorded.status().message()));
    }
    const std::string made = recorded->has_value()
                                 ? std::string(logical::objective_name(**recorded))
                                 : legacy_objective(key.objective);
    if (made == objective) {
        return absl::OkStatus();
    }
    return absl::NotFoundError(absl::StrCat(
        "plan file ", path, " holds a plan of the ", made.empty() ? "unknown" : made, " objective",
        recorded->has_value() ? "" : " (stored before objectives were renamed)",
        "; the key asks for ", objective));
}

} // namespace

std::string PlanKey::to_string() const {
    return absl::StrCat("model=", model, " graph=", graph_fingerprint, " dims=",
                        absl::StrJoin(dims, ",",
                                      [](std::string* out, const auto& dim) {
                                          absl::StrAppend(out, dim.first, ":", dim.second);
                                      }),
                        " devices=", devices, " planner=", planner,
                        objective == "bytes" ? "" : absl::StrCat(" objective=", objective),
                        " seed=", seed, " schedule=", schedule,
                        " synthesis_iterations=", synthesis_iterations, " topology=", topology,
                        device_memory == 0 ? "" : absl::StrCat(" device_memory=", device_memory),
                        " version=", version,
                        weights.empty() ? "" : absl::StrCat(" weights=", weights),
                        sequence_ends.empty()
                            ? ""
                            : absl::StrCat(" sequences=", sequence_lengths_string(sequence_ends)));
}

absl::StatusOr<std::unique_ptr<PlanStore>> PlanStore::open(std::string directory,
                                                           int64_t max_bytes) {
    if (max_bytes < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan store cap ", max_bytes, " bytes: expected at least 0 (0 = none)"));
    }
    if (!directory.empty()) {
        std::error_code error;
        std::filesystem::create_directories(directory, error);
        if (error || !std::filesystem::is_directory(directory, error)) {
            return absl::FailedPreconditionError(absl::StrCat(
                "plan store directory ", directory, " cannot be created or is not a directory",
                error ? absl::StrCat(": ", error.message()) : std::string()));
        }
    }
    return std::unique_ptr<PlanStore>(new PlanStore(std::move(directory), max_bytes));
}

std::string PlanStore::file_name(const PlanKey& key) {
    return absl::StrCat(hex(fnv1a(key.to_string())), kExtension);
}

std::string PlanStore::path_for(const PlanKey& key) const {
    return (std::filesystem::path(directory_) / file_name(key)).string();
}

void PlanStore::touch(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    last_use_[name] = ++uses_;
}

void PlanStore::set_keys_in_use(KeysInUse keys_in_use) {
    std::lock_guard<std::mutex> lock(mutex_);
    keys_in_use_ = std::move(keys_in_use);
}

namespace {

// Writes `content` to a temporary name unique to this process and call, in the same directory,
// then renames it to `path` (atomic; replaces an older file), so a crash never leaves half a
// file.
absl::Status write_atomically(const std::string& path, absl::string_view content) {
    static std::atomic<uint64_t> counter{0};
    const std::string temporary =
        absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
    if (absl::Status status = write_file(temporary, content); !status.ok()) {
        std::error_code ignored;
        std::filesystem::remove(temporary, ignored);
        return status;
    }
    std::error_code error;
    std::filesystem::rename(temporary, path, error);
    if (error) {
        std::filesystem::remove(temporary, error);
        return absl::UnavailableError(
            absl::StrCat("cannot rename ", temporary, " to ", path, ": ", error.message()));
    }
    return absl::OkStatus();
}

// The whole file; NotFound when it does not exist.
absl::StatusOr<std::string> read_file(const std::string& path, absl::string_view what) {
    std::error_code error;
    if (!std::filesystem::exists(path, error) && !error) {
        return absl::NotFoundError(absl::StrCat("no stored ", what, " (", path, ")"));
    }
    std::ifstream file(path, std::ios::binary);
    if (!file) {
        return absl::UnavailableError(absl::StrCat("cannot open ", path));
    }
    std::ostringstream buffer;
    buffer << file.rdbuf();
    if (file.bad()) {
        return absl::UnavailableError(absl::StrCat("cannot read ", path));
    }
    return std::move(buffer).str();
}

constexpr absl::string_view kLayoutMagic = "einsummable-weights-layout 1";
constexpr absl::string_view kLayoutExtension = ".layout";

} // namespace

absl::StatusOr<PruneReport> PlanStore::save(const PlanKey& key, const runtime::Plan& plan) {
    if (directory_.empty()) {
        return PruneReport{};
    }
    const std::string payload = plan.record();
    const std::string content =
        absl::StrCat(kMagic, " ", kFormatVersion, "\n", "key ", absl::CEscape(key.to_string()),
                     "\n", "checksum ", hex(fnv1a(payload)), "\n", payload);
    EINSUMMABLE_RETURN_IF_ERROR(write_atomically(path_for(key), content));
    touch(file_name(key));
    return prune({key});
}

std::string PlanStore::layout_path(const std::string& identity) const {
    return (std::filesystem::path(directory_) /
            absl::StrCat(hex(fnv1a(identity)), kLayoutExtension))
        .string();
}

absl::Status PlanStore::save_layout(const std::string& identity, absl::string_view content) {
    if (directory_.empty()) {
        return absl::OkStatus();
    }
    return write_atomically(layout_path(identity),
                            absl::StrCat(kLayoutMagic, "\n", "identity ", absl::CEscape(identity),
                                         "\n", "checksum ", hex(fnv1a(content)), "\n", content));
}

absl::StatusOr<std::string> PlanStore::load_layout(const std::string& identity) const {
    if (directory_.empty()) {
        return absl::NotFoundError("the plan store is disabled (no directory)");
    }
    const std::string path = layout_path(identity);
    EINSUMMABLE_ASSIGN_OR_RETURN(std::string content, read_file(path, "weights layout"));
    absl::string_view rest = content;
    absl::string_view line;
    uint64_t checksum = 0;
    if (!take_line(rest, line) || line != kLayoutMagic || !take_line(rest, line) ||
        line != absl::StrCat("identity ", absl::CEscape(identity)) || !take_line(rest, line) ||
        !absl::StartsWith(line, "checksum ") || line.size() != 25 ||
        !absl::SimpleHexAtoi(line.substr(9), &checksum) || fnv1a(rest) != checksum) {
        return absl::DataLossError(absl::StrCat("weights layout file ", path,
                                                ": not a layout file for ", identity,
                                                ", or corrupt (header, identity or checksum)"));
    }
    return std::string(rest);
}

absl::StatusOr<std::unique_ptr<runtime::Plan>>
PlanStore::load(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
                std::shared_ptr<runtime::Backend> backend) {
    if (directory_.empty()) {
        return absl::NotFoundError("the plan store is disabled (no directory)");
    }
    PlanKey spelled = key;
    absl::StatusOr<std::string> record = read_record(spelled, key.objective);
    // The search objective's plans were stored as objective=time before the time programme
    // took that name.
    if (absl::IsNotFound(record.status()) && key.objective == "search") {
        spelled.objective = "time";
        record = read_record(spelled, key.objective);
    }
    EINSUMMABLE_RETURN_IF_ERROR(record.status());
    const std::string path = path_for(spelled);
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        runtime::Plan::restore(std::move(graph), options, *record, std::move(backend));
    if (!plan.ok() && !absl::IsResourceExhausted(plan.status()) &&
        !absl::IsUnavailable(plan.status())) {
        return absl::DataLossError(absl::StrCat(
            "plan file ", path, ": the stored plan does not fit: ", plan.status().message()));
    }
    if (plan.ok()) {
        // A use: the mtime orders files for pruning across restarts. A read-only directory
        // refuses it; the in-process order still counts the use.
        ::utimensat(AT_FDCWD, path.c_str(), nullptr, 0);
        touch(file_name(spelled));
    }
    return plan;
}

absl::StatusOr<std::string> PlanStore::read_record(const PlanKey& key,
                                                   const std::string& objective) const {
    const std::string path = path_for(key);
    EINSUMMABLE_ASSIGN_OR_RETURN(const std::string content,
                                 read_file(path, absl::StrCat("plan for ", key.to_string())));
    auto data_loss = [&](absl::string_view why) {
        return absl::DataLossError(absl::StrCat("plan file ", path, ": ", why));
    };

    absl::string_view rest = content;
    absl::string_view line;
    const std::string header = absl::StrCat(kMagic, " ", kFormatVersion);
    if (!take_line(rest, line) || line != header) {
        if (!absl::StartsWith(line, absl::StrCat(kMagic, " "))) {
            return data_loss(absl::StrCat("not a plan file (bad magic; expected '", header, "')"));
        }
        return data_loss(absl::StrCat("format version '", line.substr(kMagic.size() + 1),
                                      "'; this build reads ", kFormatVersion));
    }
    const std::string key_line = absl::StrCat("key ", absl::CEscape(key.to_string()));
    if (!take_line(rest, line)) {
        return data_loss("truncated before its key");
    }
    if (line != key_line) {
        return data_loss(absl::StrCat("stale: stored for another key ('", line.substr(0, 400),
                                      "'; expected '", key_line, "')"));
    }
    uint64_t checksum = 0;
    if (!take_line(rest, line) || !absl::StartsWith(line, "checksum ") || line.size() != 25 ||
        !absl::SimpleHexAtoi(line.substr(9), &checksum)) {
        return data_loss("no valid checksum line");
    }
    if (fnv1a(rest) != checksum) {
        return data_loss(absl::StrCat("checksum mismatch (stored ", hex(checksum), ", payload ",
                                      hex(fnv1a(rest)), "): the file is corrupt or truncated"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(check_stored_objective(key, objective, rest, path));
    return std::string(rest);
}

PruneReport PlanStore::prune(const std::vector<PlanKey>& keep) {
    PruneReport report;
    if (directory_.empty()) {
        return report;
    }
    std::set<std::string> kept;
    for (const PlanKey& key : keep) {
        kept.insert(file_name(key));
    }
    KeysInUse keys_in_use;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        keys_in_use = keys_in_use_;
    }
    // Asked without the store's lock: the callback takes the plan cache's.
    if (max_bytes_ > 0 && keys_in_use) {
        for (const PlanKey& key : keys_in_use()) {
            kept.insert(file_name(key));
        }
    }
    std::lock_guard<std::mutex> lock(mutex_);

    struct File {
        std::string name;
        int64_t bytes = 0;
        std::tuple<int64_t, int64_t, uint64_t> recency; // mtime s, mtime ns, last use here
    };
    std::vector<File> files;
    std::error_code error;
    for (std::filesystem::directory_iterator it(directory_, error), end; !error && it != end;
         it.increment(error)) {
        const std::string name = it->path().filename().string();
        if (!is_plan_file_name(name)) {
            continue;
        }
        struct stat info {};
        if (::stat(it->path().c_str(), &info) != 0) {
            if (errno != ENOENT) { // removed meanwhile (another daemon on the directory)
                report.errors.push_back(absl::StrCat(name, ": ", std::strerror(errno)));
            }
            continue;
        }
        if (!S_ISREG(info.st_mode)) {
            continue;
        }
        auto use = last_use_.find(name);
        files.push_back(File{
            name,
            static_cast<int64_t>(info.st_size),
            {info.st_mtim.tv_sec, info.st_mtim.tv_nsec, use == last_use_.end() ? 0 : use->second}});
        report.bytes += files.back().bytes;
    }
    if (error) {
        report.errors.push_back(absl::StrCat("listing ", directory_, ": ", error.message()));
    }
    report.files = static_cast<int64_t>(files.size());
    if (max_bytes_ == 0 || report.bytes <= max_bytes_) {
        return report;
    }

    // Least recently used first; equal times by name, so the order is the same on every run.
    std::sort(files.begin(), files.end(), [](const File& a, const File& b) {
        return std::tie(a.recency, a.name) < std::tie(b.recency, b.name);
    });
    for (const File& file : files) {
        if (report.bytes <= max_bytes_) {
            break;
        }
        if (kept.count(file.name)) {
            continue;
        }
        const std::string path = (std::filesystem::path(directory_) / file.name).string();
        if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
            report.errors.push_back(
                absl::StrCat("cannot remove ", path, ": ", std::strerror(errno)));
            continue;
        }
        report.removed.push_back(file.name);
        report.removed_bytes += file.bytes;
        report.bytes -= file.bytes;
        --report.files;
        last_use_.erase(file.name);
    }
    return report;
}

int64_t PlanStore::file_count() const {
    if (directory_.empty()) {
        return 0;
    }
    int64_t count = 0;
    std::error_code error;
    for (std::filesystem::directory_iterator it(directory_, error), end; !error && it != end;
         it.increment(error)) {
        if (it->is_regular_file(error) && is_plan_file_name(it->path().filename().string())) {
            ++count;
        }
    }
    return count;
}

} // namespace einsummable::server
