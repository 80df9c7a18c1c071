#include "server/plan_persistence.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

class MemoryOnly final : public PlanPersistence {
public:
    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey& key, ir::Graph, const runtime::CompileOptions&,
         std::shared_ptr<runtime::Backend>) override {
        return absl::NotFoundError(absl::StrCat("no plan store (", key.model, ")"));
    }
    absl::Status save(const PlanKey&, const runtime::Plan&) override { return absl::OkStatus(); }
    std::string describe() const override { return "memory only"; }
};

// Logs a prune: removals at info; what it could not do, and a total over the cap, as warnings.
void log_prune(const PlanStore& store, const PruneReport& report) {
    if (!report.removed.empty()) {
        spdlog::info("plan store {}: removed {} least recently used plan file(s), {} bytes, to "
                     "stay under {} bytes: {}",
                     store.directory(), report.removed.size(), report.removed_bytes,
                     store.max_bytes(), absl::StrJoin(report.removed, ", "));
    }
    for (const std::string& error : report.errors) {
        spdlog::warn("plan store {}: pruning: {}", store.directory(), error);
    }
    if (store.max_bytes() > 0 && report.bytes > store.max_bytes()) {
        spdlog::warn("plan store {}: {} bytes in {} plan file(s), over the cap of {} bytes: the "
                     "plans in use are kept (raise --plan_cache_max_bytes)",
                     store.directory(), report.bytes, report.files, store.max_bytes());
    }
}

class StoreBacked final : public PlanPersistence {
public:
    explicit StoreBacked(std::unique_ptr<PlanStore> store) : store_(std::move(store)) {
        opened_ = store_->prune();
        log_prune(*store_, opened_);
    }

    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
         std::shared_ptr<runtime::Backend> backend) override {
        return store_->load(key, std::move(graph), options, std::move(backend));
    }
    absl::Status save(const PlanKey& key, const runtime::Plan& plan) override {
        EINSUMMABLE_ASSIGN_OR_RETURN(PruneReport report, store_->save(key, plan));
        log_prune(*store_, report);
        if (metrics_) {
            metrics_->plan_store(report.files, report.bytes);
            metrics_->plan_store_evictions(static_cast<int64_t>(report.removed.size()));
        }
        return absl::OkStatus();
    }
    absl::Status save_layout(const std::string& identity, absl::string_view content) override {
        return store_->save_layout(identity, content);
    }
    absl::StatusOr<std::string> load_layout(const std::string& identity) const override {
        return store_->load_layout(identity);
    }
    void attach(PlanStore::KeysInUse keys_in_use, std::shared_ptr<Metrics> metrics) override {
        store_->set_keys_in_use(std::move(keys_in_use));
        metrics_ = std::move(metrics);
        if (metrics_) {
            metrics_->plan_store(opened_.files, opened_.bytes);
            metrics_->plan_store_evictions(static_cast<int64_t>(opened_.removed.size()));
        }
    }
    std::string describe() const override {
        if (store_->directory().empty()) {
            return "memory only";
        }
        return absl::StrCat(
            "directory ", store_->directory(), " (", store_->file_count(), " plans, ",
            store_->max_bytes() > 0 ? absl::StrCat("at most ", store_->max_bytes(), " bytes")
                                    : std::string("no byte cap"),
            ")");
    }

private:
    std::unique_ptr<PlanStore> store_;
    PruneReport opened_; // the prune at open, for the metrics once attached
    std::shared_ptr<Metrics> metrics_;
};

} // namespace

std::unique_ptr<PlanPersistence> make_memory_only_persistence() {
    return std::make_unique<MemoryOnly>();
}

absl::StatusOr<std::unique_ptr<PlanPersistence>> open_plan_persistence(const std::string& directory,
                                                                       int64_t max_bytes) {
    if (directory.empty()) {
        return make_memory_only_persistence();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<PlanStore> store,
                                 PlanStore::open(directory, max_bytes));
    return std::unique_ptr<PlanPersistence>(std::make_unique<StoreBacked>(std::move(store)));
}

} // namespace einsummable::server
