#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/ir/graph.h"
#include "runtime/backend.h"
#include "runtime/plan.h"

namespace einsummable::server {

// What identifies a compiled plan (DESIGN.md "server": model, bound dimensions, devices,
// options, topology, version). graph_fingerprint is a hash of the model's GraphDef bytes, so a
// model re-registered with a different graph never meets the old plans.
struct PlanKey {
    std::string model;
    std::string graph_fingerprint;
    std::map<std::string, int64_t> dims;
    int devices = 1;
    std::string planner; // "dp", "greedy", "random", or a baseline's name
    // "cost" or "time" (runtime::CompileOptions::objective): the two objectives' plans of one
    // shape differ, so they never share an entry, in memory or on disk.
    std::string objective = "cost";
    uint64_t seed = 0;
    std::string schedule;         // "naive", "optimized"
    int synthesis_iterations = 0; // the synthesis budget (runtime::CompileOptions)
    std::string topology;         // the topology's name
    std::string version;          // the server's version (EINSUMMABLE_VERSION)

    // One line, stable: "model=m graph=ab12.. dims=tokens:64 devices=4 planner=dp seed=0
    // schedule=optimized synthesis_iterations=600 topology=dgx-a100 version=0.1.0". An objective
    // other than cost follows the planner ("planner=dp objective=time seed=0 ..."), so the keys
    // (and plan file names) of cost plans are those of servers that had no objectives.
    std::string to_string() const;
    friend bool operator==(const PlanKey&, const PlanKey&) = default;
    friend auto operator<=>(const PlanKey&, const PlanKey&) = default;
};

// Compiled plans persisted in a directory, one file per key, so a restarted daemon does not
// recompile (docs/server.md, "Plan cache"). A file holds a format version, the key, a checksum
// of the payload and the payload: the plan's decisions (each operator's intervals, each
// exchange program and its membership), never code. load() rebuilds the plan from them without
// running the optimiser or the synthesis, and checks them against the graph as it goes.
// Files are written to a temporary name and renamed, so a crash never leaves half a file.
class PlanStore {
public:
    // An empty directory disables the store (load is always NotFound, save does nothing). The
    // directory is created when missing.
    static absl::StatusOr<std::unique_ptr<PlanStore>> open(std::string directory);

    absl::Status save(const PlanKey& key, const runtime::Plan& plan);

    // NotFound: no file for the key. DataLoss: a file exists but is corrupt (checksum, syntax),
    // stale (other format version or key) or does not fit the graph; the caller recompiles and
    // save() overwrites it. Otherwise the plan, prepared on `backend`.
    absl::StatusOr<std::unique_ptr<runtime::Plan>> load(const PlanKey& key, ir::Graph graph,
                                                        const runtime::CompileOptions& options,
                                                        std::shared_ptr<runtime::Backend> backend);

    // Number of plan files in the directory (for the daemon's start-up log and metrics).
    int64_t file_count() const;
    const std::string& directory() const { return directory_; }

private:
    explicit PlanStore(std::string directory) : directory_(std::move(directory)) {}
    std::string path_for(const PlanKey& key) const;
    std::string directory_;
};

} // namespace einsummable::server
