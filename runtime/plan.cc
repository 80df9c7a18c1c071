#include "runtime/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "compiler/ir/dense_block.h"
#include "compiler/ir/internal_error.h"
#include "compiler/logical/optimizer.h"
#include "compiler/physical/lower.h"
#include "compiler/physical/plan_record.h"
#include "compiler/physical/resident_layout.h"
#include "compiler/support/status_macros.h"

namespace einsummable::runtime {

exprog::Topology default_topology(int devices) {
    absl::StatusOr<exprog::Topology> a100 = exprog::builtin_topology("dgx-a100");
    EINSUMMABLE_CHECK(a100.ok(), "the built-in dgx-a100 topology must parse");
    if (devices <= a100->num_gpus()) {
        return *std::move(a100);
    }
    absl::StatusOr<exprog::Topology> wide = exprog::Topology::make_switch(
        absl::StrCat("switch-", devices), devices, a100->link_bandwidth(), a100->hbm_bandwidth(),
        a100->latency_s());
    EINSUMMABLE_CHECK(wide.ok(), "a switch with dgx-a100's numbers must be valid");
    absl::StatusOr<exprog::Topology> with_device = wide->with_device(a100->device());
    EINSUMMABLE_CHECK(with_device.ok(), "dgx-a100's device model must be valid");
    return *std::move(with_device);
}

double output_tolerance(ir::DType dtype) {
    switch (dtype) {
    case ir::DType::f16:
        return 1e-2;
    case ir::DType::bf16:
        return 5e-2;
    case ir::DType::f32:
    case ir::DType::f64:
        return 1e-5;
    }
    return 1e-5;
}

namespace {

// The machine the options synthesise for.
exprog::Topology topology_of(const CompileOptions& options) {
    return options.topology ? *options.topology : default_topology(options.devices);
}

} // namespace

absl::StatusOr<std::unique_ptr<Plan>> Plan::start(ir::Graph graph, const CompileOptions& options,
                                                  std::shared_ptr<Backend> backend) {
    if (options.devices < 1) {
        return absl::InvalidArgumentError(
            absl::StrCat("devices must be at least 1 (got ", options.devices, ")"));
    }
    if (options.synthesis_iterations < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "synthesis_iterations must be non-negative (got ", options.synthesis_iterations, ")"));
    }
    EINSUMMABLE_RETURN_IF_ERROR(graph.validate());
    if (!backend) {
        return absl::InvalidArgumentError("no backend to run the plan on");
    }
    if (backend->devices() < options.devices) {
        return absl::InvalidArgumentError(absl::StrCat("the plan needs ", options.devices,
                                                       " devices; the ", backend->name(),
                                                       " backend has ", backend->devices()));
    }
    std::unique_ptr<Plan> plan(new Plan());
    plan->graph_ = std::move(graph);
    plan->options_ = options;
    plan->backend_ = std::move(backend);
    return plan;
}

std::set<std::string> Plan::weight_names() const {
    std::set<std::string> names = options_.weights;
    names.insert(options_.resident_inputs.begin(), options_.resident_inputs.end());
    if (options_.resident) {
        for (const auto& [name, tensor] : options_.resident->layout().tensors) {
            names.insert(name);
        }
    }
    return names;
}

absl::Status Plan::make_plans(physical::Objective objective,
                              const logical::PlannerOptions& planner_options,
                              const exprog::Topology& topology,
                              const physical::PhysicalOptions& physical_options) {
    if (objective == physical::Objective::time) {
        // The search simulates plans on `topology` with the options compiled below, so the
        // plan it finds is timed as it will be built.
        EINSUMMABLE_ASSIGN_OR_RETURN(
            physical::TimeSearchResult found,
            physical::optimize_for_time(graph_, planner_options, topology, physical_options));
        logical_ = std::move(found.plan);
    } else {
        EINSUMMABLE_ASSIGN_OR_RETURN(logical::LogicalPlan logical,
                                     logical::optimize(graph_, planner_options));
        logical_ = std::move(logical);
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(
        physical::PhysicalPlan physical,
        physical::compile_physical(graph_, logical_, topology, physical_options));
    physical_ = std::move(physical);
    return absl::OkStatus();
}

absl::Status Plan::lower_plans(const support::Cancellation* cancellation) {
    // Resident inputs: read in place from the given ones, or laid out as this plan reads them.
    const physical::ResidentLayout* layout =
        options_.resident ? &options_.resident->layout() : nullptr;
    defined_.reset();
    resident_names_.clear();
    if (layout == nullptr && !options_.resident_inputs.empty()) {
        physical::ResidentLayout defined =
            physical::define_resident_layout(graph_, physical_, options_.resident_inputs);
        if (!defined.tensors.empty()) {
            defined_ = std::move(defined);
            layout = &*defined_;
        }
    } else if (layout != nullptr && options_.resident_defines &&
               physical::define_resident_layout(graph_, physical_, options_.resident_inputs) !=
                   *layout) {
        return absl::FailedPreconditionError(
            "the plan lays its resident inputs out differently from the resident weights it "
            "was asked to define again");
    }
    EINSUMMABLE_ASSIGN_OR_RETURN(physical::ExecGraph exec,
                                 physical::lower(graph_, physical_, layout, cancellation));
    exec_ = std::move(exec);
    exec_.batch_invariant = options_.batch_invariant; // the kernels' half of it
    for (const auto& [id, tensor] : physical::pinned_inputs(graph_, layout, options_.devices)) {
        resident_names_.insert(graph_.tensor(id).name);
    }

    // What each device holds for one instance: the resident arena it reads, its own arenas,
    // and of those the blocks of weights it keeps its own copies of.
    need_.assign(options_.devices, DeviceNeed{});
    for (int device = 0; device < options_.devices; ++device) {
        need_[device].device = device;
        if (!resident_names_.empty() && device < static_cast<int>(layout->arena_bytes.size())) {
            need_[device].resident = layout->arena_bytes[device];
        }
        need_[device].weights = need_[device].resident;
        if (device < static_cast<int>(exec_.arena_bytes.size())) {
            need_[device].activations = exec_.arena_bytes[device];
        }
    }
    for (const std::string& name : weight_names()) {
        auto it = exec_.input_blocks.find(name);
        if (it == exec_.input_blocks.end() || is_resident(name)) {
            continue;
        }
        for (physical::BufferId id : it->second) {
            const physical::Buffer& buffer = exec_.buffers[id];
            if (buffer.device < options_.devices) {
                need_[buffer.device].weights += buffer.bytes();
                need_[buffer.device].activations -= buffer.bytes();
            }
        }
    }
    return absl::OkStatus();
}

namespace {

// The device whose need passes `capacity` by the most bytes; null when every one fits.
const DeviceNeed* worst_device(const std::vector<DeviceNeed>& need, int64_t capacity) {
    const DeviceNeed* worst = nullptr;
    for (const DeviceNeed& device : need) {
        if (device.total() > capacity && (worst == nullptr || device.total() > worst->total())) {
            worst = &device;
        }
    }
    return worst;
}

// "device 1 needs 40960 B (weights 16384 B + activations 24576 B) and has 32768 B"
std::string need_text(const DeviceNeed& device, int64_t capacity) {
    return absl::StrCat("device ", device.device, " needs ", device.total(), " B (weights ",
                        device.weights, " B + activations ", device.activations, " B) and has ",
                        capacity, " B");
}

} // namespace

absl::Status Plan::check_memory() const {
    const int64_t capacity = options_.device_memory_bytes;
    if (capacity <= 0) {
        return absl::OkStatus();
    }
    const DeviceNeed* worst = worst_device(need_, capacity);
    if (worst == nullptr) {
        return absl::OkStatus();
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("the plan does not fit in device memory: ", need_text(*worst, capacity)));
}

absl::Status Plan::allocate() {
    if (!resident_names_.empty()) {
        if (defined_.has_value()) {
            absl::StatusOr<std::shared_ptr<ResidentWeights>> weights =
                ResidentWeights::allocate(*std::move(defined_), *backend_);
            defined_.reset();
            if (!weights.ok()) {
                return weights.status();
            }
            resident_ = *std::move(weights);
        } else {
            resident_ = options_.resident;
        }
    }
    // Instances: as asked, within what the memory beside the resident weights holds.
    int count = options_.instances < 0 ? 1 : options_.instances;
    const int64_t capacity = options_.device_memory_bytes;
    if (capacity > 0) {
        int64_t fit = kMaxAutoInstances;
        bool bounded = false;
        for (const DeviceNeed& device : need_) {
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
        EINSUMMABLE_ASSIGN_OR_RETURN(
            std::unique_ptr<Executable> executable,
            backend_->prepare(exec_, resident_ ? resident_->memory() : nullptr));
        instance.executable = std::move(executable);
    }
    return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::compile(ir::Graph graph, const CompileOptions& options,
                                                    std::shared_ptr<Backend> backend) {
    absl::StatusOr<std::unique_ptr<Plan>> started =
        start(std::move(graph), options, std::move(backend));
    if (!started.ok()) {
        return started.status();
    }
    Plan& plan = **started;
    const exprog::Topology topology = topology_of(options);
    physical::PhysicalOptions physical_options;
    physical_options.synthesis.mode = options.schedule;
    physical_options.synthesis.seed = options.seed;
    physical_options.synthesis.iterations = options.synthesis_iterations;
    // Every stage polls the one cancellation (compiler/support/cancellation.h); the plan's
    // decisions never depend on it.
    const support::Cancellation* cancellation = options.cancellation.get();
    physical_options.synthesis.cancellation = cancellation;
    logical::PlannerOptions planner_options{options.devices, options.planner, options.seed,
                                            cancellation};
    // Kept when a plan that does not fit is planned again with its weights unreplicated.
    planner_options.batch_invariant = options.batch_invariant;
    planner_options.attention_splits = plan.backend().attention_splits();
    // Pinned inputs: the planner pays for their tiling, the exchanges read them in place.
    const physical::ResidentLayout* pinned =
        options.resident && !options.resident_defines ? &options.resident->layout() : nullptr;
    planner_options.pinned = physical::pinned_tilings(plan.graph_, pinned, options.devices);
    physical_options.resident = pinned;

    EINSUMMABLE_RETURN_IF_ERROR(
        plan.make_plans(options.objective, planner_options, topology, physical_options));
    // A plan that does not fit, or (defining a layout again) lays it out otherwise, is planned
    // again with its weights unreplicated, unless they are pinned: their layout is fixed. The
    // time objective's fastest plan may hold more activations than the cost objective's: when
    // it does not fit either, the cost objective plans with the weights unreplicated.
    const absl::Status made = plan.lower_plans(cancellation);
    const bool differs = absl::IsFailedPrecondition(made); // lower_plans' one such error
    if (!made.ok() && !differs) {
        return made;
    }
    absl::Status fits = made.ok() ? plan.check_memory() : made;
    if (!fits.ok() && !planner_options.pinned.empty()) {
        return absl::ResourceExhaustedError(
            absl::StrCat(fits.message(), " (its weights are read where the model's layout put "
                                         "them, so it is not planned again)"));
    }
    if (!fits.ok()) {
        const std::set<std::string> weights = plan.weight_names();
        for (ir::TensorId id : plan.graph_.inputs()) {
            if (weights.count(plan.graph_.tensor(id).name)) {
                planner_options.unreplicated.insert(id);
            }
        }
        if (planner_options.unreplicated.empty()) { // no weights named: keep every input whole
            planner_options.unreplicated.insert(plan.graph_.inputs().begin(),
                                                plan.graph_.inputs().end());
        }
        std::vector<physical::Objective> objectives = {options.objective};
        if (options.objective != physical::Objective::cost) {
            objectives.push_back(physical::Objective::cost);
        }
        const std::vector<DeviceNeed> first_need = plan.need_;
        std::vector<DeviceNeed> smallest_need; // of the plans planned again, the one that fits best
        for (physical::Objective objective : objectives) {
            EINSUMMABLE_RETURN_IF_ERROR(
                plan.make_plans(objective, planner_options, topology, physical_options));
            fits = plan.lower_plans(cancellation);
            if (fits.ok()) {
                fits = plan.check_memory();
            }
            if (fits.ok() || !absl::IsResourceExhausted(fits)) {
                break; // fits, or FailedPrecondition: lays the layout out otherwise too
            }
            const int64_t capacity = options.device_memory_bytes;
            if (smallest_need.empty() || worst_device(plan.need_, capacity)->total() <
                                             worst_device(smallest_need, capacity)->total()) {
                smallest_need = plan.need_;
            }
        }
        if (!fits.ok() && !smallest_need.empty()) {
            const int64_t capacity = options.device_memory_bytes;
            std::vector<std::string> names;
            for (ir::TensorId id : planner_options.unreplicated) {
                names.push_back(plan.graph_.tensor(id).name);
            }
            std::string first = "planned with ";
            if (const DeviceNeed* worst = differs ? nullptr : worst_device(first_need, capacity)) {
                first = absl::StrCat(need_text(*worst, capacity), "; planned again with ");
            }
            return absl::ResourceExhaustedError(absl::StrCat(
                "no plan fits in device memory: ", first, absl::StrJoin(names, ", "),
                " unreplicated, ", need_text(*worst_device(smallest_need, capacity), capacity)));
        }
        if (!fits.ok()) {
            return fits;
        }
        plan.weights_unreplicated_ = true;
    }
    // Preparing the backend is bounded by the plan's size; the last point to stop at.
    EINSUMMABLE_RETURN_IF_ERROR(
        support::check_cancelled(cancellation, "the backend's preparation"));
    EINSUMMABLE_RETURN_IF_ERROR(plan.allocate());
    return started;
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::restore(ir::Graph graph, const CompileOptions& options,
                                                    absl::string_view record,
                                                    std::shared_ptr<Backend> backend) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        start(std::move(graph), options, std::move(backend));
    if (!plan.ok()) {
        return plan.status();
    }
    const exprog::Topology topology = topology_of(options);
    logical::PlannerOptions planner_options{options.devices, options.planner, options.seed};
    planner_options.batch_invariant = options.batch_invariant;
    const physical::ResidentLayout* pinned =
        options.resident && !options.resident_defines ? &options.resident->layout() : nullptr;
    planner_options.pinned = physical::pinned_tilings((*plan)->graph_, pinned, options.devices);
    EINSUMMABLE_ASSIGN_OR_RETURN(physical::RestoredPlan restored,
                                 physical::restore_plan((*plan)->graph_, planner_options, topology,
                                                        options.schedule, record, pinned));
    (*plan)->logical_ = std::move(restored.logical);
    (*plan)->physical_ = std::move(restored.physical);
    EINSUMMABLE_RETURN_IF_ERROR((*plan)->lower_plans(nullptr));
    // A record made for more memory than this compile has is refused, not run out of memory.
    EINSUMMABLE_RETURN_IF_ERROR((*plan)->check_memory());
    EINSUMMABLE_RETURN_IF_ERROR((*plan)->allocate());
    return plan;
}

std::string Plan::record() const {
    return physical::plan_record(graph_, logical_, physical_);
}

const ir::GraphTensor* Plan::tensor(absl::string_view name) const {
    std::optional<ir::TensorId> id = graph_.find_tensor(name);
    return id ? &graph_.tensor(*id) : nullptr;
}

bool Plan::is_resident(absl::string_view name) const {
    return resident_names_.count(std::string(name)) > 0;
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
    const physical::Buffer& buffer = exec_.buffers[exec_.outputs.at(std::string(name))];
    std::vector<float> values(buffer.elements());
    ir::to_f32(buffer.dtype, bytes.data(), values.data(), buffer.elements());
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
    if (is_resident(info->name)) {
        return resident_->write(info->name, bytes);
    }
    const int64_t element_bytes = ir::dtype_size(info->type.dtype);
    const ir::Box whole = info->type.box();
    auto it = exec_.input_blocks.find(info->name);
    if (it != exec_.input_blocks.end()) { // an input no operator reads has no blocks
        std::vector<std::byte> block;
        for (physical::BufferId id : it->second) {
            const physical::Buffer& buffer = exec_.buffers[id];
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
        const bool loaded =
            is_resident(name) ? resident_->written(name) : instance.loaded.count(name) > 0;
        if (!loaded) {
            return absl::FailedPreconditionError(absl::StrCat(
                "input '", name, "' ", graph_.tensor(id).type.to_string(), " was never loaded"));
        }
    }
    {
        std::shared_lock<std::shared_mutex> reading;
        if (resident_) {
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
    auto it = exec_.outputs.find(std::string(name));
    if (it == exec_.outputs.end()) {
        std::vector<std::string> saved;
        for (const auto& [output, buffer] : exec_.outputs) {
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
    const physical::Buffer& buffer = exec_.buffers[it->second];
    std::vector<std::byte> bytes(buffer.bytes());
    EINSUMMABLE_RETURN_IF_ERROR(
        buffer.resident
            ? absl::InternalError("a saved output in resident memory") // saved inputs never are
            : instance.executable->read_buffer(it->second, absl::MakeSpan(bytes)));
    return bytes;
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
    std::vector<std::vector<int64_t>> total(exec_.devices, std::vector<int64_t>(exec_.devices, 0));
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
    std::vector<int64_t> total(exec_.devices, 0);
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
    std::string out = logical::explain_text(graph_, logical_);
    absl::StrAppend(&out, "\n", physical::explain_exchanges(graph_, physical_));
    absl::StrAppend(&out, "\nbytes moved per execute, by device pair (from the programs):\n",
                    pair_table(physical_.program_bytes()));
    absl::StrAppend(&out, "peak memory per device (static plan): ",
                    absl::StrJoin(exec_.arena_bytes, ", "), " B\n");
    if (resident_) {
        absl::StrAppend(
            &out, "resident inputs, read in place (", resident_names_.size(),
            ", shared with the model's other plans): ", absl::StrJoin(resident_names_, ", "),
            "; resident memory per device: ", absl::StrJoin(resident_->allocated_bytes(), ", "),
            " B\n");
    }
    if (options_.device_memory_bytes > 0) {
        std::vector<int64_t> weights;
        std::vector<int64_t> activations;
        for (const DeviceNeed& device : need_) {
            weights.push_back(device.weights);
            activations.push_back(device.activations);
        }
        absl::StrAppend(
            &out, "device memory: ", options_.device_memory_bytes,
            " B per device; one instance needs weights ", absl::StrJoin(weights, ", "),
            " B + activations ", absl::StrJoin(activations, ", "), " B; ", instances_.size(),
            " instance", instances_.size() == 1 ? "" : "s",
            weights_unreplicated_ ? "; planned again with its weights unreplicated to fit" : "",
            "\n");
    }
    if (options_.batch_invariant) {
        // A baseline keeps its fixed rule (logical::PlannerOptions::batch_invariant).
        const int64_t aggregating = std::count_if(
            logical_.operators.begin(), logical_.operators.end(),
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
    absl::StrAppend(&out, "exec graph: ", exec_.buffers.size(), " buffers, ", exec_.nodes.size(),
                    " nodes on the ", backend_->name(), " backend\n");
    return out;
}

} // namespace einsummable::runtime
