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
    if (absl::Status status = graph.validate(); !status.ok()) {
        return status;
    }
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

absl::Status Plan::finish(const support::Cancellation* cancellation) {
    // Resident inputs: read in place from the given ones, or laid out as this plan reads them.
    const physical::ResidentLayout* layout =
        options_.resident ? &options_.resident->layout() : nullptr;
    physical::ResidentLayout defined;
    if (layout == nullptr && !options_.resident_inputs.empty()) {
        defined = physical::define_resident_layout(graph_, physical_, options_.resident_inputs);
        if (!defined.tensors.empty()) {
            layout = &defined;
        }
    } else if (layout != nullptr && options_.resident_defines &&
               physical::define_resident_layout(graph_, physical_, options_.resident_inputs) !=
                   *layout) {
        return absl::FailedPreconditionError(
            "the plan lays its resident inputs out differently from the resident weights it "
            "was asked to define again");
    }
    absl::StatusOr<physical::ExecGraph> exec =
        physical::lower(graph_, physical_, layout, cancellation);
    if (!exec.ok()) {
        return exec.status();
    }
    // Preparing the backend is bounded by the plan's size; the last point to stop at.
    if (absl::Status status = support::check_cancelled(cancellation, "the backend's preparation");
        !status.ok()) {
        return status;
    }
    exec_ = *std::move(exec);
    for (const auto& [id, tensor] : physical::pinned_inputs(graph_, layout, options_.devices)) {
        resident_names_.insert(graph_.tensor(id).name);
    }
    if (!resident_names_.empty()) {
        if (layout == &defined) {
            absl::StatusOr<std::shared_ptr<ResidentWeights>> weights =
                ResidentWeights::allocate(std::move(defined), *backend_);
            if (!weights.ok()) {
                return weights.status();
            }
            resident_ = *std::move(weights);
        } else {
            resident_ = options_.resident;
        }
    }
    instances_.resize(std::max(options_.instances, 1));
    for (Instance& instance : instances_) {
        absl::StatusOr<std::unique_ptr<Executable>> executable =
            backend_->prepare(exec_, resident_ ? resident_->memory() : nullptr);
        if (!executable.ok()) {
            return executable.status();
        }
        instance.executable = *std::move(executable);
    }
    return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Plan>> Plan::compile(ir::Graph graph, const CompileOptions& options,
                                                    std::shared_ptr<Backend> backend) {
    absl::StatusOr<std::unique_ptr<Plan>> plan =
        start(std::move(graph), options, std::move(backend));
    if (!plan.ok()) {
        return plan.status();
    }
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
    // Pinned inputs: the planner pays for their tiling, the exchanges read them in place.
    const physical::ResidentLayout* pinned =
        options.resident && !options.resident_defines ? &options.resident->layout() : nullptr;
    planner_options.pinned = physical::pinned_tilings((*plan)->graph_, pinned, options.devices);
    physical_options.resident = pinned;
    if (options.objective == physical::Objective::time) {
        // The search simulates plans on `topology` with the options compiled below, so the
        // plan it finds is timed as it will be built.
        absl::StatusOr<physical::TimeSearchResult> found = physical::optimize_for_time(
            (*plan)->graph_, planner_options, topology, physical_options);
        if (!found.ok()) {
            return found.status();
        }
        (*plan)->logical_ = std::move(found->plan);
    } else {
        absl::StatusOr<logical::LogicalPlan> logical =
            logical::optimize((*plan)->graph_, planner_options);
        if (!logical.ok()) {
            return logical.status();
        }
        (*plan)->logical_ = *std::move(logical);
    }
    absl::StatusOr<physical::PhysicalPlan> physical =
        physical::compile_physical((*plan)->graph_, (*plan)->logical_, topology, physical_options);
    if (!physical.ok()) {
        return physical.status();
    }
    (*plan)->physical_ = *std::move(physical);
    if (absl::Status status = (*plan)->finish(cancellation); !status.ok()) {
        return status;
    }
    return plan;
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
    const physical::ResidentLayout* pinned =
        options.resident && !options.resident_defines ? &options.resident->layout() : nullptr;
    planner_options.pinned = physical::pinned_tilings((*plan)->graph_, pinned, options.devices);
    absl::StatusOr<physical::RestoredPlan> restored = physical::restore_plan(
        (*plan)->graph_, planner_options, topology, options.schedule, record, pinned);
    if (!restored.ok()) {
        return restored.status();
    }
    (*plan)->logical_ = std::move(restored->logical);
    (*plan)->physical_ = std::move(restored->physical);
    if (absl::Status status = (*plan)->finish(); !status.ok()) {
        return status;
    }
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

Plan::Lease Plan::acquire() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
        for (size_t i = 0; i < instances_.size(); ++i) {
            if (!instances_[i].busy) {
                instances_[i].busy = true;
                return Lease(this, static_cast<int>(i));
            }
        }
        freed_.wait(lock);
    }
}

Plan::Lease Plan::acquire_instance(int index) {
    std::unique_lock<std::mutex> lock(mutex_);
    freed_.wait(lock, [&] { return !instances_[index].busy; });
    instances_[index].busy = true;
    return Lease(this, index);
}

void Plan::release(int index) {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        instances_[index].busy = false;
    }
    freed_.notify_all();
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
            if (absl::Status status = instance.executable->write_buffer(id, block); !status.ok()) {
                return status;
            }
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
        if (absl::Status status = instance.executable->run(); !status.ok()) {
            return status;
        }
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
    absl::Status status =
        buffer.resident
            ? absl::InternalError("a saved output in resident memory") // saved inputs never are
            : instance.executable->read_buffer(it->second, absl::MakeSpan(bytes));
    if (!status.ok()) {
        return status;
    }
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
    absl::StatusOr<std::vector<std::byte>> bytes = offload_bytes(name);
    if (!bytes.ok()) {
        return bytes.status();
    }
    return plan_->to_values(name, *bytes);
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
    absl::StrAppend(&out, "exec graph: ", exec_.buffers.size(), " buffers, ", exec_.nodes.size(),
                    " nodes on the ", backend_->name(), " backend\n");
    return out;
}

} // namespace einsummable::runtime
