#include "server/engine.h"

#include <algorithm>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/support/status_macros.h"
#include "spdlog/spdlog.h"

// The engine's construction, models and what it says about itself; its plans are
// engine_plans.cc, its executions engine_execute.cc.
namespace einsummable::server {
namespace {

// How often the CancelWatcher looks at the cancellation (deadline, client gone) of requests
// waiting for a plan instance or a batch: how late after its deadline such a request returns.
constexpr std::chrono::milliseconds kCancelPeriod{20};

// The model store's limits among the engine's settings.
ModelStoreLimits model_store_limits(const EngineSettings& settings) {
    ModelStoreLimits limits;
    limits.max_tensor_bytes = settings.max_tensor_bytes;
    limits.max_graph_operators = settings.max_graph_operators;
    limits.max_upload_bytes_in_flight = settings.max_upload_bytes_in_flight;
    limits.max_sequence_ends = settings.max_sequence_ends;
    limits.max_models = settings.max_models;
    limits.max_model_bytes = settings.max_model_bytes;
    return limits;
}

} // namespace

Engine::Engine(EngineOptions options, std::shared_ptr<runtime::Backend> backend,
               std::unique_ptr<PlanPersistence> persistence, std::shared_ptr<Metrics> metrics)
    : options_(std::move(options)),
      topology_(options_.topology ? *options_.topology
                                  : runtime::default_topology(backend->devices())),
      backend_(std::move(backend)),
      persistence_(persistence ? std::move(persistence) : make_memory_only_persistence()),
      metrics_(std::move(metrics)), shapes_(backend_->devices(), topology_, options_),
      failure_(*backend_), models_(
                               model_store_limits(options_),
                               [metrics = metrics_](int64_t delta) {
                                   if (metrics) {
                                       metrics->upload_bytes_in_flight_add(delta);
                                   }
                               },
                               [metrics = metrics_](int64_t models, int64_t bytes) {
                                   if (metrics) {
                                       metrics->models_add(models, bytes);
                                   }
                               }),
      compile_pool_(std::make_unique<CompilePool>(
          options_.compile_threads > 0
              ? options_.compile_threads
              : std::max(1, static_cast<int>(std::thread::hardware_concurrency())),
          metrics_)),
      cache_(options_.plan_cache_entries, compile_pool_.get(), metrics_),
      exchange_cache_(std::make_shared<physical::SynthesisCache>(options_.exchange_cache_bytes)),
      cancel_watcher_(std::make_shared<CancelWatcher>(kCancelPeriod)), batcher_(cancel_watcher_),
      residency_(*persistence_, *backend_, options_.version),
      generation_pools_({options_.generation_slots, options_.generation_capacity,
                         options_.generation_page_size, options_.generation_cache_tokens,
                         options_.generation_prefill_plans, options_.generation_top_k}) {
    persistence_->attach([this] { return cache_.keys(); }, metrics_);
    warm_up_ = std::make_unique<WarmUp>(
        [this](const std::shared_ptr<const Model>& model, int64_t bucket,
               const WarmUp::CancelCheck& cancelled) {
            return bucket_plan(model, bucket, cancelled, /*request_path=*/false);
        },
        metrics_);
    if (metrics_ && options_.device_memory_bytes > 0) {
        metrics_->device_memory_capacity(backend_->devices(), options_.device_memory_bytes);
    }
    update_cache_metrics();
}

Engine::~Engine() {
    warm_up_->stop(); // before the cache and the pool its compiles wait on
    cache_.cancel_all();
    compile_pool_.reset();
}

int64_t Engine::compiles() const {
    std::lock_guard<std::mutex> lock(stats_mutex_);
    return compiles_;
}

absl::StatusOr<v1::RegisterModelResponse>
Engine::register_model(const v1::RegisterModelRequest& req) {
    std::vector<std::string> weights(req.weights().begin(), req.weights().end());
    EINSUMMABLE_RETURN_IF_ERROR(shapes_.check_model_options(req.model(), req.options()));
    EINSUMMABLE_ASSIGN_OR_RETURN(
        std::shared_ptr<const Model> model,
        models_.register_model(req.model(), req.graph(), weights,
                               req.has_batching() ? &req.batching() : nullptr, &req.options()));
    std::string batching = "none";
    if (const std::optional<BatchSpec>& spec = model->batching()) {
        batching =
            absl::StrCat("along '", spec->symbol, "', preferred sizes ",
                         spec->preferred.empty() ? "none" : absl::StrJoin(spec->preferred, ","),
                         ", at most ", spec->max_size, ", delay ",
                         spec->max_queue_delay_us.value_or(options_.max_queue_delay_us), " us",
                         spec->buckets.empty()
                             ? ""
                             : absl::StrCat(", token buckets ", absl::StrJoin(spec->buckets, ",")));
    }
    const std::string options = req.options().ShortDebugString();
    spdlog::info("registered model '{}' ({} operators, symbols: {}, inputs: {}, weights: {}, "
                 "batching: {}, options: {})",
                 req.model(), req.graph().operators_size(), names_or_none(model->symbols()),
                 names_or_none(model->inputs()), names_or_none(model->weights()), batching,
                 options.empty() ? "the server's" : options);
    v1::RegisterModelResponse response;
    response.set_model(req.model());
    for (const std::string& symbol : model->symbols()) {
        response.add_symbols(symbol);
    }
    for (const std::string& input : model->inputs()) {
        response.add_inputs(input);
    }
    warm_up_->add(model);
    return response;
}

absl::StatusOr<std::unique_ptr<WeightUpload>>
Engine::begin_upload(const v1::UploadTensorChunk& first) {
    if (first.model().empty() || first.name().empty()) {
        return absl::InvalidArgumentError(
            "the first chunk of an upload must name the model and the weight");
    }
    return models_.begin_upload(first.model(), first.name(), first.dtype(),
                                {first.shape().data(), static_cast<size_t>(first.shape_size())},
                                first.has_crc32() ? std::optional<uint32_t>(first.crc32())
                                                  : std::nullopt);
}

absl::StatusOr<RequestShape> Engine::request_shape(
    const std::string& model_name, const google::protobuf::Map<std::string, int64_t>& dims,
    const v1::CompileOptions& wire_options,
    const google::protobuf::RepeatedField<int64_t>& sequence_ends, const WireInputs& inputs) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, models_.find(model_name));
    return shapes_.shape(std::move(model), dims, inputs, wire_options, sequence_ends);
}

absl::StatusOr<v1::CompileResponse> Engine::compile(const v1::CompileRequest& req,
                                                    const CancelCheck& cancelled) {
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RequestShape shape,
        request_shape(req.model(), req.dims(), req.options(), req.sequence_ends()));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), cancelled));
    const runtime::Plan& plan = *ready.plan->plan;
    v1::CompileResponse response;
    response.set_plan_key(ready.plan->key.to_string());
    response.set_cache_hit(ready.cache_hit);
    response.set_compile_seconds(ready.plan->compile_seconds);
    response.set_strategy(plan.logical_plan().strategy);
    response.set_simulated_exchange_seconds(plan.physical_plan().simulated_s());
    return response;
}

absl::StatusOr<v1::ExplainResponse> Engine::explain(const v1::ExplainRequest& req,
                                                    const CancelCheck& cancelled) {
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RequestShape shape,
        request_shape(req.model(), req.dims(), req.options(), req.sequence_ends()));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), cancelled));
    const runtime::Plan& plan = *ready.plan->plan;
    v1::ExplainResponse response;
    response.set_text(
        absl::StrCat("plan: ", ready.plan->key.to_string(), "\n", machine_text(), plan.explain()));
    response.set_predicted_cost_bytes(plan.logical_plan().total.bytes.total());
    response.set_simulated_exchange_seconds(plan.physical_plan().simulated_s());
    return response;
}

absl::StatusOr<std::shared_ptr<const Model>> Engine::find_model(absl::string_view name) const {
    return models_.find(name);
}

v1::ListModelsResponse Engine::list_models() const {
    v1::ListModelsResponse response;
    for (const std::shared_ptr<const Model>& model : models_.list()) {
        v1::ModelInfo* info = response.add_models();
        info->set_model(model->name());
        for (const std::string& symbol : model->symbols()) {
            info->add_symbols(symbol);
        }
        for (const std::string& input : model->inputs()) {
            info->add_inputs(input);
        }
        for (const std::string& weight : model->weights()) {
            info->add_weights(weight);
        }
        for (const std::string& weight : model->weights_loaded()) {
            info->add_weights_loaded(weight);
        }
        for (const std::string& saved : model->saved()) {
            info->add_saved(saved);
        }
        info->set_plans(static_cast<int32_t>(cache_.count_for_model(model->name())));
        if (model->batching()) {
            *info->mutable_batching() = model->batching()->to_wire(options_.max_queue_delay_us);
        }
        *info->mutable_warm_up() = warm_up_->info(model->id());
    }
    return response;
}

absl::Status Engine::unregister_model(const v1::UnregisterModelRequest& req) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, models_.find(req.model()));
    EINSUMMABLE_RETURN_IF_ERROR(models_.unregister(req.model()));
    warm_up_->remove(model->id());
    cache_.erase_model(req.model());
    residency_.erase(req.model());
    generation_pools_.erase(req.model());
    if (metrics_) {
        metrics_->erase_model(req.model());
    }
    update_cache_metrics();
    spdlog::info("unregistered model '{}'", req.model());
    return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const Model>> Engine::load_model(const v1::RegisterModelRequest& req,
                                                                const WeightValues& weights,
                                                                uint64_t replaces,
                                                                int64_t version) {
    std::vector<std::string> names(req.weights().begin(), req.weights().end());
    EINSUMMABLE_RETURN_IF_ERROR(shapes_.check_model_options(req.model(), req.options()));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<Model> model,
                                 models_.stage(req.model(), req.graph(), names,
                                               req.has_batching() ? &req.batching() : nullptr,
                                               version, &req.options()));
    for (const auto& [name, bytes] : weights) {
        EINSUMMABLE_RETURN_IF_ERROR(models_.set_staged_weight(*model, name, bytes));
    }
    if (std::optional<std::string> missing = model->missing_weight()) {
        return absl::InvalidArgumentError(
            absl::StrCat("model '", req.model(), "': weight '", *missing, "' is not given"));
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> old,
                                 models_.replace(model, replaces));
    if (old != nullptr) {
        // As unregister_model does for the old model. The new one's plans have another key (its
        // id), so no request finds the old's; a plan the new one made since the replace may go
        // too, and is made again.
        warm_up_->remove(old->id());
        cache_.erase_model(req.model());
        residency_.erase(req.model(), old->id());
        generation_pools_.erase(req.model());
        update_cache_metrics();
    }
    warm_up_->add(model);
    spdlog::info("{} model '{}' ({} operators, {} weights) from the model repository",
                 old == nullptr ? "registered" : "replaced", req.model(),
                 req.graph().operators_size(), weights.size());
    return std::shared_ptr<const Model>(model);
}

absl::StatusOr<RequestShape> Engine::generation_shape(const std::shared_ptr<const Model>& model,
                                                      int64_t tokens,
                                                      const v1::CompileOptions& options,
                                                      std::vector<int64_t> sequence_ends) const {
    if (!model->batching().has_value()) {
        return absl::FailedPreconditionError(
            absl::StrCat("model '", model->name(), "' has no batching dimension"));
    }
    const std::string& symbol = model->batching()->symbol;
    for (const std::string& other : model->symbols()) {
        if (other != symbol) {
            return absl::FailedPreconditionError(
                absl::StrCat("model '", model->name(), "' has the symbol '", other,
                             "' besides its batch dimension '", symbol, "'"));
        }
    }
    return shapes_.shape_with(model, {{symbol, tokens}}, options, std::move(sequence_ends));
}

void Engine::set_unrecoverable_listener(std::function<void(const absl::Status& error)> listener) {
    failure_.set_listener(std::move(listener));
}

absl::Status Engine::unrecoverable_error() const {
    return failure_.error();
}

absl::Status Engine::check_backend() {
    (void)failure_.refuse_if_unrecoverable();
    return failure_.error();
}

void Engine::update_cache_metrics() {
    if (!metrics_) {
        return;
    }
    metrics_->cache_entries(static_cast<int64_t>(cache_.entries().size()));
    metrics_->device_memory(device_memory());
}

std::vector<int64_t> Engine::device_memory() const {
    std::vector<int64_t> per_device(backend_->devices(), 0);
    auto add = [&](const std::vector<int64_t>& bytes) {
        for (size_t device = 0; device < bytes.size() && device < per_device.size(); ++device) {
            per_device[device] += bytes[device];
        }
    };
    std::set<const runtime::ResidentWeights*> counted;
    for (const std::shared_ptr<CachedPlan>& entry : cache_.entries()) {
        if (!entry->plan) {
            continue;
        }
        add(entry->plan->allocated_bytes());
        const runtime::ResidentWeights* resident = entry->plan->resident().get();
        if (resident != nullptr && counted.insert(resident).second) {
            add(resident->allocated_bytes()); // a model's weights, once for all its plans
        }
    }
    for (const GenerationPools::Memory& pool : generation_pools_.device_memory()) {
        add(pool.plan_bytes);
        if (pool.resident != nullptr && counted.insert(pool.resident.get()).second) {
            add(pool.resident->allocated_bytes()); // caches, and weights unless the model's
        }
    }
    return per_device;
}

std::string Engine::machine_text() const {
    std::string text =
        absl::StrCat("backend: ", backend_->name(), ", ", backend_->devices(), " devices");
    if (!options_.backend_reason.empty()) {
        absl::StrAppend(&text, " (", options_.backend_reason, ")");
    }
    if (const std::string kernels = backend_->kernels().description; !kernels.empty()) {
        absl::StrAppend(&text, "\nkernels: ", kernels);
    }
    absl::StrAppend(&text, "\ntopology: ", topology_.name());
    if (!options_.topology_reason.empty()) {
        absl::StrAppend(&text, " (", options_.topology_reason, ")");
    }
    absl::StrAppend(&text, "\ndevice memory: ");
    if (options_.device_memory_bytes > 0) {
        absl::StrAppend(&text, options_.device_memory_bytes, " B per device");
    } else {
        absl::StrAppend(&text, "not known, plans are not checked against it");
    }
    if (!options_.device_memory_reason.empty()) {
        absl::StrAppend(&text, " (", options_.device_memory_reason, ")");
    }
    absl::StrAppend(&text, "\n");
    if (!options_.gpus.empty()) {
        absl::StrAppend(&text, "GPUs:\n", options_.gpus, options_.gpus.back() == '\n' ? "" : "\n");
    }
    return text;
}

v1::GetServerInfoResponse Engine::server_info() const {
    v1::GetServerInfoResponse response;
    response.set_version(options_.version);
    response.set_backend(backend_->name());
    response.set_devices(backend_->devices());
    response.set_topology(topology_.name());
    response.set_backend_reason(options_.backend_reason);
    response.set_gpus(options_.gpus);
    response.set_topology_reason(options_.topology_reason);
    response.set_kernels(backend_->kernels().description);
    response.set_warm_up_pending(warm_up_->pending());
    response.set_generation_slots(generation_pools_.options().slots);
    response.set_generation_capacity(generation_pools_.options().capacity);
    response.set_generation_slots_in_use(generation_pools_.slots_in_use());
    response.set_generation_page_size(generation_pools_.options().page_size);
    response.set_generation_pages(generation_pools_.options().pages());
    response.set_generation_pages_in_use(generation_pools_.pages_in_use());
    for (int64_t bytes : device_memory()) {
        response.add_device_memory_bytes(bytes);
    }
    if (options_.device_memory_bytes > 0) {
        for (int device = 0; device < backend_->devices(); ++device) {
            response.add_device_memory_capacity_bytes(options_.device_memory_bytes);
        }
    }
    return response;
}

} // namespace einsummable::server
