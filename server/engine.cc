#include "server/engine.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/exprog/synthesis.h"
#include "compiler/logical/logical_plan.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/physical/time_objective.h"
#include "compiler/support/status_macros.h"
#include "proto/graph_def.h"
#include "server/tensor_limits.h"
#include "spdlog/spdlog.h"

namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;

// How often the CancelWatcher looks at the cancellation (deadline, client gone) of requests
// waiting for a plan instance or a batch: how late after its deadline such a request returns.
constexpr std::chrono::milliseconds kCancelPeriod{20};

double seconds_since(Clock::time_point start) {
    return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string bindings_string(const graphdef::Bindings& bindings) {
    if (bindings.empty()) {
        return "no symbols";
    }
    return absl::StrJoin(bindings, ", ", [](std::string* out, const auto& binding) {
        absl::StrAppend(out, binding.first, "=", binding.second);
    });
}

std::string names_or_none(const std::vector<std::string>& names) {
    return names.empty() ? "none" : absl::StrJoin(names, ", ");
}

absl::Status with_prefix(const absl::Status& status, absl::string_view prefix) {
    return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

// The request's options as runtime options on the server's topology; InvalidArgument naming the
// option.
absl::StatusOr<runtime::CompileOptions> compile_options(const v1::CompileOptions& wire,
                                                        int server_devices,
                                                        const exprog::Topology& topology,
                                                        int synthesis_iterations) {
    runtime::CompileOptions options;
    options.devices = wire.devices() == 0 ? server_devices : wire.devices();
    if (wire.devices() < 0 || options.devices > server_devices) {
        return absl::InvalidArgumentError(absl::StrCat("options.devices: ", wire.devices(),
                                                       " is not between 1 and the server's ",
                                                       server_devices, " devices (0 = all)"));
    }
    if (!wire.planner().empty()) {
        absl::StatusOr<logical::Planner> planner = logical::parse_planner(wire.planner());
        if (!planner.ok()) {
            std::vector<absl::string_view> names;
            for (logical::Planner known : logical::all_planners()) {
                names.push_back(logical::planner_name(known));
            }
            return absl::InvalidArgumentError(absl::StrCat("options.planner: '", wire.planner(),
                                                           "' is not a planner (",
                                                           absl::StrJoin(names, ", "), ")"));
        }
        options.planner = *planner;
    }
    if (!wire.schedule().empty()) {
        absl::StatusOr<exprog::SynthesisMode> mode = exprog::parse_synthesis_mode(wire.schedule());
        if (!mode.ok()) {
            return absl::InvalidArgumentError(
                absl::StrCat("options.schedule: '", wire.schedule(),
                             "' is not a schedule (optimized, naive, ai)"));
        }
        options.schedule = *mode;
    }
    if (!wire.objective().empty()) {
        absl::StatusOr<physical::Objective> objective = physical::parse_objective(wire.objective());
        if (!objective.ok()) {
            return absl::InvalidArgumentError(absl::StrCat("options.objective: '", wire.objective(),
                                                           "' is not an objective (cost, time)"));
        }
        options.objective = *objective;
    }
    options.seed = wire.seed();
    options.topology = topology;
    options.synthesis_iterations = synthesis_iterations;
    return options;
}

// The request's dims as bindings: every symbol of the model bound, nothing else, sizes in
// [1, kMaxDimensionSize].
absl::StatusOr<graphdef::Bindings>
bindings_for(const Model& model, const google::protobuf::Map<std::string, int64_t>& dims) {
    graphdef::Bindings bindings;
    const std::set<std::string> symbols(model.symbols().begin(), model.symbols().end());
    for (const auto& [symbol, size] : dims) {
        if (!symbols.count(symbol)) {
            return absl::InvalidArgumentError(
                absl::StrCat("dims: '", symbol, "' is not a symbol of model '", model.name(),
                             "' (symbols: ", names_or_none(model.symbols()), ")"));
        }
        if (size <= 0 || size > kMaxDimensionSize) {
            return absl::InvalidArgumentError(
                absl::StrCat("dims: symbol '", symbol, "' is bound to ", size,
                             "; sizes must be between 1 and ", kMaxDimensionSize));
        }
        bindings[symbol] = size;
    }
    for (const std::string& symbol : model.symbols()) {
        if (!bindings.count(symbol)) {
            return absl::InvalidArgumentError(absl::StrCat("dims: symbol '", symbol, "' of model '",
                                                           model.name(), "' is not bound"));
        }
    }
    return bindings;
}

} // namespace

Engine::Engine(EngineOptions options, std::shared_ptr<runtime::Backend> backend,
               std::unique_ptr<PlanPersistence> persistence, std::shared_ptr<Metrics> metrics)
    : options_(std::move(options)),
      topology_(options_.topology ? *options_.topology
                                  : runtime::default_topology(backend->devices())),
      backend_(std::move(backend)),
      persistence_(persistence ? std::move(persistence) : make_memory_only_persistence()),
      metrics_(std::move(metrics)),
      models_(
          ModelStoreLimits{options_.max_tensor_bytes, options_.max_graph_operators,
                           options_.max_upload_bytes_in_flight, options_.max_sequence_ends,
                           options_.max_models, options_.max_model_bytes},
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
      cancel_watcher_(std::make_shared<CancelWatcher>(kCancelPeriod)), batcher_(cancel_watcher_) {
    persistence_->attach([this] { return cache_.keys(); }, metrics_);
    if (metrics_ && options_.device_memory_bytes > 0) {
        metrics_->device_memory_capacity(backend_->devices(), options_.device_memory_bytes);
    }
    update_cache_metrics();
}

Engine::~Engine() {
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
    absl::StatusOr<std::shared_ptr<const Model>> model = models_.register_model(
        req.model(), req.graph(), weights, req.has_batching() ? &req.batching() : nullptr);
    if (!model.ok()) {
        return model.status();
    }
    std::string batching = "none";
    if (const std::optional<BatchSpec>& spec = (*model)->batching()) {
        batching =
            absl::StrCat("along '", spec->symbol, "', preferred sizes ",
                         spec->preferred.empty() ? "none" : absl::StrJoin(spec->preferred, ","),
                         ", at most ", spec->max_size, ", delay ",
                         spec->max_queue_delay_us.value_or(options_.max_queue_delay_us), " us");
    }
    spdlog::info("registered model '{}' ({} operators, symbols: {}, inputs: {}, weights: {}, "
                 "batching: {})",
                 req.model(), req.graph().operators_size(), names_or_none((*model)->symbols()),
                 names_or_none((*model)->inputs()), names_or_none((*model)->weights()), batching);
    v1::RegisterModelResponse response;
    response.set_model(req.model());
    for (const std::string& symbol : (*model)->symbols()) {
        response.add_symbols(symbol);
    }
    for (const std::string& input : (*model)->inputs()) {
        response.add_inputs(input);
    }
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

absl::StatusOr<std::vector<int64_t>>
Engine::request_sequence_ends(const Model& model, const graphdef::Bindings& bindings,
                              const google::protobuf::RepeatedField<int64_t>& wire) const {
    if (!model.batching()) {
        if (!wire.empty()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "sequence_ends: model '", model.name(),
                "' has no batching (RegisterModelRequest.batching); its attention and rope take "
                "their sequence ends from the graph"));
        }
        return std::vector<int64_t>();
    }
    const int64_t length = bindings.at(model.batching()->symbol);
    if (wire.empty()) {
        return std::vector<int64_t>{length};
    }
    if (wire.size() > options_.max_sequence_ends) {
        return absl::ResourceExhaustedError(
            absl::StrCat("sequence_ends: ", wire.size(), " entries; the server accepts at most ",
                         options_.max_sequence_ends, " (--max_sequence_ends)"));
    }
    std::vector<int64_t> ends(wire.begin(), wire.end());
    for (size_t k = 0; k < ends.size(); ++k) {
        const int64_t previous = k == 0 ? 0 : ends[k - 1];
        if (ends[k] <= previous || ends[k] > length) {
            return absl::InvalidArgumentError(
                absl::StrCat("sequence_ends: entry ", k, " (", ends[k], ") must be greater than ",
                             k == 0 ? "0" : absl::StrCat("entry ", k - 1, " (", previous, ")"),
                             " and at most '", model.batching()->symbol, "' = ", length));
        }
    }
    if (ends.back() != length) {
        return absl::InvalidArgumentError(absl::StrCat(
            "sequence_ends: the last entry (", ends.back(), ") must be '", model.batching()->symbol,
            "' = ", length, ": the sequences cover the request"));
    }
    return ends;
}

absl::StatusOr<Engine::Shape> Engine::shape_for(std::shared_ptr<const Model> model,
                                                graphdef::Bindings bindings,
                                                const v1::CompileOptions& wire_options,
                                                std::vector<int64_t> sequence_ends) {
    EINSUMMABLE_ASSIGN_OR_RETURN(runtime::CompileOptions options,
                                 compile_options(wire_options, backend_->devices(), topology_,
                                                 options_.synthesis_iterations));
    const std::string where =
        absl::StrCat("model '", model->name(), "' with ", bindings_string(bindings), ": ");
    // Bound every input before the ir multiplies sizes, then every tensor of the graph.
    for (const v1::TensorDesc& input : model->graph_def().inputs()) {
        absl::StatusOr<int64_t> bytes = input_bytes(input, bindings);
        if (!bytes.ok()) {
            return with_prefix(bytes.status(), where);
        }
    }
    absl::StatusOr<ir::Graph> graph = model->build(bindings, sequence_ends);
    if (!graph.ok()) {
        return with_prefix(graph.status(), where);
    }
    if (absl::Status status =
            check_operator_devices(static_cast<int64_t>(graph->nodes().size()), options.devices,
                                   options_.max_operator_devices);
        !status.ok()) {
        return with_prefix(status, where);
    }
    for (const ir::GraphTensor& tensor : graph->tensors()) {
        absl::StatusOr<int64_t> bytes = checked_bytes(absl::StrCat("tensor '", tensor.name, "'"),
                                                      tensor.type.shape(), tensor.type.dtype);
        if (!bytes.ok()) {
            return with_prefix(bytes.status(), where);
        }
        if (*bytes > options_.max_tensor_bytes) {
            return absl::ResourceExhaustedError(
                absl::StrCat(where, "tensor '", tensor.name, "' ", tensor.type.to_string(),
                             " takes ", *bytes, " bytes; the server accepts tensors of at most ",
                             options_.max_tensor_bytes, " bytes (--max_tensor_bytes)"));
        }
    }
    return Shape{std::move(model), std::move(options), std::move(bindings),
                 std::move(sequence_ends), *std::move(graph)};
}

absl::StatusOr<Engine::Shape>
Engine::request_shape(const std::string& model_name,
                      const google::protobuf::Map<std::string, int64_t>& dims,
                      const v1::CompileOptions& wire_options,
                      const google::protobuf::RepeatedField<int64_t>& sequence_ends) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::shared_ptr<const Model> model, models_.find(model_name));
    EINSUMMABLE_ASSIGN_OR_RETURN(graphdef::Bindings bindings, bindings_for(*model, dims));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<int64_t> ends,
                                 request_sequence_ends(*model, bindings, sequence_ends));
    return shape_for(std::move(model), std::move(bindings), wire_options, std::move(ends));
}

absl::StatusOr<Engine::ReadyPlan> Engine::plan_for(Shape shape, const CancelCheck& cancelled) {
    EINSUMMABLE_RETURN_IF_ERROR(refuse_if_unrecoverable());
    const std::shared_ptr<const Model>& model = shape.model;
    runtime::CompileOptions& options = shape.options;
    PlanKey key;
    key.model = model->name();
    key.graph_fingerprint = model->fingerprint();
    key.dims = shape.bindings;
    key.devices = options.devices;
    key.planner = std::string(logical::planner_name(options.planner));
    key.objective = std::string(physical::objective_name(options.objective));
    key.seed = options.seed;
    key.schedule = std::string(exprog::synthesis_mode_name(options.schedule));
    key.synthesis_iterations = options.synthesis_iterations;
    key.topology = topology_.name();
    key.device_memory = options_.device_memory_bytes;
    key.version = options_.version;
    key.sequence_ends = shape.sequence_ends;

    if (cancelled) {
        EINSUMMABLE_RETURN_IF_ERROR(cancelled());
    }
    // Where the plan reads the weights: laid out by this request's plan, in place from the
    // model's layout, or its own copies.
    std::shared_ptr<Residency> model_residency;
    bool defining = false;
    options.instances = options_.instances_per_plan;
    options.device_memory_bytes = options_.device_memory_bytes;
    // A batch's answers must be those of its requests run alone (server/batcher.h).
    options.batch_invariant = model->batching().has_value();
    options.weights.insert(model->weights().begin(), model->weights().end());
    if (!options_.share_weights) {
        key.weights = model->weights().empty() ? "" : "own";
    } else if (!model->weights().empty()) {
        model_residency = residency(*model);
        EINSUMMABLE_ASSIGN_OR_RETURN(WeightsChoice choice,
                                     choose_weights(*model, *model_residency, key, cancelled));
        defining = choice.defining;
        if (choice.defining || choice.again) {
            options.resident_inputs.insert(model->weights().begin(), model->weights().end());
        }
        options.resident = std::move(choice.resident);
        options.resident_defines = choice.again;
    }
    // The creation may outlive this request (it gave up while others wait): the factory owns
    // what it uses.
    auto shared_graph = std::make_shared<ir::Graph>(std::move(shape.graph));
    const std::string model_name = model->name();
    absl::StatusOr<PlanCache::Lookup> lookup = cache_.get_or_create(
        key,
        [this, key, shared_graph, compile_options = options,
         model](const std::shared_ptr<const support::Cancellation>& cancellation)
            -> absl::StatusOr<std::shared_ptr<CachedPlan>> {
            runtime::CompileOptions with_cancellation = compile_options;
            with_cancellation.cancellation = cancellation;
            return create_plan(key, std::move(*shared_graph), with_cancellation, *model);
        },
        cancelled,
        // Checked under the cache's lock: a plan compiled for a model that was unregistered
        // (or replaced) meanwhile is used by this request but not cached.
        [this, model_name, model_id = model->id()] {
            absl::StatusOr<std::shared_ptr<const Model>> current = models_.find(model_name);
            return current.ok() && (*current)->id() == model_id;
        });
    if (defining) {
        end_defining(*model_residency, key, lookup.ok() ? lookup->plan : nullptr);
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

absl::StatusOr<std::shared_ptr<CachedPlan>>
Engine::create_plan(const PlanKey& key, ir::Graph graph, const runtime::CompileOptions& options,
                    const Model& model) {
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
        spdlog::info("compiling plan: {}", key.to_string());
        const Clock::time_point compile_start = Clock::now();
        plan = runtime::Plan::compile(std::move(rebuilt), options, backend_);
        if (!plan.ok() && absl::IsCancelled(plan.status())) {
            spdlog::info("compile stopped after {:.3f} s, no request waits for it any more: {}",
                         seconds_since(compile_start), key.to_string());
            return plan.status();
        }
        if (!plan.ok()) {
            spdlog::warn("compile failed: {} ({})", plan.status().ToString(), key.to_string());
            return unless_unrecoverable(
                with_prefix(plan.status(), absl::StrCat("model '", key.model, "': ")));
        }
        cached->compile_seconds = seconds_since(compile_start);
        if (metrics_) {
            metrics_->compile(cached->compile_seconds);
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

std::shared_ptr<Engine::Residency> Engine::residency(const Model& model) {
    std::lock_guard<std::mutex> lock(residency_mutex_);
    auto& [id, residency] = residency_[model.name()];
    if (residency == nullptr || id != model.id()) {
        id = model.id();
        residency = std::make_shared<Residency>();
    }
    return residency;
}

std::string Engine::layout_identity(const std::string& model,
                                    const std::string& graph_fingerprint) const {
    return absl::StrCat("model=", model, " graph=", graph_fingerprint,
                        " version=", options_.version);
}

absl::StatusOr<Engine::WeightsChoice> Engine::choose_weights(const Model& model,
                                                             Residency& residency, PlanKey& key,
                                                             const CancelCheck& cancelled) {
    std::unique_lock<std::mutex> lock(residency.mutex);
    if (!residency.store_checked) {
        // A layout the store kept from an earlier run: its first line is the defining key.
        residency.store_checked = true;
        absl::StatusOr<std::string> stored =
            persistence_->load_layout(layout_identity(model.name(), model.fingerprint()));
        if (stored.ok()) {
            const size_t newline = stored->find('\n');
            absl::StatusOr<physical::ResidentLayout> layout =
                newline == std::string::npos ? absl::DataLossError("no defining key line")
                                             : physical::parse_resident_layout_record(
                                                   absl::string_view(*stored).substr(newline + 1));
            absl::StatusOr<std::shared_ptr<runtime::ResidentWeights>> weights =
                layout.ok() ? runtime::ResidentWeights::allocate(*std::move(layout), *backend_)
                            : layout.status();
            if (weights.ok()) {
                residency.weights = *std::move(weights);
                residency.defining_key = stored->substr(0, newline);
                spdlog::info("model '{}': weights laid out as the plan store kept them (layout "
                             "{}, defined by {})",
                             model.name(), residency.weights->layout().fingerprint(),
                             residency.defining_key);
            } else {
                spdlog::warn("model '{}': the stored weights layout is unusable, its first plan "
                             "lays them out again: {}",
                             model.name(), weights.status().ToString());
            }
        } else if (!absl::IsNotFound(stored.status())) {
            spdlog::warn("model '{}': cannot read the stored weights layout: {}", model.name(),
                         stored.status().ToString());
        }
    }
    for (;;) {
        if (residency.weights != nullptr) {
            WeightsChoice choice;
            PlanKey as_definer = key;
            as_definer.weights = "defines";
            if (as_definer.to_string() == residency.defining_key) {
                key.weights = "defines"; // the plan that laid them out, made or found again
                choice.resident = residency.weights;
                choice.again = true;
            } else if (residency.weights->layout().devices == key.devices) {
                key.weights = absl::StrCat("resident:", residency.weights->layout().fingerprint());
                choice.resident = residency.weights;
            } else {
                key.weights = "own";
            }
            return choice;
        }
        if (!residency.defining) {
            residency.defining = true;
            key.weights = "defines";
            WeightsChoice choice;
            choice.defining = true;
            return choice;
        }
        // Another request's plan is laying the weights out: wait for it, as a request waits for
        // a compile (its deadline and cancellation still apply).
        residency.changed.wait_for(lock, std::chrono::milliseconds(20));
        if (cancelled) {
            EINSUMMABLE_RETURN_IF_ERROR(cancelled());
        }
    }
}

void Engine::end_defining(Residency& residency, const PlanKey& key,
                          const std::shared_ptr<CachedPlan>& plan) {
    {
        std::lock_guard<std::mutex> lock(residency.mutex);
        residency.defining = false;
        if (plan != nullptr && plan->plan != nullptr && plan->plan->resident() != nullptr) {
            residency.weights = plan->plan->resident();
            residency.defining_key = key.to_string();
            if (absl::Status saved = persistence_->save_layout(
                    layout_identity(key.model, key.graph_fingerprint),
                    absl::StrCat(residency.defining_key, "\n",
                                 physical::resident_layout_record(residency.weights->layout())));
                !saved.ok()) {
                spdlog::warn("model '{}': cannot keep the weights layout in the plan store "
                             "(a restart lays them out again): {}",
                             key.model, saved.ToString());
            }
            spdlog::info("model '{}': weights resident, {} B over {} devices (layout {})",
                         key.model, residency.weights->layout().total_bytes(),
                         residency.weights->layout().devices,
                         residency.weights->layout().fingerprint());
        }
    }
    residency.changed.notify_all();
    update_cache_metrics();
}

absl::Status Engine::refresh_weights(const Model& model, const runtime::Plan& plan,
                                     runtime::Plan::Lease& lease) {
    const WeightSnapshot snapshot = model.weights_snapshot();
    const auto generation = static_cast<int64_t>(snapshot.generation);
    const std::shared_ptr<runtime::ResidentWeights>& resident = plan.resident();
    if (resident != nullptr && resident->generation() != generation) {
        // One writer at a time, so the memory never holds an older generation than it says.
        std::shared_ptr<Residency> model_residency = residency(model);
        std::lock_guard<std::mutex> lock(model_residency->write_mutex);
        if (resident->generation() != generation) {
            for (const auto& [name, bytes] : snapshot.values) {
                if (!plan.is_resident(name)) {
                    continue;
                }
                if (absl::Status status = resident->write(name, *bytes); !status.ok()) {
                    return with_prefix(status, absl::StrCat("writing weight '", name, "': "));
                }
            }
            resident->set_generation(generation);
        }
    }
    if (lease.weights_generation() != generation) {
        for (const auto& [name, bytes] : snapshot.values) {
            if (plan.is_resident(name)) {
                continue;
            }
            if (absl::Status status = lease.load_bytes(name, *bytes); !status.ok()) {
                return with_prefix(status, absl::StrCat("loading weight '", name, "': "));
            }
        }
        lease.set_weights_generation(generation);
    }
    return absl::OkStatus();
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
    return per_device;
}

void Engine::set_unrecoverable_listener(std::function<void(const absl::Status& error)> listener) {
    absl::Status already;
    {
        std::lock_guard<std::mutex> lock(unrecoverable_mutex_);
        unrecoverable_listener_ = listener;
        already = unrecoverable_;
    }
    if (!already.ok() && listener) {
        listener(already);
    }
}

absl::Status Engine::unrecoverable_error() const {
    std::lock_guard<std::mutex> lock(unrecoverable_mutex_);
    return unrecoverable_;
}

void Engine::note_unrecoverable(const absl::Status& error) {
    std::function<void(const absl::Status&)> listener;
    {
        std::lock_guard<std::mutex> lock(unrecoverable_mutex_);
        if (!unrecoverable_.ok()) {
            return;
        }
        unrecoverable_ = error;
        listener = unrecoverable_listener_;
    }
    spdlog::critical("the {} backend failed beyond recovery, nothing more runs in this process: {}",
                     backend_->name(), error.ToString());
    if (listener) {
        listener(error);
    }
}

namespace {

constexpr absl::string_view kRestarting =
    "; the server stops serving and exits for its supervisor to restart it: retry the request "
    "after the restart or on another replica";

} // namespace

absl::Status Engine::unless_unrecoverable(const absl::Status& failure) {
    if (failure.ok()) {
        return failure;
    }
    const absl::Status error = backend_->unrecoverable_error();
    if (error.ok()) {
        return failure;
    }
    note_unrecoverable(error);
    return absl::UnavailableError(absl::StrCat(failure.message(), "; the ", backend_->name(),
                                               " backend cannot run again in this process",
                                               kRestarting));
}

absl::Status Engine::refuse_if_unrecoverable() {
    absl::Status error = unrecoverable_error();
    if (error.ok()) {
        error = backend_->unrecoverable_error();
        if (error.ok()) {
            return error;
        }
        note_unrecoverable(error);
    }
    return absl::UnavailableError(absl::StrCat("the ", backend_->name(),
                                               " backend failed beyond recovery (", error.message(),
                                               ")", kRestarting));
}

void Engine::update_cache_metrics() {
    if (!metrics_) {
        return;
    }
    metrics_->cache_entries(static_cast<int64_t>(cache_.entries().size()));
    metrics_->device_memory(device_memory());
}

absl::StatusOr<v1::CompileResponse> Engine::compile(const v1::CompileRequest& req,
                                                    const CancelCheck& cancelled) {
    EINSUMMABLE_ASSIGN_OR_RETURN(
        Shape shape, request_shape(req.model(), req.dims(), req.options(), req.sequence_ends()));
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
        Shape shape, request_shape(req.model(), req.dims(), req.options(), req.sequence_ends()));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), cancelled));
    const runtime::Plan& plan = *ready.plan->plan;
    v1::ExplainResponse response;
    response.set_text(
        absl::StrCat("plan: ", ready.plan->key.to_string(), "\n", machine_text(), plan.explain()));
    response.set_predicted_cost_bytes(plan.logical_plan().total.bytes.total());
    response.set_simulated_exchange_seconds(plan.physical_plan().simulated_s());
    return response;
}

absl::StatusOr<std::vector<std::string>> Engine::check_execute(const v1::ExecuteRequest& req,
                                                               const Model& model,
                                                               const ir::Graph& graph) const {
    std::vector<std::string> outputs;
    if (std::optional<std::string> missing = model.missing_weight()) {
        return absl::FailedPreconditionError(
            absl::StrCat("weight '", *missing, "' of model '", model.name(),
                         "' has not been uploaded (UploadTensor)"));
    }
    std::set<std::string> given;
    for (const v1::NamedTensor& named : req.inputs()) {
        const std::string& name = named.name();
        if (model.is_weight(name)) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input ", graphdef::quote_name(name), " is a weight of model '", model.name(),
                "'; weights are uploaded with UploadTensor, not sent with "
                "Execute"));
        }
        std::optional<ir::TensorId> id = graph.find_tensor(name);
        if (!id || !graph.tensor(*id).is_input()) {
            return absl::InvalidArgumentError(
                absl::StrCat(graphdef::quote_name(name), " is not an input of model '",
                             model.name(), "' (inputs: ", names_or_none(model.inputs()), ")"));
        }
        if (!given.insert(name).second) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' is given twice"));
        }
        const ir::TensorType& type = graph.tensor(*id).type;
        const v1::Tensor& tensor = named.tensor();
        if (to_wire_dtype(type.dtype) != tensor.dtype()) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", name, "' is ", ir::dtype_name(type.dtype), " (",
                             type.to_string(), "); got ", wire_dtype_name(tensor.dtype())));
        }
        const std::vector<int64_t> shape = type.shape();
        if (!std::equal(shape.begin(), shape.end(), tensor.shape().begin(), tensor.shape().end())) {
            return absl::InvalidArgumentError(absl::StrCat(
                "input '", name, "' has shape ", shape_string(shape), " (", type.to_string(),
                "); got ",
                shape_string({tensor.shape().data(), static_cast<size_t>(tensor.shape_size())})));
        }
        if (static_cast<int64_t>(tensor.data().size()) != type.bytes()) {
            return absl::InvalidArgumentError(absl::StrCat("input '", name, "' ", type.to_string(),
                                                           " takes ", type.bytes(), " bytes; got ",
                                                           tensor.data().size()));
        }
    }
    for (const std::string& input : model.inputs()) {
        if (!given.count(input)) {
            return absl::InvalidArgumentError(
                absl::StrCat("input '", input, "' of model '", model.name(),
                             "' is missing (inputs: ", names_or_none(model.inputs()), ")"));
        }
    }
    std::set<std::string> requested;
    for (const std::string& output : req.outputs()) {
        std::optional<ir::TensorId> id = graph.find_tensor(output);
        if (!id || !graph.tensor(*id).saved) {
            return absl::InvalidArgumentError(absl::StrCat(
                "output ", graphdef::quote_name(output), " is not a saved tensor of model '",
                model.name(), "' (saved: ", names_or_none(model.saved()), ")"));
        }
        if (!requested.insert(output).second) {
            return absl::InvalidArgumentError(
                absl::StrCat("output '", output, "' is requested twice"));
        }
        outputs.push_back(output);
    }
    if (outputs.empty()) {
        for (ir::TensorId id : graph.saved()) {
            outputs.push_back(graph.tensor(id).name);
        }
    }
    int64_t reply_bytes = 0;
    for (const std::string& output : outputs) {
        reply_bytes += graph.tensor(*graph.find_tensor(output)).type.bytes();
    }
    if (reply_bytes > options_.max_message_bytes) {
        return absl::ResourceExhaustedError(
            absl::StrCat("the outputs (", absl::StrJoin(outputs, ", "), ") take ", reply_bytes,
                         " bytes; a reply may take at most ", options_.max_message_bytes,
                         " (--max_message_bytes)"));
    }
    return outputs;
}

absl::StatusOr<runtime::Plan::Lease> Engine::acquire_instance(runtime::Plan& plan,
                                                              const CancelCheck& cancelled) {
    if (std::optional<runtime::Plan::Lease> free = plan.try_acquire()) {
        return std::move(*free);
    }
    if (!cancelled) {
        return plan.acquire();
    }
    // Requests wait in arrival order, each woken only when an instance is handed to it or when
    // the watcher finds it cancelled; only waiting requests are watched.
    std::unique_ptr<CancelWatcher::Watch> watch = cancel_watcher_->watch(cancelled);
    std::optional<runtime::Plan::Lease> lease = plan.acquire(watch->token());
    if (!lease) {
        return watch->status();
    }
    return std::move(*lease);
}

absl::StatusOr<double> Engine::run_on_instance(const ReadyPlan& ready, const LeaseStep& load,
                                               const LeaseStep& offload,
                                               const CancelCheck& cancelled) {
    CachedPlan& cached = *ready.plan;
    runtime::Plan& plan = *cached.plan;
    double run_seconds = 0.0;
    {
        EINSUMMABLE_ASSIGN_OR_RETURN(runtime::Plan::Lease acquired,
                                     acquire_instance(plan, cancelled));
        runtime::Plan::Lease& lease = acquired;
        // A request that waited for the instance while the backend failed does not run.
        EINSUMMABLE_RETURN_IF_ERROR(refuse_if_unrecoverable());
        struct Running { // the gauge counts this execute while it holds the instance
            Metrics* metrics;
            explicit Running(Metrics* m) : metrics(m) {
                if (metrics)
                    metrics->executions_running_add(1);
            }
            ~Running() {
                if (metrics)
                    metrics->executions_running_add(-1);
            }
        } running(metrics_.get());
        if (options_.execute_delay_ms > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(options_.execute_delay_ms));
        }
        if (cancelled) {
            EINSUMMABLE_RETURN_IF_ERROR(cancelled());
        }
        if (absl::Status status = refresh_weights(*ready.model, plan, lease); !status.ok()) {
            return unless_unrecoverable(status);
        }
        const Clock::time_point start = Clock::now();
        if (absl::Status status = load(lease); !status.ok()) {
            return unless_unrecoverable(status);
        }
        if (absl::Status status = lease.execute(); !status.ok()) {
            return unless_unrecoverable(
                with_prefix(status, absl::StrCat("model '", ready.model->name(), "': ")));
        }
        if (absl::Status status = offload(lease); !status.ok()) {
            return unless_unrecoverable(status);
        }
        run_seconds = seconds_since(start);
    }
    std::vector<std::vector<int64_t>> moved;
    {
        // Bytes moved since the last report: the plan's running totals less what was reported
        // (requests on other instances may add theirs to either report).
        std::lock_guard<std::mutex> lock(cached.report_mutex);
        std::vector<std::vector<int64_t>> total = plan.bytes_moved();
        moved = total;
        if (cached.bytes_moved_reported.size() == total.size()) {
            for (size_t src = 0; src < total.size(); ++src) {
                for (size_t dst = 0; dst < total[src].size(); ++dst) {
                    moved[src][dst] -= cached.bytes_moved_reported[src][dst];
                }
            }
        }
        cached.bytes_moved_reported = std::move(total);
    }
    if (metrics_) {
        metrics_->execute(ready.model->name(), run_seconds);
        metrics_->predicted_exchange(ready.model->name(), plan.physical_plan().simulated_s());
        for (size_t src = 0; src < moved.size(); ++src) {
            for (size_t dst = 0; dst < moved[src].size(); ++dst) {
                metrics_->bytes_moved(static_cast<int>(src), static_cast<int>(dst),
                                      moved[src][dst]);
            }
        }
    }
    return run_seconds;
}

namespace {

// `tensor` of `graph` as a reply's tensor: its dtype and shape, with dimension 0 divided by
// `slots` (one request's rows of a batch), and `bytes`.
void set_output(v1::NamedTensor* out, const ir::GraphTensor& tensor, int slots,
                absl::Span<const std::byte> bytes) {
    out->set_name(tensor.name);
    out->mutable_tensor()->set_dtype(to_wire_dtype(tensor.type.dtype));
    std::vector<int64_t> shape = tensor.type.shape();
    if (!shape.empty()) {
        shape[0] /= slots;
    }
    for (int64_t size : shape) {
        out->mutable_tensor()->add_shape(size);
    }
    out->mutable_tensor()->set_data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

const std::string* input_data(const v1::ExecuteRequest& req, const std::string& name) {
    for (const v1::NamedTensor& named : req.inputs()) {
        if (named.name() == name) {
            return &named.tensor().data();
        }
    }
    return nullptr;
}

} // namespace

absl::StatusOr<v1::ExecuteResponse> Engine::execute(const v1::ExecuteRequest& req,
                                                    const CancelCheck& cancelled) {
    // Every check that needs no plan runs before a compile: a bad request costs nothing.
    EINSUMMABLE_ASSIGN_OR_RETURN(
        Shape shape, request_shape(req.model(), req.dims(), req.options(), req.sequence_ends()));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::string> outputs,
                                 check_execute(req, *shape.model, shape.graph));
    if (shape.model->batching()) {
        return execute_batched(req, std::move(shape), std::move(outputs), cancelled);
    }

    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), cancelled));
    v1::ExecuteResponse response;
    const ir::Graph& graph = ready.plan->plan->graph();
    absl::StatusOr<double> run_seconds = run_on_instance(
        ready,
        [&](runtime::Plan::Lease& lease) {
            for (const v1::NamedTensor& named : req.inputs()) {
                const std::string& data = named.tensor().data();
                EINSUMMABLE_RETURN_IF_ERROR(lease.load_bytes(
                    named.name(), {reinterpret_cast<const std::byte*>(data.data()), data.size()}));
            }
            return absl::OkStatus();
        },
        [&](runtime::Plan::Lease& lease) {
            for (const std::string& output : outputs) {
                EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                                             lease.offload_bytes(output));
                set_output(response.add_outputs(), graph.tensor(*graph.find_tensor(output)), 1,
                           bytes);
            }
            return absl::OkStatus();
        },
        cancelled);
    if (!run_seconds.ok()) {
        return run_seconds.status();
    }
    response.set_cache_hit(ready.cache_hit);
    response.set_execute_seconds(*run_seconds);
    return response;
}

absl::StatusOr<v1::ExecuteResponse> Engine::execute_batched(const v1::ExecuteRequest& req,
                                                            Shape shape,
                                                            std::vector<std::string> outputs,
                                                            const CancelCheck& cancelled) {
    const Model& model = *shape.model;
    const BatchSpec& spec = *model.batching();
    // Requests batch when their plans would be one: same model, dims, options and ends.
    const runtime::CompileOptions& options = shape.options;
    const std::string key = absl::StrCat(
        model.id(), " ", bindings_string(shape.bindings), " devices=", options.devices,
        " planner=", logical::planner_name(options.planner),
        " objective=", physical::objective_name(options.objective), " seed=", options.seed,
        " schedule=", exprog::synthesis_mode_name(options.schedule),
        " ends=", absl::StrJoin(shape.sequence_ends, ","));
    Batcher::Settings settings;
    settings.max_size = spec.max_size;
    settings.preferred = spec.preferred;
    settings.delay =
        std::chrono::microseconds(spec.max_queue_delay_us.value_or(options_.max_queue_delay_us));
    auto item = std::make_shared<Batcher::Item>();
    item->request = &req;
    item->outputs = std::move(outputs);
    return batcher_.submit(
        key, settings, std::move(item),
        [this, &shape](std::vector<std::shared_ptr<Batcher::Item>>& batch) {
            return run_batch(shape, batch);
        },
        cancelled);
}

int Engine::run_batch(const Shape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch) {
    const int requests = static_cast<int>(batch.size());
    const int slots = one.model->batching()->slots_for(requests);
    int concurrency = 1;
    absl::Status status = run_slots(one, batch, slots, &concurrency);
    if (!status.ok() && requests > 1 && absl::IsResourceExhausted(status)) {
        // The batch does not fit where its requests alone may: run them one by one.
        spdlog::warn("model '{}': a batch of {} requests ({} slots) failed, running them one by "
                     "one: {}",
                     one.model->name(), requests, slots, status.ToString());
        for (const std::shared_ptr<Batcher::Item>& item : batch) {
            std::vector<std::shared_ptr<Batcher::Item>> alone = {item};
            if (absl::Status single = run_slots(one, alone, 1, &concurrency); !single.ok()) {
                item->result = single;
            }
        }
        return concurrency;
    }
    if (!status.ok()) {
        for (const std::shared_ptr<Batcher::Item>& item : batch) {
            item->result = status;
        }
    }
    return concurrency;
}

absl::Status Engine::run_slots(const Shape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch,
                               int slots, int* concurrency) {
    const Model& model = *one.model;
    const std::string& symbol = model.batching()->symbol;
    const int requests = static_cast<int>(batch.size());
    const int64_t length = one.bindings.at(symbol);
    if (length > kMaxDimensionSize / slots) {
        return absl::ResourceExhaustedError(
            absl::StrCat("model '", model.name(), "': a batch of ", slots, " requests of '", symbol,
                         "' = ", length, " exceeds the largest dimension, ", kMaxDimensionSize));
    }
    graphdef::Bindings bindings = one.bindings;
    bindings[symbol] = length * slots;
    std::vector<int64_t> ends;
    ends.reserve(one.sequence_ends.size() * slots);
    for (int slot = 0; slot < slots; ++slot) {
        for (int64_t end : one.sequence_ends) {
            ends.push_back(slot * length + end);
        }
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(Shape shape,
                                 shape_for(one.model, std::move(bindings),
                                           batch.front()->request->options(), std::move(ends)));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), nullptr));
    *concurrency = ready.plan->plan->instances();
    const ir::Graph& graph = ready.plan->plan->graph();
    // The union of the outputs asked for, in graph order.
    std::vector<std::string> outputs;
    for (ir::TensorId id : graph.saved()) {
        const std::string& name = graph.tensor(id).name;
        for (const std::shared_ptr<Batcher::Item>& item : batch) {
            if (std::find(item->outputs.begin(), item->outputs.end(), name) !=
                item->outputs.end()) {
                outputs.push_back(name);
                break;
            }
        }
    }
    std::vector<v1::ExecuteResponse> responses(requests);
    absl::StatusOr<double> run_seconds = run_on_instance(
        ready,
        [&](runtime::Plan::Lease& lease) {
            // Each input is the requests' rows end to end; the idle slots repeat the last
            // request (data any request accepts), whose results are dropped.
            for (const std::string& name : model.inputs()) {
                const std::string* last = input_data(*batch.back()->request, name);
                std::vector<std::byte> packed(last->size() * slots);
                for (int slot = 0; slot < slots; ++slot) {
                    const std::string* data =
                        slot < requests ? input_data(*batch[slot]->request, name) : last;
                    std::memcpy(packed.data() + slot * last->size(), data->data(), data->size());
                }
                EINSUMMABLE_RETURN_IF_ERROR(lease.load_bytes(name, packed));
            }
            return absl::OkStatus();
        },
        [&](runtime::Plan::Lease& lease) {
            for (const std::string& output : outputs) {
                EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                                             lease.offload_bytes(output));
                const ir::GraphTensor& tensor = graph.tensor(*graph.find_tensor(output));
                const size_t rows = bytes.size() / slots;
                for (int slot = 0; slot < requests; ++slot) {
                    const std::vector<std::string>& wanted = batch[slot]->outputs;
                    if (std::find(wanted.begin(), wanted.end(), output) == wanted.end()) {
                        continue;
                    }
                    set_output(responses[slot].add_outputs(), tensor, slots,
                               absl::Span<const std::byte>(bytes).subspan(slot * rows, rows));
                }
            }
            return absl::OkStatus();
        },
        nullptr);
    if (!run_seconds.ok()) {
        return run_seconds.status();
    }
    if (metrics_) {
        std::vector<double> queued;
        for (const std::shared_ptr<Batcher::Item>& item : batch) {
            queued.push_back(item->queue_seconds);
        }
        metrics_->batch(model.name(), requests, queued);
    }
    for (int slot = 0; slot < requests; ++slot) {
        v1::ExecuteResponse& response = responses[slot];
        // Outputs in the order the request asked for them.
        const std::vector<std::string>& wanted = batch[slot]->outputs;
        std::sort(response.mutable_outputs()->begin(), response.mutable_outputs()->end(),
                  [&](const v1::NamedTensor& a, const v1::NamedTensor& b) {
                      return std::find(wanted.begin(), wanted.end(), a.name()) <
                             std::find(wanted.begin(), wanted.end(), b.name());
                  });
        response.set_cache_hit(ready.cache_hit);
        response.set_execute_seconds(*run_seconds);
        response.set_batch_size(requests);
        response.set_batch_padding(slots - requests);
        response.set_queue_seconds(batch[slot]->queue_seconds);
        batch[slot]->result = std::move(response);
    }
    return absl::OkStatus();
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
    }
    return response;
}

absl::Status Engine::unregister_model(const v1::UnregisterModelRequest& req) {
    EINSUMMABLE_RETURN_IF_ERROR(models_.unregister(req.model()));
    cache_.erase_model(req.model());
    {
        std::lock_guard<std::mutex> lock(residency_mutex_);
        residency_.erase(req.model());
    }
    if (metrics_) {
        metrics_->erase_model(req.model());
    }
    update_cache_metrics();
    spdlog::info("unregistered model '{}'", req.model());
    return absl::OkStatus();
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
