#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "compiler/support/clock.h"
#include "compiler/support/status_macros.h"
#include "server/batch_layout.h"
#include "server/engine.h"
#include "server/plan_key.h"
#include "server/request_errors.h"
#include "spdlog/spdlog.h"

// The engine's executions: a request run on one of its plan's instances, alone or, for a model
// with batching, packed with others into one execution (Batcher, BatchLayout).
namespace einsummable::server {
namespace {

using Clock = std::chrono::steady_clock;
using support::seconds_since;

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
    // Every check that needs no plan runs before a compile: a bad request costs nothing. The
    // inputs' shapes bind the symbols that dims leaves out.
    EINSUMMABLE_ASSIGN_OR_RETURN(
        RequestShape shape,
        request_shape(req.model(), req.dims(), req.options(), req.sequence_ends(), req.inputs()));
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::string> outputs,
                                 shapes_.execute_outputs(req, *shape.model, shape.graph));
    if (shape.model->batching() && !shape.model->batching()->buckets.empty()) {
        return execute_bucketed(req, std::move(shape), std::move(outputs), cancelled);
    }
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
        EINSUMMABLE_RETURN_IF_ERROR(failure_.refuse_if_unrecoverable());
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
            return failure_.unless_unrecoverable(status);
        }
        const Clock::time_point start = Clock::now();
        if (absl::Status status = load(lease); !status.ok()) {
            return failure_.unless_unrecoverable(status);
        }
        if (absl::Status status = lease.execute(); !status.ok()) {
            return failure_.unless_unrecoverable(
                with_prefix(status, absl::StrCat("model '", ready.model->name(), "': ")));
        }
        if (absl::Status status = offload(lease); !status.ok()) {
            return failure_.unless_unrecoverable(status);
        }
        run_seconds = seconds_since(start);
    }
    report_execution(ready, run_seconds);
    return run_seconds;
}

void Engine::report_execution(const ReadyPlan& ready, double run_seconds) {
    CachedPlan& cached = *ready.plan;
    const runtime::Plan& plan = *cached.plan;
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
}

absl::Status Engine::refresh_weights(const Model& model, const runtime::Plan& plan,
                                     runtime::Plan::Lease& lease) {
    const WeightSnapshot snapshot = model.weights_snapshot();
    const auto generation = static_cast<int64_t>(snapshot.generation);
    EINSUMMABLE_RETURN_IF_ERROR(residency_.write(model, plan, snapshot));
    if (lease.weights_generation() != generation) {
        for (const auto& [name, bytes] : snapshot.values) {
            if (plan.is_resident(name)) {
                continue;
            }
            if (absl::Status status = lease.load_bytes(name, bytes->span()); !status.ok()) {
                return with_prefix(status, absl::StrCat("loading weight '", name, "': "));
            }
        }
        lease.set_weights_generation(generation);
    }
    return absl::OkStatus();
}

absl::StatusOr<v1::ExecuteResponse> Engine::execute_batched(const v1::ExecuteRequest& req,
                                                            RequestShape shape,
                                                            std::vector<std::string> outputs,
                                                            const CancelCheck& cancelled) {
    const Model& model = *shape.model;
    const BatchSpec& spec = *model.batching();
    // Requests batch when their plans would be one: same model, dims, options and ends.
    const std::string key = batch_key(shape);
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

int Engine::run_batch(const RequestShape& one, std::vector<std::shared_ptr<Batcher::Item>>& batch) {
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

absl::Status Engine::run_slots(const RequestShape& one,
                               std::vector<std::shared_ptr<Batcher::Item>>& batch, int slots,
                               int* concurrency) {
    const Model& model = *one.model;
    const int requests = static_cast<int>(batch.size());
    EINSUMMABLE_ASSIGN_OR_RETURN(
        BatchLayout layout, BatchLayout::make(model.name(), model.batching()->symbol, one.bindings,
                                              one.sequence_ends, requests, slots));
    EINSUMMABLE_ASSIGN_OR_RETURN(RequestShape shape,
                                 shapes_.shape_with(one.model, layout.bindings(),
                                                    batch.front()->request->options(),
                                                    layout.sequence_ends()));
    EINSUMMABLE_ASSIGN_OR_RETURN(ReadyPlan ready, plan_for(std::move(shape), nullptr));
    *concurrency = ready.plan->plan->instances();
    const ir::Graph& graph = ready.plan->plan->graph();
    std::vector<const std::vector<std::string>*> wanted;
    for (const std::shared_ptr<Batcher::Item>& item : batch) {
        wanted.push_back(&item->outputs);
    }
    const std::vector<std::string> outputs = BatchLayout::outputs(graph, wanted);
    std::vector<v1::ExecuteResponse> responses(requests);
    absl::StatusOr<double> run_seconds = run_on_instance(
        ready,
        [&](runtime::Plan::Lease& lease) {
            for (const std::string& name : model.inputs()) {
                std::vector<absl::string_view> per_request;
                for (const std::shared_ptr<Batcher::Item>& item : batch) {
                    per_request.push_back(*input_data(*item->request, name));
                }
                EINSUMMABLE_RETURN_IF_ERROR(lease.load_bytes(name, layout.pack(per_request)));
            }
            return absl::OkStatus();
        },
        [&](runtime::Plan::Lease& lease) {
            for (const std::string& output : outputs) {
                EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::byte> bytes,
                                             lease.offload_bytes(output));
                const ir::GraphTensor& tensor = graph.tensor(*graph.find_tensor(output));
                for (int slot = 0; slot < requests; ++slot) {
                    const std::vector<std::string>& asked = batch[slot]->outputs;
                    if (std::find(asked.begin(), asked.end(), output) == asked.end()) {
                        continue;
                    }
                    set_output(responses[slot].add_outputs(), tensor, slots,
                               layout.rows(bytes, slot));
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
        order_outputs(response, batch[slot]->outputs);
        response.set_cache_hit(ready.cache_hit);
        response.set_execute_seconds(*run_seconds);
        response.set_batch_size(requests);
        response.set_batch_padding(slots - requests);
        response.set_queue_seconds(batch[slot]->queue_seconds);
        batch[slot]->result = std::move(response);
    }
    return absl::OkStatus();
}

} // namespace einsummable::server
