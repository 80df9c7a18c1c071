// server::PlanStore: plans saved to a directory load back as the same plan; a missing file is
// NotFound; a corrupt, truncated or foreign file is DataLoss naming why, never trusted. With a
// byte cap, saves prune the least recently used plan files (a load is a use), never a plan in
// use, never a file that is not the store's own.
//
// A key whose version (or any other field) changed names another file (the file name is a hash
// of PlanKey::to_string), so the old file is simply not found: NotFound. The old file stays in
// the directory until the daemon saves over it or an operator clears the directory. A file
// whose key line differs from the key asked for (copied or renamed by hand, or a hash
// collision) is DataLoss.

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <vector>

#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/plan_record.h"
#include "compiler/workloads/by_name.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/plan.h"
#include "server/plan_store.h"

namespace einsummable::server {
namespace {

using ::testing::HasSubstr;

const char* const kWorkload = "ffn:tokens=48,d_model=16,d_ff=40";

ir::Graph build() {
    absl::StatusOr<ir::Graph> graph = workloads::by_name(kWorkload);
    EXPECT_TRUE(graph.ok()) << graph.status();
    return graph.ok() ? *std::move(graph) : ir::Graph();
}

// The bytes objective's, as key() says (the daemon keys a plan by the options it compiles with).
runtime::CompileOptions options() {
    runtime::CompileOptions options;
    options.objective = logical::Objective::bytes;
    options.devices = 4;
    options.schedule = exprog::SynthesisMode::optimized;
    options.synthesis_iterations = 20;
    return options;
}

// A CPU backend as large as options() asks for.
std::shared_ptr<runtime::Backend> backend() {
    return runtime::cpu::make_cpu_backend({options().devices, 1});
}

PlanKey key() {
    PlanKey key;
    key.model = "ffn";
    key.graph_fingerprint = "0123abcd";
    key.dims = {{"tokens", 48}, {"d_model", 16}};
    key.devices = 4;
    key.planner = "dp";
    key.seed = 0;
    key.schedule = "optimized";
    key.synthesis_iterations = 600;
    key.topology = "dgx-a100";
    key.version = "0.1.0";
    return key;
}

// A fresh directory per test and process: ctest -j runs the tests of this file as separate
// processes at once, and two that share a name must not share a directory.
std::string fresh_directory(absl::string_view name) {
    const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) /
                                       absl::StrCat("plan_store_test_", name, "_", ::getpid());
    std::filesystem::remove_all(path);
    return path.string();
}

std::unique_ptr<PlanStore> open_store(const std::string& directory) {
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::open(directory);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
}

std::unique_ptr<runtime::Plan> compile() {
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        runtime::Plan::compile(build(), options(), backend());
    EXPECT_TRUE(plan.ok()) << plan.status();
    return plan.ok() ? *std::move(plan) : nullptr;
}

absl::StatusOr<std::unique_ptr<runtime::Plan>> load(PlanStore& store, const PlanKey& plan_key) {
    return store.load(plan_key, build(), options(), backend());
}

// The single plan file in `directory`.
std::filesystem::path only_file(const std::string& directory) {
    std::vector<std::filesystem::path> files;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
        files.push_back(entry.path());
    }
    EXPECT_EQ(files.size(), 1u);
    return files.empty() ? std::filesystem::path() : files.front();
}

std::string read(const std::filesystem::path& path) {
    std::ifstream file(path, std::ios::binary);
    std::ostringstream text;
    text << file.rdbuf();
    return text.str();
}

void write(const std::filesystem::path& path, const std::string& content) {
    std::ofstream file(path, std::ios::binary | std::ios::trunc);
    file << content;
}

TEST(PlanKey, ToStringIsOneStableLine) {
    EXPECT_EQ(key().to_string(),
              "model=ffn graph=0123abcd dims=d_model:16,tokens:48 devices=4 planner=dp seed=0 "
              "schedule=optimized synthesis_iterations=600 topology=dgx-a100 version=0.1.0");
}

TEST(PlanKey, AnObjectiveOtherThanBytesFollowsThePlanner) {
    PlanKey by_time = key();
    by_time.objective = "time";
    EXPECT_EQ(by_time.to_string(),
              "model=ffn graph=0123abcd dims=d_model:16,tokens:48 devices=4 planner=dp "
              "objective=time seed=0 schedule=optimized synthesis_iterations=600 "
              "topology=dgx-a100 version=0.1.0");
    EXPECT_NE(by_time, key());
    PlanKey by_search = key();
    by_search.objective = "search";
    EXPECT_EQ(by_search.to_string(),
              "model=ffn graph=0123abcd dims=d_model:16,tokens:48 devices=4 planner=dp "
              "objective=search seed=0 schedule=optimized synthesis_iterations=600 "
              "topology=dgx-a100 version=0.1.0");
    // The bytes objective's keys are spelled as the cost objective's were, and as before
    // objectives: the files of those servers are found under them.
    PlanKey named_bytes = key();
    named_bytes.objective = "bytes";
    EXPECT_EQ(named_bytes, key());
    EXPECT_EQ(key().to_string().find("objective"), std::string::npos);
}

// A plan of each objective is stored under its own key (its own file) and restores from its
// decisions alone, its record naming the objective.
TEST(PlanStore, EachObjectivesPlansHaveTheirOwnFile) {
    const std::string directory = fresh_directory("objective");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);
    for (logical::Objective objective : {logical::Objective::time, logical::Objective::search}) {
        const std::string name(logical::objective_name(objective));
        SCOPED_TRACE(name);
        runtime::CompileOptions by_objective = options();
        by_objective.objective = objective;
        absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
            runtime::Plan::compile(build(), by_objective, backend());
        ASSERT_TRUE(plan.ok()) << plan.status();
        EXPECT_THAT((*plan)->record(), HasSubstr(absl::StrCat(" objective ", name, " predicted ")));
        PlanKey objective_key = key();
        objective_key.objective = name;
        ASSERT_TRUE(store->save(objective_key, **plan).ok());
        absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded =
            store->load(objective_key, build(), by_objective, backend());
        ASSERT_TRUE(loaded.ok()) << loaded.status();
        EXPECT_EQ((*loaded)->record(), (*plan)->record());
        EXPECT_EQ((*loaded)->logical_plan().objective->objective, objective);
    }
    EXPECT_EQ(load(*store, key()).status().code(), absl::StatusCode::kNotFound);
    std::unique_ptr<runtime::Plan> by_bytes = compile();
    ASSERT_NE(by_bytes, nullptr);
    ASSERT_TRUE(store->save(key(), *by_bytes).ok());
    EXPECT_EQ(store->file_count(), 3);
}

// The FNV-1a hash the store checksums a payload with ("%016x").
std::string checksum(absl::string_view bytes) {
    uint64_t hash = 14695981039346656037ull;
    for (char c : bytes) {
        hash ^= static_cast<unsigned char>(c);
        hash *= 1099511628211ull;
    }
    return absl::StrFormat("%016x", hash);
}

// Rewrites the store's file for `spelled` as a server before objectives were renamed wrote it:
// the same key line, a record whose plan line names no objective.
void make_legacy(const PlanStore& store, const PlanKey& spelled) {
    const std::filesystem::path path =
        std::filesystem::path(store.directory()) / PlanStore::file_name(spelled);
    const std::string content = read(path);
    const size_t payload_at = content.find('\n', content.find("\nchecksum ") + 1) + 1;
    const std::string head = content.substr(0, content.find("\nchecksum ") + 1);
    std::string payload = content.substr(payload_at);
    const size_t named = payload.find(" objective ");
    ASSERT_NE(named, std::string::npos) << payload.substr(0, 200);
    payload.erase(named, payload.find('\n', named) - named);
    ASSERT_FALSE(physical::recorded_objective(payload)->has_value());
    write(path, absl::StrCat(head, "checksum ", checksum(payload), "\n", payload));
}

// Plans stored before the objectives were renamed: "cost" (keyed without objective=) is the
// bytes objective, "objective=time" was the search. Both are found for the objective that made
// them; the time objective, whose key is spelled like the old search's, never gets an old
// search plan.
TEST(PlanStore, PlansStoredUnderTheOldNamesAreFoundForTheirObjective) {
    const std::string directory = fresh_directory("legacy");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);

    // A cost plan of an old server: found by the bytes objective's key.
    std::unique_ptr<runtime::Plan> by_bytes = compile();
    ASSERT_NE(by_bytes, nullptr);
    ASSERT_TRUE(store->save(key(), *by_bytes).ok());
    make_legacy(*store, key());
    absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, key());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->exec_graph().to_string(), by_bytes->exec_graph().to_string());
    EXPECT_EQ((*loaded)->logical_plan().objective->objective, logical::Objective::bytes);

    // An "objective=time" plan of an old server (the search's): found by the search's key.
    runtime::CompileOptions search = options();
    search.objective = logical::Objective::search;
    absl::StatusOr<std::unique_ptr<runtime::Plan>> by_search =
        runtime::Plan::compile(build(), search, backend());
    ASSERT_TRUE(by_search.ok()) << by_search.status();
    PlanKey old_time = key();
    old_time.objective = "time";
    ASSERT_TRUE(store->save(old_time, **by_search).ok());
    make_legacy(*store, old_time);
    PlanKey search_key = key();
    search_key.objective = "search";
    loaded = store->load(search_key, build(), search, backend());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->exec_graph().to_string(), (*by_search)->exec_graph().to_string());
    EXPECT_EQ((*loaded)->logical_plan().objective->objective, logical::Objective::search);

    // The time objective's key is spelled alike: it finds that file, and refuses it.
    runtime::CompileOptions time = options();
    time.objective = logical::Objective::time;
    loaded = store->load(old_time, build(), time, backend());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
    EXPECT_THAT(loaded.status().message(), HasSubstr("holds a plan of the search objective"));

    // Once the time objective's plan replaces it (its record names it), the search no longer
    // finds a plan there.
    absl::StatusOr<std::unique_ptr<runtime::Plan>> by_time =
        runtime::Plan::compile(build(), time, backend());
    ASSERT_TRUE(by_time.ok()) << by_time.status();
    ASSERT_TRUE(store->save(old_time, **by_time).ok());
    EXPECT_TRUE(store->load(old_time, build(), time, backend()).ok());
    loaded = store->load(search_key, build(), search, backend());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
    EXPECT_THAT(loaded.status().message(), HasSubstr("holds a plan of the time objective"));
}

TEST(PlanStore, SavesAndLoadsTheSamePlan) {
    const std::string directory = fresh_directory("round_trip");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);
    EXPECT_EQ(store->directory(), directory);
    EXPECT_TRUE(std::filesystem::is_directory(directory)); // created by open()
    EXPECT_EQ(store->file_count(), 0);
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    ASSERT_TRUE(store->save(key(), *plan).ok());
    EXPECT_EQ(store->file_count(), 1);
    const std::filesystem::path file = only_file(directory);
    EXPECT_EQ(file.extension(), ".plan");
    EXPECT_THAT(read(file), ::testing::StartsWith(absl::StrCat("einsummable-plan-cache 1\nkey ",
                                                               key().to_string(), "\nchecksum ")));

    absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, key());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ((*loaded)->exec_graph().to_string(), plan->exec_graph().to_string());
    EXPECT_EQ((*loaded)->record(), plan->record());

    // A second store on the same directory (a restarted daemon) sees it too; saving again
    // replaces the file.
    std::unique_ptr<PlanStore> again = open_store(directory);
    ASSERT_NE(again, nullptr);
    EXPECT_EQ(again->file_count(), 1);
    EXPECT_TRUE(load(*again, key()).ok());
    ASSERT_TRUE(again->save(key(), *plan).ok());
    EXPECT_EQ(again->file_count(), 1);

    PlanKey other = key();
    other.model = "other";
    ASSERT_TRUE(again->save(other, *plan).ok());
    EXPECT_EQ(again->file_count(), 2);
}

TEST(PlanStore, MissingKeyIsNotFound) {
    std::unique_ptr<PlanStore> store = open_store(fresh_directory("missing"));
    ASSERT_NE(store, nullptr);
    absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, key());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
}

TEST(PlanStore, CorruptByteIsDataLossNamingTheChecksum) {
    const std::string directory = fresh_directory("corrupt");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    ASSERT_TRUE(store->save(key(), *plan).ok());
    const std::filesystem::path file = only_file(directory);
    std::string content = read(file);
    content[content.size() - content.size() / 3] ^= 0x04; // inside the payload
    write(file, content);
    absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, key());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << loaded.status();
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("checksum"));

    // Saving again repairs it.
    ASSERT_TRUE(store->save(key(), *plan).ok());
    EXPECT_TRUE(load(*store, key()).ok());
}

TEST(PlanStore, TruncatedFileIsDataLoss) {
    const std::string directory = fresh_directory("truncated");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    ASSERT_TRUE(store->save(key(), *plan).ok());
    const std::filesystem::path file = only_file(directory);
    const std::string content = read(file);
    for (size_t size :
         {size_t{0}, size_t{10}, size_t{30}, content.size() / 2, content.size() - 1}) {
        write(file, content.substr(0, size));
        absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, key());
        EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss)
            << size << ": " << loaded.status();
    }
}

TEST(PlanStore, ForeignAndStaleFilesAreRefused) {
    const std::string directory = fresh_directory("stale");
    std::unique_ptr<PlanStore> store = open_store(directory);
    ASSERT_NE(store, nullptr);
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    ASSERT_TRUE(store->save(key(), *plan).ok());
    const std::filesystem::path file = only_file(directory);
    const std::string content = read(file);

    // Another server version: another file name, so the old file is not found.
    PlanKey newer = key();
    newer.version = "0.2.0";
    EXPECT_EQ(load(*store, newer).status().code(), absl::StatusCode::kNotFound);

    // The old file under the new key's name (a hash collision, or copied by hand): its key
    // line says it is stale.
    ASSERT_TRUE(store->save(newer, *plan).ok());
    EXPECT_EQ(store->file_count(), 2);
    std::filesystem::path newer_file;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
        if (entry.path() != file) {
            newer_file = entry.path();
        }
    }
    write(newer_file, content);
    absl::StatusOr<std::unique_ptr<runtime::Plan>> loaded = load(*store, newer);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("stale"));

    // Another file format version, and not a plan file at all.
    write(file, absl::StrCat("einsummable-plan-cache 2", content.substr(content.find('\n'))));
    loaded = load(*store, key());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("version"));
    write(file, "GIF89a\n");
    loaded = load(*store, key());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("magic"));

    // A valid file for another graph under this key (the model changed without its
    // fingerprint): the record does not fit the graph.
    write(file, content);
    absl::StatusOr<ir::Graph> other = workloads::by_name("ffn:tokens=48,d_model=16,d_ff=48");
    ASSERT_TRUE(other.ok());
    loaded = store->load(key(), *std::move(other), options(), backend());
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(std::string(loaded.status().message()), HasSubstr("operator '"));
}

TEST(PlanStore, EmptyDirectoryDisablesTheStore) {
    std::unique_ptr<PlanStore> store = open_store("");
    ASSERT_NE(store, nullptr);
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    EXPECT_TRUE(store->save(key(), *plan).ok());
    EXPECT_EQ(load(*store, key()).status().code(), absl::StatusCode::kNotFound);
    EXPECT_EQ(store->file_count(), 0);
}

// The same plan saved under "m0", "m1", ...: files of equal size.
PlanKey key_named(int index) {
    PlanKey named = key();
    named.model = absl::StrCat("m", index);
    return named;
}

std::set<std::string> file_names(const std::string& directory) {
    std::set<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
        names.insert(entry.path().filename().string());
    }
    return names;
}

// The bytes of one plan file of key_named(i) for `plan`.
int64_t file_bytes(const runtime::Plan& plan) {
    const std::string directory = fresh_directory("measure");
    std::unique_ptr<PlanStore> store = open_store(directory);
    EXPECT_TRUE(store->save(key_named(0), plan).ok());
    return static_cast<int64_t>(std::filesystem::file_size(only_file(directory)));
}

std::unique_ptr<PlanStore> open_capped(const std::string& directory, int64_t max_bytes) {
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::open(directory, max_bytes);
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
}

TEST(PlanStorePrune, EvictsTheLeastRecentlySavedFirst) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const int64_t bytes = file_bytes(*plan);
    const std::string directory = fresh_directory("prune_order");
    std::unique_ptr<PlanStore> store = open_capped(directory, 3 * bytes);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 3; ++i) {
        absl::StatusOr<PruneReport> report = store->save(key_named(i), *plan);
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_TRUE(report->removed.empty());
        EXPECT_EQ(report->files, i + 1);
        EXPECT_EQ(report->bytes, (i + 1) * bytes);
    }
    absl::StatusOr<PruneReport> report = store->save(key_named(3), *plan);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_THAT(report->removed, ::testing::ElementsAre(PlanStore::file_name(key_named(0))));
    EXPECT_EQ(report->removed_bytes, bytes);
    EXPECT_EQ(report->files, 3);
    EXPECT_EQ(report->bytes, 3 * bytes);
    EXPECT_TRUE(report->errors.empty());
    EXPECT_EQ(load(*store, key_named(0)).status().code(), absl::StatusCode::kNotFound);
    EXPECT_TRUE(load(*store, key_named(3)).ok());
}

TEST(PlanStorePrune, ALoadCountsAsAUse) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const int64_t bytes = file_bytes(*plan);
    const std::string directory = fresh_directory("prune_load");
    std::unique_ptr<PlanStore> store = open_capped(directory, 3 * bytes);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 3; ++i) {
        ASSERT_TRUE(store->save(key_named(i), *plan).ok());
    }
    ASSERT_TRUE(load(*store, key_named(0)).ok()); // m0 is now the most recent: m1 goes first
    absl::StatusOr<PruneReport> report = store->save(key_named(3), *plan);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_THAT(report->removed, ::testing::ElementsAre(PlanStore::file_name(key_named(1))));
    EXPECT_TRUE(load(*store, key_named(0)).ok());
}

// A restarted daemon has no memory of the uses: the files' mtimes order them, and a load sets
// its file's mtime.
TEST(PlanStorePrune, ModificationTimesOrderFilesAfterARestart) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const int64_t bytes = file_bytes(*plan);
    const std::string directory = fresh_directory("prune_restart");
    {
        std::unique_ptr<PlanStore> first = open_capped(directory, 0);
        for (int i = 0; i < 4; ++i) {
            ASSERT_TRUE(first->save(key_named(i), *plan).ok());
        }
    }
    // Oldest to newest: m2, m0, m3, m1.
    const auto now = std::filesystem::file_time_type::clock::now();
    const int order[] = {2, 0, 3, 1};
    for (int rank = 0; rank < 4; ++rank) {
        std::filesystem::last_write_time(std::filesystem::path(directory) /
                                             PlanStore::file_name(key_named(order[rank])),
                                         now - std::chrono::hours(10 - rank));
    }
    std::unique_ptr<PlanStore> second = open_capped(directory, 2 * bytes);
    ASSERT_NE(second, nullptr);
    EXPECT_EQ(second->file_count(), 4); // open() does not prune
    PruneReport report = second->prune();
    EXPECT_THAT(report.removed, ::testing::ElementsAre(PlanStore::file_name(key_named(2)),
                                                       PlanStore::file_name(key_named(0))));
    EXPECT_EQ(report.files, 2);

    // A load refreshes the mtime on disk, so a third store evicts m1 before m3.
    ASSERT_TRUE(load(*second, key_named(3)).ok());
    const std::filesystem::file_time_type loaded = std::filesystem::last_write_time(
        std::filesystem::path(directory) / PlanStore::file_name(key_named(3)));
    EXPECT_GT(loaded, now - std::chrono::minutes(1));
    std::unique_ptr<PlanStore> third = open_capped(directory, bytes);
    ASSERT_NE(third, nullptr);
    EXPECT_THAT(third->prune().removed, ::testing::ElementsAre(PlanStore::file_name(key_named(1))));
    EXPECT_TRUE(load(*third, key_named(3)).ok());
}

TEST(PlanStorePrune, PlansInUseAndThePlanJustSavedAreNeverEvicted) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const int64_t bytes = file_bytes(*plan);
    const std::string directory = fresh_directory("prune_in_use");
    std::unique_ptr<PlanStore> store = open_capped(directory, 2 * bytes);
    ASSERT_NE(store, nullptr);
    std::vector<PlanKey> in_use = {key_named(0)};
    store->set_keys_in_use([&in_use] { return in_use; });
    for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(store->save(key_named(i), *plan).ok());
    }
    // m0 (in use) and m3 (just saved) are the two left.
    EXPECT_EQ(file_names(directory), (std::set<std::string>{PlanStore::file_name(key_named(0)),
                                                            PlanStore::file_name(key_named(3))}));

    // In use beyond the cap: the store stays over it rather than evict one, and says so.
    in_use = {key_named(0), key_named(3)};
    absl::StatusOr<PruneReport> report = store->save(key_named(4), *plan);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->removed.empty());
    EXPECT_EQ(report->files, 3);
    EXPECT_GT(report->bytes, store->max_bytes());
    EXPECT_EQ(store->file_count(), 3);

    // Once they are no longer in use the next save brings the store under its cap.
    in_use = {};
    report = store->save(key_named(5), *plan);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->removed.size(), 2u);
    EXPECT_EQ(report->bytes, 2 * bytes);
}

TEST(PlanStorePrune, TheCapHoldsAfterEverySaveAndForeignFilesAreLeftAlone) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const int64_t bytes = file_bytes(*plan);
    const std::string directory = fresh_directory("prune_foreign");
    std::filesystem::create_directories(directory);
    // Not the store's: other names, a temporary file of a crashed save, a directory with a plan
    // file's name. Large, and older than every plan.
    const std::string big(4 * bytes, 'x');
    const std::vector<std::string> foreign = {"notes.txt", "README.plan", "0123.plan",
                                              "0123456789ABCDEF.plan",
                                              "0123456789abcdef.plan.tmp.1.0"};
    for (const std::string& name : foreign) {
        write(std::filesystem::path(directory) / name, big);
        std::filesystem::last_write_time(std::filesystem::path(directory) / name,
                                         std::filesystem::file_time_type::clock::now() -
                                             std::chrono::hours(24));
    }
    std::filesystem::create_directory(std::filesystem::path(directory) / "fedcba9876543210.plan");

    const int64_t cap = 5 * bytes / 2; // room for two files
    std::unique_ptr<PlanStore> store = open_capped(directory, cap);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 6; ++i) {
        absl::StatusOr<PruneReport> report = store->save(key_named(i), *plan);
        ASSERT_TRUE(report.ok()) << report.status();
        EXPECT_LE(report->bytes, cap) << i;
        EXPECT_EQ(report->files, std::min(i + 1, 2)) << i;
        EXPECT_LE(store->file_count(), 2);
    }
    std::set<std::string> left = file_names(directory);
    for (const std::string& name : foreign) {
        EXPECT_TRUE(left.count(name)) << name;
        EXPECT_EQ(std::filesystem::file_size(std::filesystem::path(directory) / name), big.size());
    }
    EXPECT_TRUE(
        std::filesystem::is_directory(std::filesystem::path(directory) / "fedcba9876543210.plan"));
    EXPECT_TRUE(left.count(PlanStore::file_name(key_named(4))));
    EXPECT_TRUE(left.count(PlanStore::file_name(key_named(5))));
    EXPECT_EQ(left.size(), foreign.size() + 3);
}

TEST(PlanStorePrune, NoCapRemovesNothing) {
    std::unique_ptr<runtime::Plan> plan = compile();
    ASSERT_NE(plan, nullptr);
    const std::string directory = fresh_directory("prune_none");
    std::unique_ptr<PlanStore> store = open_capped(directory, 0);
    ASSERT_NE(store, nullptr);
    for (int i = 0; i < 5; ++i) {
        absl::StatusOr<PruneReport> report = store->save(key_named(i), *plan);
        ASSERT_TRUE(report.ok());
        EXPECT_TRUE(report->removed.empty());
        EXPECT_EQ(report->files, i + 1);
    }
    EXPECT_EQ(store->file_count(), 5);
    EXPECT_FALSE(PlanStore::open(directory, -1).ok());
}

TEST(PlanStore, OpenFailsOnAFile) {
    const std::string directory = fresh_directory("not_a_directory");
    write(directory, "a file");
    EXPECT_FALSE(PlanStore::open(directory).ok());
    std::filesystem::remove(directory);
}

} // namespace
} // namespace einsummable::server
