#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "compiler/ir/graph.h"
#include "runtime/backend.h"
#include "runtime/plan.h"
#include "server/metrics.h"
#include "server/plan_store.h"

namespace einsummable::server {

// Where compiled plans outlive the process: the engine's view of server::PlanStore, behind an
// interface so the engine and its tests run with or without a store.
class PlanPersistence {
public:
    virtual ~PlanPersistence() = default;
    // NotFound: nothing stored for the key. DataLoss: something stored but unusable (the caller
    // logs it and recompiles). Otherwise the plan, prepared on `backend`.
    virtual absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
         std::shared_ptr<runtime::Backend> backend) = 0;
    // A failure is the write's (the caller logs it); pruning after it never fails a save.
    virtual absl::Status save(const PlanKey& key, const runtime::Plan& plan) = 0;
    // A model's weights layout (PlanStore::save_layout / load_layout). Without a store, saving
    // does nothing and loading is NotFound.
    virtual absl::Status save_layout(const std::string& /*identity*/,
                                     absl::string_view /*content*/) {
        return absl::OkStatus();
    }
    virtual absl::StatusOr<std::string> load_layout(const std::string& identity) const {
        return absl::NotFoundError(absl::StrCat("no plan store (", identity, ")"));
    }
    // Called once by the Engine's constructor: which plans are in use (the plan cache's keys;
    // a store never evicts their files) and where the store's size goes (null: nowhere).
    virtual void attach(PlanStore::KeysInUse /*keys_in_use*/,
                        std::shared_ptr<Metrics> /*metrics*/) {}
    // For the start-up log: "memory only", "directory /var/cache/einsummable (12 plans, at most
    // 1073741824 bytes)".
    virtual std::string describe() const = 0;
};

// Loads nothing, saves nothing.
std::unique_ptr<PlanPersistence> make_memory_only_persistence();

// The plan store in `directory` (server::PlanStore::open, which creates it when missing), its
// plan files capped at `max_bytes` in all (0 = no cap; --plan_cache_max_bytes); memory only for
// an empty directory. Prunes once at open, logging what it removed.
absl::StatusOr<std::unique_ptr<PlanPersistence>> open_plan_persistence(const std::string& directory,
                                                                       int64_t max_bytes = 0);

} // namespace einsummable::server
