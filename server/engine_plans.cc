#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/clock.h"
#include "compiler/support/status_macros.h"
#include "server/engine.h"
#include "server/plan_key.h"
#include "server/request_errors.h"
#include "spdlog/spdlog.h"

// The engine's plans: a request's plan found in the plan cache, restored from the plan store or
// compiled, with the model's weights placed on the way.
namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;
using support::seconds_since;

} // namespace

absl::StatusOr<Engine::ReadyPlan> Engine::plan_for(RequestShape shape, const CancelCheck& cancelled,
                                                   bool request_path) {
    EINSUMMABLE_RETURN_IF_ERROR(failure_.refuse_if_unrecoverable());
    const std::shared_ptr<const Model>& model = shape.model;
    runtime::CompileOptions& options = shape.options;
    options.exchange_cache = exchange_cache_;
    PlanKey key = plan_key(shape, topology_.name(), options_.device_memory_bytes, options_.version);

    if (cancelled) {
        EINSUMMABLE_RETURN_IF_ERROR(cancelled());
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(WeightResidency::Choice weights,
                                 place_weights(*model, key, options, cancelled));
    // The creation may outlive this request (it gave up while others wait): the factory owns
    // what it uses.
    auto shared_graph = std::make_shared<ir::Graph>(std::move(shape.graph));
    const std::string model_name = model->name();
    absl::StatusOr<PlanCache::Lookup> lookup = cache_.get_or_create(
        key,
        [this, key, shared_graph, compile_options = options, model,
         request_path](const std::shared_ptr<const support::Cancellation>& cancellation)
            -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
            runtime::CompileOptions with_cancellation = compile_options;
            with_cancellation.cancellation = cancellation;
            return create_plan(key, std::move(*shared_graph), with_cancellation, *model,
                               request_path);
        },
        cancelled,
        // Checked under the cache's lock: a plan compiled for a model that was unregistered
        // (or replaced) meanwhile is used by this request but not cached.
        [this, model_name, model_id = model->id()] {
            absl::StatusOr<std::shared_ptr<const Model>> current = models_.find(model_name);
            return current.ok() && (*current)->id() == model_id;
        });
    if (weights.defining) {
        const bool made = lookup.ok() && lookup->plan != nullptr && lookup->plan->plan != nullptr;
        residency_.end_defining(weights, key, made ? lookup->plan->plan->resident() : nullptr);
        update_cache_metrics();
    }
    if (!lookup.ok()) {
        return lookup.status();
    }
    if (metrics_) {
        if (lookup->hit) {
            metrics_->cache_hit();
        } else {
            metrics_->cache_miss();
        }
    }
    if (!lookup->hit) {
        update_cache_metrics();
    }
    return ReadyPlan{model, lookup->plan, lookup->hit || lookup->plan->loaded_from_store};
}

absl::StatusOr<WeightResidency::Choice> Engine::place_weights(const Model& model, PlanKey& key,
                                                              runtime::CompileOptions& options,
                                                              const CancelCheck& cancelled) {
    options.instances = options_.instances_per_plan;
    options.device_memory_bytes = options_.device_memory_bytes;
    // A batch's answers must be those of its requests run alone (server/batcher.h).
    options.batch_invariant = model.batching().has_value();
    options.weights.insert(model.weights().begin(), model.weights().end());
    if (!options_.share_weights) {
        key.weights = model.weights().empty() ? "" : "own";
        return WeightResidency::Choice();
    }
    if (model.weights().empty()) {
        return WeightResidency::Choice();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(WeightResidency::Choice choice,
                                 residency_.choose(model, key, cancelled));
    if (choice.defining || choice.again) {
        options.resident_inputs.insert(model.weights().begin(), model.weights().end());
    }
    options.resident = choice.resident;
    options.resident_defines = choice.again;
    return choice;
}

absl::StatusOr<std::shared_ptr<CachedPlan>>
Engine::create_plan(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
                    const Model& model, bool request_path) {
    const Clock::time_point start = Clock::now();
    auto cached = std::make_shared<CachedPlan>();
    cached->key = key;

    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        persistence_->load(key, std::move(graph), options, backend_);
    if (plan.ok()) {
        cached->loaded_from_store = true;
        cached->compile_seconds = seconds_since(start);
        spdlog::info("plan loaded from the plan store in {:.3f} s: {}", cached->compile_seconds,
                     key.to_string());
    } else {
        if (absl::IsDataLoss(plan.status())) {
            spdlog::warn("stored plan unusable, recompiling: {} ({})",
                         std::string(plan.status().message()), key.to_string());
        } else if (!absl::IsNotFound(plan.status())) {
            spdlog::warn("plan store load failed, recompiling: {} ({})", plan.status().ToString(),
                         key.to_string());
        }
        // The graph was moved into the store's load: build it again (cheap next to compiling).
        EINSUMMABLE_ASSIGN_OR_RETURN(ir::Graph rebuilt, model.build(key.dims, key.sequence_ends));
        if (std::shared_ptr<CachedPlan> rebuilt_plan = rebuild_from_bucket(key, options, model)) {
            return rebuilt_plan;
        }
        spdlog::info("compiling plan{}: {}", request_path ? "" : " (warm-up)", key.to_string());
        const Clock::time_point compile_start = Clock::now();
        plan = runtime::Plan::compile(std::move(rebuilt), options, backend_);
        if (!plan.ok() && absl::IsCancelled(plan.status())) {
            spdlog::info("compile stopped after {:.3f} s, no request waits for it any more: {}",
                         seconds_since(compile_start), key.to_string());
            return plan.status();
        }
        if (!plan.ok()) {
            spdlog::warn("compile failed: {} ({})", plan.status().ToString(), key.to_string());
            return failure_.unless_unrecoverable(
                with_prefix(plan.status(), absl::StrCat("model '", key.model, "': ")));
        }
        cached->compile_seconds = seconds_since(compile_start);
        if (metrics_) {
            metrics_->compile(cached->compile_seconds);
            if (request_path) {
                metrics_->request_path_compile();
            }
            const physical::SynthesisCache::Stats exchanges = exchange_cache_->stats();
            metrics_->exchange_cache(exchanges.hits, exchanges.misses, exchanges.evictions,
                                     exchanges.entries, exchanges.bytes);
        }
        {
            std::lock_guard<std::mutex> lock(stats_mutex_);
            ++compiles_;
        }
        spdlog::info("compiled plan in {:.3f} s (strategy: {}, simulated exchange {:.6f} s, peak "
                     "{} B on device 0): {}",
                     cached->compile_seconds, (*plan)->logical_plan().strategy,
                     (*plan)->physical_plan().simulated_s(),
                     (*plan)->peak_bytes().empty() ? 0 : (*plan)->peak_bytes()[0], key.to_string());
        if (absl::Status saved = persistence_->save(key, **plan); !saved.ok()) {
            spdlog::warn("plan store save failed: {} ({})", saved.ToString(), key.to_string());
        }
    }
    if (options.instances > (*plan)->instances()) {
        spdlog::info("--instances_per_plan={} lowered to {}: the devices' memory ({} B, {}) holds "
                     "no more beside the weights: {}",
                     options.instances, (*plan)->instances(), options.device_memory_bytes,
                     options_.device_memory_reason, key.to_string());
    }
    cached->plan = *std::move(plan);
    return cached;
}

absl::Status Engine::bucket_plan(const std::shared_ptr<const Model>& model, int64_t bucket,
                                 const CancelCheck& cancelled, bool request_path) {
    const BatchSpec& spec = *model->batching();
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RequestShape shape, shapes_.shape_with(model, graphdef::Bindings{{spec.symbol, bucket}},
                                               v1::CompileOptions(), {bucket}));
    if (!request_path && cache_.pinned() >= cache_.max_entries()) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "the plan cache is full of bucket plans (--plan_cache_entries=", cache_.max_entries(),
            ")"));
    }
    // A bucket's plans stay however many plans of other lengths are rebuilt from them.
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready,
                                 plan_for(std::move(shape), cancelled, request_path));
    cache_.pin(ready.plan->key);
    if (ready.plan->key.weights != "defines" || bucket < 2) {
        return absl::OkStatus();
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RequestShape resident, shapes_.shape_with(model, graphdef::Bindings{{spec.symbol, bucket}},
                                                  v1::CompileOptions(), {1, bucket}));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan rebuilt_from,
                                 plan_for(std::move(resident), cancelled, request_path));
    cache_.pin(rebuilt_from.plan->key);
    return absl::OkStatus();
}

std::shared_ptr<CachedPlan> Engine::rebuild_from_bucket(const PlanKey& key,
                                                        const runtime::CompileOptions& options,
                                                        const Model& model) {
    if (!model.batching() || model.batching()->buckets.empty() || key.sequence_ends.empty()) {
        return nullptr;
    }
    std::shared_ptr<CachedPlan> sibling = bucket_sibling(key);
    if (sibling == nullptr) {
        return nullptr;
    }
    const Clock::time_point start = Clock::now();
    absl::StatusOr<ir::Graph> graph = model.build(key.dims, key.sequence_ends);
    if (!graph.ok()) {
        return nullptr;
    }
    absl::StatusOr<std::unique_ptr<runtime::Plan>> plan =
        runtime::Plan::restore(*std::move(graph), options, sibling->plan->record(), backend_);
    if (!plan.ok()) {
        // Not every plan fits another length's ends; compiling is always right.
        spdlog::info("the bucket's plan {} does not fit {}, compiling: {}",
                     sibling->key.to_string(), key.to_string(), plan.status().ToString());
        return nullptr;
    }
    // The bucket's plan stays while its lengths are asked for, however many rebuilt plans come
    // after it.
    cache_.touch(sibling->key);
    auto cached = std::make_shared<CachedPlan>();
    cached->key = key;
    cached->compile_seconds = seconds_since(start);
    cached->plan = *std::move(plan);
    if (metrics_) {
        metrics_->bucket_plan_rebuild();
    }
    spdlog::info("plan rebuilt in {:.3f} s from the bucket's plan {}: {}", cached->compile_seconds,
                 sibling->key.to_string(), key.to_string());
    return cached;
}

} // namespace einsummable::server
