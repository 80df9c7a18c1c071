#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "runtime/backend.h"
#include "runtime/plan.h"

namespace einsummable::server {

// What identifies a compiled plan (docs/design.md "Server": model, bound dimensions, devices,
// options, topology, version). graph_fingerprint is a hash of the model's GraphDef bytes, so a
// model re-registered with a different graph never meets the old plans.
struct PlanKey {
    std::string model;
    std::string graph_fingerprint;
    std::map<std::string, int64_t> dims;
    int devices = 1;
    std::string planner; // "dp", "greedy", "random", or a baseline's name
    // "bytes", "time" or "search": the objective the planner plans by
    // (logical::planned_objective of runtime::CompileOptions::objective; bytes for every planner
    // but dp). The objectives' plans of one shape differ, so they never share an entry, in
    // memory or on disk.
    std::string objective = "bytes";
    uint64_t seed = 0;
    std::string schedule;         // "naive", "optimized"
    int synthesis_iterations = 0; // the synthesis budget (runtime::CompileOptions)
    std::string topology;         // the topology's name
    // Bytes per device the plan had to fit in (runtime::CompileOptions::device_memory_bytes);
    // 0 = unlimited. A plan that does not fit is planned again with its weights sharded, so
    // plans made for different capacities never share an entry.
    int64_t device_memory = 0;
    std::string version; // the server's version (EINSUMMABLE_VERSION)
    // Where the plan reads the model's weights (server/weight_residency.h): "" for a
    // model without weights; "defines" for the plan that lays them out for every plan of the
    // model; "resident:<layout fingerprint>" for a plan that reads that layout in place; "own"
    // for a plan that keeps its own copies (another device count than the layout's).
    std::string weights;
    // A model with batching (server/batcher.h): where the packed sequences of the execution end
    // along the batch dimension (its requests' ends, end to end), given to every attention and
    // rope; such plans are batch-invariant (runtime::CompileOptions::batch_invariant). Empty for
    // other models.
    std::vector<int64_t> sequence_ends;

    // One line, stable: "model=m graph=ab12.. dims=tokens:64 devices=4 planner=dp seed=0
    // schedule=optimized synthesis_iterations=600 topology=dgx-a100 version=0.1.0". An objective
    // other than bytes follows the planner ("planner=dp objective=time seed=0 ..."), so the keys
    // (and plan file names) of bytes plans are those of servers that had no objectives and of
    // servers that called it cost. Servers before the time programme spelled the search
    // objective "objective=time": PlanStore::load tells the two apart by the plan record.
    // " device_memory=<bytes>" follows the topology when a capacity is set, so keys without one
    // are those of servers that had no capacities. " weights=..." ends the line when `weights`
    // is set. " sequences=64*3,16" (the sequences' lengths, a run of one length written once
    // with its count) ends it when `sequence_ends` is set.
    std::string to_string() const;
    friend bool operator==(const PlanKey&, const PlanKey&) = default;
    friend auto operator<=>(const PlanKey&, const PlanKey&) = default;
};

// What one prune did (PlanStore::prune), for the daemon's log and metrics.
struct PruneReport {
    std::vector<std::string> removed; // file names, least recently used first
    int64_t removed_bytes = 0;
    // The store's plan files left, and their bytes.
    int64_t files = 0;
    int64_t bytes = 0;
    // Files that could not be examined or removed, each with why; pruning goes on without them.
    std::vector<std::string> errors;
};

// Compiled plans persisted in a directory, one file per key, so a restarted daemon does not
// recompile (docs/server.md, "Plans and weights"). A file holds a format version, the key, a
// checksum of the payload and the payload: the plan's decisions (each operator's intervals, each
// exchange program and its membership), never code. load() rebuilds the plan from them without
// running the optimiser or the synthesis, and checks them against the graph as it goes.
// Files are written to a temporary name and renamed, so a crash never leaves half a file.
//
// With a byte cap the directory is pruned after every save: the least recently used plan files
// (a save or a successful load is a use; a load sets the file's mtime, so the order outlives
// the process) are removed until the store's files total at most the cap. Never removed: the
// plan just saved, the plans the in-use callback names (the daemon's plans in memory or being
// created), and any file that is not the store's own (its names are 16 hex digits and ".plan";
// temporary files and foreign files are left alone). Pruning never fails a save: what it could
// not do is in the report. Thread-safe. For examples see tests/unit/server/plan_store_test.cc.
class PlanStore {
public:
    // Whose plan files must survive a prune.
    using KeysInUse = std::function<std::vector<PlanKey>()>;

    // An empty directory disables the store (load is always NotFound, save does nothing). The
    // directory is created when missing. `max_bytes`: the cap on the plan files' total size;
    // 0 = no cap. open() does not prune; call prune() (the daemon does, and logs what went).
    static absl::StatusOr<std::unique_ptr<PlanStore>> open(std::string directory,
                                                           int64_t max_bytes = 0);

    // Writes the plan's file, then prunes (keeping this key's file). The status is the write's;
    // the report is the prune's.
    absl::StatusOr<PruneReport> save(const PlanKey& key, const runtime::Plan& plan);

    // NotFound: no file for the key, or only one of another objective that an old server's key
    // spelled alike. DataLoss: a file exists but is corrupt (checksum, syntax), stale (other
    // format version or key) or does not fit the graph; the caller recompiles and save()
    // overwrites it. Otherwise the plan, prepared on `backend`, and the file counts as used just
    // now. Plans stored before the objectives were renamed are found for the objective they
    // were made by: a bytes key finds the old cost plans (keyed alike), a search key the old
    // "objective=time" plans (their records name no objective; a time key refuses them).
    absl::StatusOr<std::unique_ptr<runtime::Plan>> load(const PlanKey& key, ir::Graph graph,
                                                        const runtime::CompileOptions& options,
                                                        std::shared_ptr<runtime::Backend> backend);

    // Removes least recently used plan files until the total is at most the cap (see the class
    // comment), keeping `keep`'s files and the in-use callback's. Without a cap it removes
    // nothing and reports the totals.
    PruneReport prune(const std::vector<PlanKey>& keep = {});
    // Consulted by every prune; unset = nothing in use.
    void set_keys_in_use(KeysInUse keys_in_use);

    // A model's weights layout (server/weight_residency.h) beside the plans, so a
    // restarted daemon lays the weights out as before: `content` under `identity` (the model,
    // its graph and the server version), in "<16 hex>.layout" — small, and never pruned.
    // Nothing happens without a directory.
    absl::Status save_layout(const std::string& identity, absl::string_view content);
    // NotFound: none stored. DataLoss: a file that is not one, for another identity, or corrupt.
    absl::StatusOr<std::string> load_layout(const std::string& identity) const;

    // Number of plan files in the directory (for the daemon's start-up log and metrics).
    int64_t file_count() const;
    const std::string& directory() const { return directory_; }
    int64_t max_bytes() const { return max_bytes_; }
    // The name of the key's file in the directory ("0123456789abcdef.plan").
    static std::string file_name(const PlanKey& key);

private:
    PlanStore(std::string directory, int64_t max_bytes)
        : directory_(std::move(directory)), max_bytes_(max_bytes) {}
    std::string path_for(const PlanKey& key) const;
    // The plan record in the file `key` names, checked (format, key line, checksum) and a plan
    // of `objective` (its record says so, or `key` spells it as servers did before records
    // named objectives); load()'s errors otherwise.
    absl::StatusOr<std::string> read_record(const PlanKey& key, const std::string& objective) const;
    std::string layout_path(const std::string& identity) const;
    // Records a use of the file `name` in this process (orders files whose mtimes are equal:
    // file timestamps are as coarse as the kernel's clock tick).
    void touch(const std::string& name);

    const std::string directory_;
    const int64_t max_bytes_;
    std::mutex mutex_; // guards everything below; held by a prune from its scan to its removals
    KeysInUse keys_in_use_;
    uint64_t uses_ = 0;
    std::map<std::string, uint64_t> last_use_; // file name -> uses_ at its last use
};

} // namespace einsummable::server
