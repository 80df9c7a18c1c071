#include "runtime/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/dense_block.h"
#include "compiler/physical/plan_record.h"
#include "compiler/support/status_macros.h"
#include "runtime/saved_output.h"

namespace einsummable::runtime {

double output_tolerance(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return 1e-2;
    case ir::DType::bf16:
        return 5e-2;
    case ir::DType::f32:
    case ir::DType::f64:
        return 1e-5;
    case ir::DType::i32:
    case ir::DType::i64:
        return 0.0; // copied, never computed: exact
    }
    return 1e-5;
}

namespace {

// How the pipeline compiles for these options.
pipeline::Options pipeline_options(const CompileOptions& options) {
    pipeline::Options out;
    out.devices = options.devices;
    out.planner = options.planner;
    out.seed = options.seed;
    out.schedule = options.schedule;
    out.synthesis_iterations = options.synthesis_iterations;
    out.objective = options.objective;
    out.cancellation = options.cancellation.get();
    out.resident = options.resident ? &options.resident->layout() : nullptr;
    out.resident_inputs = options.resident_inputs;
    out.resident_defines = options.resident_defines;
    out.weights = options.weights;
    out.batch_invariant = options.batch_invariant;
    out.cache = options.exchange_cache.get();
    out.micro_batches = options.micro_batches;
    return out;
}

// The machine the plan is compiled for: the backend's devices and kernels, the options' topology
// and device memory.
pipeline::Machine machine_of(const CompileOptions& options, const Backend& backend) {
    pipeline::Machine machine;
    machine.backend = backend.name();
    machine.devices = backend.devices();
    machine.topology = options.topology;
    machine.device_memory_bytes = options.device_memory_bytes;
    machine.attention_splits = backend.attention_splits();
    return machine;
}

} // namespace

absl::StatusOr<std::unique_ptr<Plan>> Plan::start(ir::Graph graph, const CompileOptions& options,
                                                  std::shared_ptr<Backend> backend) {
    // The pipeline checks these again (with the backend's devices); the backend must be there
    // to describe the machine.
    EINSUMMABLE_RETURN_IF_ERROR(pipeline::check_options(graph, pipeline_options(options)));
    if (!backend) {
        return absl::InvalidArgumentError("no backend to run the plan on");
    }
    std::unique_ptr<Plan> plan(new Plan());
    plan->graph_ = std::move(graph);
    plan->options_ = options;
    plan->backend_ = std::move(backend);
    return plan;
}

absl::Status Plan::allocate(const support::Cancellation* cancellation) {
    if (!compiled_.resident_names.empty()) {
        if (compiled_.defined_layout.has_value()) {
            absl::StatusOr<std::shared_ptr<ResidentWeights>> weights =
                ResidentWeights::allocate(*std::move(compiled_.defined_layout), *backend_);
            compiled_.defined_layout.reset();
            if (!weights.ok()) {
                return weights.status();
            }
            resident_ = *std::move(weights);
        } else {
            resident_ = options_.resident;
        }
        EINSUMMABLE_ASSIGN_OR_RETURN(states_,
                                     physical::resident_states(graph_, compiled_.resident_names));
    }
    // Instances: as asked, within what the memory beside the resident weights holds.
    int count = options_.instances < 0 ? 1 : options_.instances;
    const int64_t capacity = options_.device_memory_bytes;
    if (capacity > 0) {
        int64_t fit = kMaxAutoInstances;
        bool bounded = false;
        for (const DeviceNeed& device : compiled_.need) {
            const int64_t per_instance = device.total() - device.resident;
            if (per_instance > 0) {
                const int64_t here = (capacity - device.resident) / per_instance;
                fit = bounded ? std::min(fit, here) : here;
                bounded = true;
            }
        }
        fit = std::max<int64_t>(fit, 1);
        count = count == 0 ? static_cast<int>(std::min<int64_t>(fit, kMaxAutoInstances))
                           : static_cast<int>(std::min<int64_t>(fit, count));
    } else if (count == 0) {
        count = kInstancesWithoutCapacity;
    }
    instances_.resize(count);
    for (Instance& instance : instances_) {
        EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<Executable> executable,
                                     backend_->prepare(compiled_.exec,
                                                       resident_ ? resident_->memory() : nullptr,
                                                       cancellation));
        instance.executable = std::move(executable);
    }
    return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::compile(ir::Graph graph, const CompileOptions& options,
                                                    std::shared_ptr<Backend> backend) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                                 start(std::move(graph), options, std::move(backend)));
    EINSUMMABLE_ASSIGN_OR_RETURN(plan->compiled_,
                                 pipeline::compile(plan->graph_, pipeline_options(options),
                                                   machine_of(options, *plan->backend_)));
    // Preparing the backend is bounded by the plan's size; polled before it and by the backend
    // as it prepares (zeroing arenas takes seconds for a large plan on the CPU backend).
    EINSUMMABLE_RETURN_IF_ERROR(
        support::check_cancelled(options.cancellation.get(), "the backend's preparation"));
    EINSUMMABLE_RETURN_IF_ERROR(plan->allocate(options.cancellation.get()));
    return plan;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::restore(ir::Graph graph, const CompileOptions& options,
                                                    absl::string_view record,
                                                    std::shared_ptr<Backend> backend) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::unique_ptr<Plan> plan,
                                 start(std::move(graph), options, std::move(backend)));
    EINSUMMABLE_ASSIGN_OR_RETURN(plan->compiled_,
                                 pipeline::restore(plan->graph_, pipeline_options(options),
                                                   machine_of(options, *plan->backend_), record));
    EINSUMMABLE_RETURN_IF_ERROR(plan->allocate(nullptr)); // restore() ignores the cancellation
    return plan;
}

std::string Plan::record() const {
    return physical::plan_record(graph_, compiled_.logical, compiled_.physical);
}

const ir::GraphTensor* Plan::tensor(absl::string_view name) const {
    std::optional<ir::TensorId> id = graph_.find_tensor(name);
    return id ? &graph_.tensor(*id) : nullptr;
}

bool Plan::is_resident(absl::string_view name) const {
    return compiled_.resident_names.count(std::string(name)) > 0;
}

int Plan::take_free(int wanted) {
    for (size_t i = 0; i < instances_.size(); ++i) {
        if (!instances_[i].busy && (wanted < 0 || wanted == static_cast<int>(i))) {
            instances_[i].busy = true;
            return static_cast<int>(i);
        }
    }
    return -1;
}

int Plan::take_or_wait(std::unique_lock<std::mutex>& lock, Waiter& waiter,
                       const std::stop_token* stop) {
    if (const int index = take_free(waiter.wanted); index >= 0) {
        return index;
    }
    const auto position = waiters_.insert(waiters_.end(), &waiter);
    while (waiter.granted < 0) {
        if (stop != nullptr && stop->stop_requested()) {
            // Stopped before an instance was handed over (release() takes the waiter off the
            // queue when it hands one over).
            waiters_.erase(position);
            return -1;
        }
        waiter.wake.wait(lock);
        ++waiter_wakeups_;
    }
    return waiter.granted;
}

Plan::Lease Plan::acquire() {
    Waiter waiter;
    std::unique_lock<std::mutex> lock(mutex_);
    return Lease(this, take_or_wait(lock, waiter, nullptr));
}

std::optional<Plan::Lease> Plan::acquire(std::stop_token stop) {
    Waiter waiter;
    // A stop wakes this waiter alone. Made before the lock is taken, and gone after it is
    // released: the callback takes mutex_ (so that the waiter cannot miss it between looking at
    // the token and sleeping), and runs here at once if the stop was already requested.
    std::stop_callback on_stop(stop, [&] {
        std::lock_guard<std::mutex> lock(mutex_);
        waiter.wake.notify_one();
    });
    std::unique_lock<std::mutex> lock(mutex_);
    const int index = take_or_wait(lock, waiter, &stop);
    lock.unlock();
    if (index < 0) {
        return std::nullopt;
    }
    return Lease(this, index);
}

std::optional<Plan::Lease> Plan::try_acquire() {
    std::lock_guard<std::mutex> lock(mutex_);
    const int index = take_free(-1);
    if (index < 0) {
        return std::nullopt;
    }
    return Lease(this, index);
}

Plan::Lease Plan::acquire_instance(int index) {
    Waiter waiter;
    waiter.wanted = index;
    std::unique_lock<std::mutex> lock(mutex_);
    take_or_wait(lock, waiter, nullptr);
    return Lease(this, index);
}

void Plan::release(int index) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = waiters_.begin(); it != waiters_.end(); ++it) {
        Waiter* waiter = *it;
        if (waiter->wanted < 0 || waiter->wanted == index) {
            // Handed over busy: no caller arriving now can take it before the waiter runs.
            // Notified under the lock: the waiter (on its own stack) may return, and its
            // condition variable go, as soon as the lock is free.
            waiter->granted = index;
            waiters_.erase(it);
            waiter->wake.notify_one();
            return;
        }
    }
    instances_[index].busy = false;
}

int Plan::waiting() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<int>(waiters_.size());
}

int64_t Plan::waiter_wakeups() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return waiter_wakeups_;
}

std::vector<float> Plan::to_values(absl::string_view name,
                                   const std::vector<std::byte>& bytes) const {
    const std::vector<physical::BufferId>& blocks = compiled_.exec.outputs.at(std::string(name));
    const ir::DType dtype = compiled_.exec.buffers[blocks.front()].dtype;
    const int64_t elements = physical::saved_output_box(compiled_.exec, blocks).volume();
    std::vector<float> values(elements);
    ir::to_f32(dtype, bytes.data(), values.data(), elements);
    return values;
}

absl::Status Plan::load_into(Instance& instance, absl::string_view name,
                             absl::Span<const std::byte> bytes) {
    const ir::GraphTensor* info = tensor(name);
    if (info == nullptr || !info->is_input()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is not an input of the graph"));
    }
    if (static_cast<int64_t>(bytes.size()) != info->type.bytes()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", name, "' ", info->type.to_string(), " takes ", info->type.bytes(),
            " bytes (", ir::dtype_name(info->type.dtype), "); got ", bytes.size()));
    }
    EINSUMMABLE_RETURN_IF_ERROR(ir::check_input_values(graph_, *graph_.find_tensor(name), bytes));
    if (is_resident(info->name)) {
        return resident_->write(info->name, bytes);
    }
    const int64_t element_bytes = ir::dtype_size(info->type.dtype);
    const ir::Box whole = info->type.box();
    auto it = compiled_.exec.input_blocks.find(info->name);
    if (it != compiled_.exec.input_blocks.end()) { // an input no operator reads has no blocks
        std::vector<std::byte> block;
        for (physical::BufferId id : it->second) {
            const physical::Buffer& buffer = compiled_.exec.buffers[id];
            block.resize(buffer.bytes());
            ir::copy_region(bytes.data(), whole, block.data(), buffer.box, buffer.box,
                            element_bytes);
            EINSUMMABLE_RETURN_IF_ERROR(instance.executable->write_buffer(id, block));
        }
    }
    instance.loaded.insert(info->name);
    return absl::OkStatus();
}

absl::Status Plan::execute_on(Instance& instance) {
    for (ir::TensorId id : graph_.inputs()) {
        const std::string& name = graph_.tensor(id).name;
        // A state starts zeroed: the plan writes it.
        const bool loaded = is_resident(name) ? states_.count(name) > 0 || resident_->written(name)
                                              : instance.loaded.count(name) > 0;
        if (!loaded) {
            return absl::FailedPreconditionError(absl::StrCat(
                "input '", name, "' ", graph_.tensor(id).type.to_string(), " was never loaded"));
        }
    }
    {
        std::shared_lock<std::shared_mutex> reading;
        std::unique_lock<std::shared_mutex> updating;
        if (resident_ && !states_.empty()) {
            updating = resident_->lock_for_update();
        } else if (resident_) {
            reading = resident_->lock_for_run();
        }
        EINSUMMABLE_RETURN_IF_ERROR(instance.executable->run());
    }
    std::lock_guard<std::mutex> lock(mutex_);
    ++instance.executions;
    return absl::OkStatus();
}

absl::StatusOr<std::vector<std::byte>> Plan::offload_from(Instance& instance,
                                                          absl::string_view name) {
    auto it = compiled_.exec.outputs.find(std::string(name));
    if (it == compiled_.exec.outputs.end()) {
        std::vector<std::string> saved;
        for (const auto& [output, blocks] : compiled_.exec.outputs) {
            saved.push_back(output);
        }
        return absl::NotFoundError(absl::StrCat(
            "'", name, "' is not a saved output (saved: ", absl::StrJoin(saved, ", "), ")"));
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (instance.executions == 0) {
            return absl::FailedPreconditionError(
                absl::StrCat("offload of '", name, "' before the plan was executed"));
        }
    }
    // Each block from the device that computed it, into its part of the host tensor.
    return read_saved_output(*instance.executable, compiled_.exec, name);
}

absl::Status Plan::load(absl::string_view name, absl::Span<const float> values) {
    return acquire_instance(0).load(name, values);
}

absl::Status Plan::load_bytes(absl::string_view name, absl::Span<const std::byte> bytes) {
    return acquire_instance(0).load_bytes(name, bytes);
}

absl::Status Plan::execute() {
    return acquire_instance(0).execute();
}

absl::StatusOr<std::vector<std::byte>> Plan::offload_bytes(absl::string_view name) {
    return acquire_instance(0).offload_bytes(name);
}

absl::StatusOr<std::vector<float>> Plan::offload(absl::string_view name) {
    return acquire_instance(0).offload(name);
}

std::vector<std::vector<int64_t>> Plan::bytes_moved() const {
    std::vector<std::vector<int64_t>> total(compiled_.exec.devices,
                                            std::vector<int64_t>(compiled_.exec.devices, 0));
    for (const Instance& instance : instances_) {
        const std::vector<std::vector<int64_t>> moved = instance.executable->bytes_moved();
        for (size_t src = 0; src < moved.size() && src < total.size(); ++src) {
            for (size_t dst = 0; dst < moved[src].size() && dst < total[src].size(); ++dst) {
                total[src][dst] += moved[src][dst];
            }
        }
    }
    return total;
}

std::vector<int64_t> Plan::allocated_bytes() const {
    std::vector<int64_t> total(compiled_.exec.devices, 0);
    for (const Instance& instance : instances_) {
        const std::vector<int64_t> bytes = instance.executable->allocated_bytes();
        for (size_t d = 0; d < bytes.size() && d < total.size(); ++d) {
            total[d] += bytes[d];
        }
    }
    return total;
}

int64_t Plan::executions() const {
    std::lock_guard<std::mutex> lock(mutex_);
    int64_t total = 0;
    for (const Instance& instance : instances_) {
        total += instance.executions;
    }
    return total;
}

Plan::Lease::~Lease() {
    if (plan_ != nullptr) {
        plan_->release(index_);
    }
}

absl::Status Plan::Lease::load(absl::string_view name, absl::Span<const float> values) {
    const ir::GraphTensor* info = plan_->tensor(name);
    if (info == nullptr || !info->is_input()) {
        return absl::InvalidArgumentError(
            absl::StrCat("'", name, "' is not an input of the graph (inputs: ",
                         absl::StrJoin(plan_->graph_.inputs(), ", ",
                                       [&](std::string* out, ir::TensorId id) {
                                           absl::StrAppend(out, plan_->graph_.tensor(id).name);
                                       }),
                         ")"));
    }
    if (static_cast<int64_t>(values.size()) != info->type.elements()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name, "' ", info->type.to_string(), " has ",
                         info->type.elements(), " elements; got ", values.size()));
    }
    std::vector<std::byte> bytes(info->type.bytes());
    ir::from_f32(info->type.dtype, values.data(), bytes.data(), values.size());
    return load_bytes(name, bytes);
}

absl::Status Plan::Lease::load_bytes(absl::string_view name, absl::Span<const std::byte> bytes) {
    return plan_->load_into(plan_->instances_[index_], name, bytes);
}

absl::Status Plan::Lease::execute() {
    return plan_->execute_on(plan_->instances_[index_]);
}

absl::StatusOr<std::vector<std::byte>> Plan::Lease::offload_bytes(absl::string_view name) {
    return plan_->offload_from(plan_->instances_[index_], name);
}

absl::StatusOr<std::vector<float>> Plan::Lease::offload(absl::string_view name) {
    EINSUMMABLE_ASSIGN_OR_RETURN(std::vector<std::byte> bytes, offload_bytes(name));
    return plan_->to_values(name, bytes);
}

int64_t Plan::Lease::weights_generation() const {
    return plan_->instances_[index_].weights_generation;
}

void Plan::Lease::set_weights_generation(int64_t generation) {
    plan_->instances_[index_].weights_generation = generation;
}

namespace {

std::string pair_table(const std::vector<std::vector<int64_t>>& bytes) {
    std::string out;
    for (size_t src = 0; src < bytes.size(); ++src) {
        for (size_t dst = 0; dst < bytes[src].size(); ++dst) {
            if (bytes[src][dst] != 0) {
                absl::StrAppend(&out, "  ", src, " -> ", dst, ": ", bytes[src][dst], " B\n");
            }
        }
    }
    return out.empty() ? "  (none)\n" : out;
}

} // namespace

std::string Plan::explain() const {
    std::string out = logical::explain_text(graph_, compiled_.logical);
    absl::StrAppend(&out, "\n", physical::explain_exchanges(graph_, compiled_.physical));
    absl::StrAppend(&out, "\nbytes moved per execute, by device pair (from the programs):\n",
                    pair_table(compiled_.physical.program_bytes()));
    absl::StrAppend(&out, "peak memory per device (static plan): ",
                    absl::StrJoin(compiled_.exec.arena_bytes, ", "), " B\n");
    if (resident_) {
        absl::StrAppend(&out, "resident inputs, read in place (", compiled_.resident_names.size(),
                        ", shared with the model's other plans): ",
                        absl::StrJoin(compiled_.resident_names, ", "),
                        "; resident memory per device: ",
                        absl::StrJoin(resident_->allocated_bytes(), ", "), " B\n");
    }
    if (options_.device_memory_bytes > 0) {
        std::vector<int64_t> weights;
        std::vector<int64_t> activations;
        for (const DeviceNeed& device : compiled_.need) {
            weights.push_back(device.weights);
            activations.push_back(device.activations);
        }
        absl::StrAppend(&out, "device memory: ", options_.device_memory_bytes,
                        " B per device; one instance needs weights ", absl::StrJoin(weights, ", "),
                        " B + activations ", absl::StrJoin(activations, ", "), " B; ",
                        instances_.size(), " instance", instances_.size() == 1 ? "" : "s",
                        compiled_.weights_unreplicated
                            ? "; planned again with its weights unreplicated to fit"
                            : "",
                        "\n");
    }
    if (options_.batch_invariant) {
        // A baseline keeps its fixed rule (logical::PlannerOptions::batch_invariant).
        const int64_t aggregating = std::count_if(
            compiled_.logical.operators.begin(), compiled_.logical.operators.end(),
            [](const logical::OperatorPlan& op) { return logical::aggregates(op.choice); });
        if (aggregating == 0) {
            absl::StrAppend(&out, "batch-invariant: no operator aggregates partial results, so a "
                                  "request's rows do not depend on the requests batched with it\n");
        } else {
            absl::StrAppend(&out, "not batch-invariant: the ",
                            logical::planner_name(options_.planner),
                            " baseline's fixed rule aggregates in ", aggregating, " operator",
                            aggregating == 1 ? "" : "s", "\n");
        }
    }
    absl::StrAppend(&out, "exec graph: ", compiled_.exec.buffers.size(), " buffers, ",
                    compiled_.exec.nodes.size(), " nodes on the ", backend_->name(), " backend\n");
    return out;
}

} // namespace einsummable::runtime
