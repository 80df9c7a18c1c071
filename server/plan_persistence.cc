#include "server/plan_persistence.h"

#include <utility>

#include "absl/strings/str_cat.h"

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

class StoreBacked final : public PlanPersistence {
public:
    explicit StoreBacked(std::unique_ptr<PlanStore> store) : store_(std::move(store)) {}

    absl::StatusOr<std::unique_ptr<runtime::Plan>>
    load(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
         std::shared_ptr<runtime::Backend> backend) override {
        return store_->load(key, std::move(graph), options, std::move(backend));
    }
    absl::Status save(const PlanKey& key, const runtime::Plan& plan) override {
        return store_->save(key, plan);
    }
    std::string describe() const override {
        if (store_->directory().empty()) {
            return "memory only";
        }
        return absl::StrCat("directory ", store_->directory(), " (", store_->file_count(),
                            " plans)");
    }

private:
    std::unique_ptr<PlanStore> store_;
};

} // namespace

std::unique_ptr<PlanPersistence> make_memory_only_persistence() {
    return std::make_unique<MemoryOnly>();
}

absl::StatusOr<std::unique_ptr<PlanPersistence>>
open_plan_persistence(const std::string& directory) {
    if (directory.empty()) {
        return make_memory_only_persistence();
    }
    absl::StatusOr<std::unique_ptr<PlanStore>> store = PlanStore::open(directory);
    if (!store.ok()) {
        return store.status();
    }
    return std::unique_ptr<PlanPersistence>(std::make_unique<StoreBacked>(*std::move(store)));
}

} // namespace einsummable::server
